// Attention of a small block of queries over the KV cache, reading only the visible slots.
//
// Why: a decode step or a verify block has a few query rows per head and a cache of S slots.
// XLA:CPU runs it as two small batched dots (scores [B, K, G*T, S], output), a masked
// softmax over all S slots and a where() that zeroes the invisible values: five passes over
// [*, S] arrays, about 1.3 ms a step for a 30-layer model at S = 384 where the cache reads
// alone take a quarter of that. Here the query rows of one KV head (a tile of up to 16) walk
// the slots they see together: scores, a vectorised exp, then the values of those slots.
// The slots are split into chunks that both threads take, each a softmax partial (max, sum,
// weighted values) combined at the end (flash-decoding). Invisible slots are never read, so
// whatever they hold (stale, NaN) cannot leak, and a row's result does not depend on how many
// rows its block has.
//
// Buffers (float32, row-major; the cache as stored, with the layer chosen by an attribute so
// no slice of it is copied):
//   q [B, T, N, H], k and v [L, B, KH, S, H], mask [B, T, S] (bool), out [B, T, N, H];
//   query head n reads KV head n / (N / KH) (grouped-query attention).
// out[b, t, n] = sum_s p_s v[layer, b, kh, s] / sum_s p_s over visible s, with
// p_s = exp(scale * q.k_s - max_s'(scale * q.k_s')); zero for a row that sees no slot.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "parallel_for.h"
#include "simd.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using specjax::hsum;
using specjax::kVecLanes;
using specjax::loadv;
using specjax::storev;
using specjax::vf;
using specjax::vi;

// exp(x) for a vector (Cephes' single-precision polynomial, about 1 ulp). NaN stays NaN; below
// -87.3 the result is the smallest normal float, not 0 (scores here are shifted by their row
// maximum, so only slots with a vanishing weight get there).
inline vf expv(vf x) {
  const vf hi = vf{} + 88.3762626647949f, lo = vf{} - 87.3365447505531f;
  x = x > hi ? hi : x;  // comparisons with NaN are false: NaN passes through
  x = x < lo ? lo : x;
  vf fx = x * 1.44269504088896341f + 0.5f;
  vi n = __builtin_convertvector(fx, vi);  // truncation; floor for negative fx below
  const vf nf = __builtin_convertvector(n, vf);
  n += (nf > fx);  // a true comparison is -1
  fx = __builtin_convertvector(n, vf);
  x = x - fx * 0.693359375f - fx * -2.12194440e-4f;
  vf y = x * 1.9875691500E-4f + 1.3981999507E-3f;
  y = y * x + 8.3334519073E-3f;
  y = y * x + 4.1665795894E-2f;
  y = y * x + 1.6666665459E-1f;
  y = y * x + 5.0000001201E-1f;
  y = y * x * x + x + 1.0f;
  vi bits = (n + 127) << 23;
  vf scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

// a . b over H floats: HV > 0 vectors exactly (H = HV * kVecLanes, unrolled, in registers),
// or any H with HV = 0.
template <int HV>
inline float dot(const float* a, const float* b, int64_t H) {
  if constexpr (HV > 0) {
    vf acc[HV];
#pragma GCC unroll 8
    for (int i = 0; i < HV; ++i) acc[i] = loadv(a + i * kVecLanes) * loadv(b + i * kVecLanes);
#pragma GCC unroll 8
    for (int w = 1; w < HV; w *= 2) {
#pragma GCC unroll 8
      for (int i = 0; i + w < HV; i += 2 * w) acc[i] += acc[i + w];
    }
    return hsum(acc[0]);
  } else {
    vf acc0{}, acc1{};
    int64_t h = 0;
    for (; h + 2 * kVecLanes <= H; h += 2 * kVecLanes) {
      acc0 += loadv(a + h) * loadv(b + h);
      acc1 += loadv(a + h + kVecLanes) * loadv(b + h + kVecLanes);
    }
    for (; h + kVecLanes <= H; h += kVecLanes) acc0 += loadv(a + h) * loadv(b + h);
    float s = hsum(acc0 + acc1);
    for (; h < H; ++h) s += a[h] * b[h];
    return s;
  }
}

struct Problem {
  const float *q, *k, *v;
  const bool* mask;
  float* out;
  int64_t B, T, N, H, KH, S, layer;
  float scale;
};

// Query rows per tile: the rows of one KV head walk its slots together, so each key and value
// row is fetched once per tile and read from L1 by the others (one row at a time re-streamed
// the head's cache per row).
constexpr int64_t kTileRows = 16;
// Slots per chunk: the cache is read from memory (the weights streamed through the caches in
// between), so one head's slots are split into chunks that threads take in parallel, each
// with its own softmax partial (flash-decoding), combined at the end.
constexpr int64_t kChunkSlots = 128;

// Scratch of one worker: a chunk's scores [rows, kChunkSlots].
struct Scratch {
  std::vector<float> scores = std::vector<float>(kTileRows * kChunkSlots);
};

// A chunk's softmax partial for one row: its max score, sum of exp(score - max), the values
// weighted by exp(score - max), and whether it sees any slot.
struct Partials {
  int64_t H;
  std::vector<float> data;  // per (item, row): [H acc, top, sum, sees]
  float* at(int64_t item, int64_t row) { return &data[(item * kTileRows + row) * (H + 3)]; }
};

// One tile and chunk: query rows [r0, r0 + R) of KV head kh in batch row b, where row r is
// query (t, g) = (r / G, r % G), query head n = kh * G + g, over slots [j0, j1).
template <int HV>
void tile(const Problem& p, int64_t b, int64_t kh, int64_t r0, int64_t R, int64_t j0,
          int64_t j1, Scratch& s, Partials& parts, int64_t item) {
  const int64_t H = p.H, S = p.S, G = p.N / p.KH;
  const int64_t head = ((p.layer * p.B + b) * p.KH + kh) * S * H;
  const float* k = p.k + head;
  const float* v = p.v + head;
  const float* q[kTileRows];
  const bool* visible[kTileRows];
  float top[kTileRows];
  bool sees[kTileRows];
  int64_t last = j0 - 1;  // the last slot of the chunk any row of the tile sees
  for (int64_t i = 0; i < R; ++i) {
    const int64_t t = (r0 + i) / G, n = kh * G + (r0 + i) % G;
    q[i] = p.q + ((b * p.T + t) * p.N + n) * H;
    visible[i] = p.mask + (b * p.T + t) * S;
    top[i] = -INFINITY;
    sees[i] = false;
    for (int64_t j = j1 - 1; j >= j0; --j) {
      if (visible[i][j]) {
        last = std::max(last, j);
        sees[i] = true;
        break;
      }
    }
  }
  // Scores, slot by slot: row i's score for slot j, or -inf where it does not see j.
  const int64_t span = last + 1 - j0;
  for (int64_t j = 0; j < span; ++j) {
    const float* kj = k + (j0 + j) * H;
    for (int64_t i = 0; i < R; ++i) {
      float score = -INFINITY;
      if (visible[i][j0 + j]) {
        score = dot<HV>(q[i], kj, H) * p.scale;
        top[i] = score > top[i] ? score : top[i];
      }
      s.scores[i * kChunkSlots + j] = score;
    }
  }
  // Weights exp(score - top), exactly zero where not seen (NaN scores stay NaN), and their sum.
  const int64_t padded = (span + kVecLanes - 1) / kVecLanes * kVecLanes;
  const vf neg_inf = vf{} - INFINITY;
  for (int64_t i = 0; i < R; ++i) {
    float* row = &s.scores[i * kChunkSlots];
    for (int64_t j = span; j < padded; ++j) row[j] = -INFINITY;  // the last vector's padding
    vf total{};
    for (int64_t j = 0; j < span; j += kVecLanes) {
      const vf x = loadv(row + j);
      const vf e = x == neg_inf ? vf{} : expv(x - top[i]);
      storev(row + j, e);
      total += e;
    }
    float* part = parts.at(item, i);
    std::fill(part, part + H, 0.0f);
    part[H] = top[i];
    part[H + 1] = hsum(total);
    part[H + 2] = sees[i] ? 1.0f : 0.0f;
  }
  // Values, slot by slot; a slot a row does not see is skipped (0 * NaN would be NaN).
  for (int64_t j = 0; j < span; ++j) {
    const float* vj = v + (j0 + j) * H;
    for (int64_t i = 0; i < R; ++i) {
      if (!visible[i][j0 + j]) continue;
      const float w = s.scores[i * kChunkSlots + j];
      float* a = parts.at(item, i);
      if constexpr (HV > 0) {
#pragma GCC unroll 16
        for (int c = 0; c < HV; ++c) {
          storev(a + c * kVecLanes, loadv(a + c * kVecLanes) + w * loadv(vj + c * kVecLanes));
        }
      } else {
        for (int64_t h = 0; h < H; ++h) a[h] += w * vj[h];
      }
    }
  }
}

using TileFn = void (*)(const Problem&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                        Scratch&, Partials&, int64_t);

// The tile function for head size H: unrolled over whole vectors for the common sizes.
TileFn tile_for(int64_t H) {
  if (H % kVecLanes == 0) {
    switch (H / kVecLanes) {
      case 1: return tile<1>;
      case 2: return tile<2>;
      case 4: return tile<4>;
      case 8: return tile<8>;
      case 16: return tile<16>;
      default: break;
    }
  }
  return tile<0>;
}

// out = sum_c exp(top_c - top) acc_c / sum_c exp(top_c - top) sum_c over the chunks that see
// a slot (top = the largest top_c); zero for a row that sees none.
void combine(Partials& parts, int64_t first_item, int64_t chunks, int64_t row, float* out) {
  const int64_t H = parts.H;
  float top = -INFINITY;
  bool sees = false;
  for (int64_t c = 0; c < chunks; ++c) {
    const float* part = parts.at(first_item + c, row);
    if (part[H + 2] == 0.0f) continue;
    sees = true;
    top = part[H] > top ? part[H] : top;
  }
  std::fill(out, out + H, 0.0f);
  if (!sees) return;
  float total = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
    const float* part = parts.at(first_item + c, row);
    if (part[H + 2] == 0.0f) continue;
    // A chunk whose every score was NaN keeps top -inf; its NaN sum still propagates.
    const float factor = part[H] == top ? 1.0f : std::exp(part[H] - top);
    total += factor * part[H + 1];
    for (int64_t h = 0; h < H; ++h) out[h] += factor * part[h];
  }
  const float inv = 1.0f / total;
  for (int64_t h = 0; h < H; ++h) out[h] *= inv;
}

// Below this many score multiply-adds one thread is faster than waking another. Measured
// with both kernels in whole forwards (BENCHMARKS.md, 2026-12-06): 2^14 for both (was 2^18
// for the matmul, 2^16 here) made a decode step 1.08-1.17x faster (a 1-token k/v projection
// and a short cache's attention now split over both threads); lower changed nothing.
constexpr int64_t kParallelMinMacs = 1 << 14;

ffi::Error Attention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                     ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::PRED> mask, int64_t layer,
                     float scale, ffi::ResultBuffer<ffi::F32> out) {
  const auto qd = q.dimensions(), kd = k.dimensions(), md = mask.dimensions();
  if (qd.size() != 4 || kd.size() != 5 || md.size() != 3 || v.dimensions().size() != 5) {
    return ffi::Error::InvalidArgument(
        "cache_attention: expected q[B,T,N,H], k and v [L,B,KH,S,H], mask[B,T,S]");
  }
  const int64_t B = qd[0], T = qd[1], N = qd[2], H = qd[3];
  const int64_t L = kd[0], KH = kd[2], S = kd[3];
  for (size_t i = 0; i < 5; ++i) {
    if (v.dimensions()[i] != kd[i]) {
      return ffi::Error::InvalidArgument("cache_attention: k and v shapes differ");
    }
  }
  if (kd[1] != B || kd[4] != H || md[0] != B || md[1] != T || md[2] != S || KH == 0 ||
      N % KH != 0) {
    return ffi::Error::InvalidArgument("cache_attention: q, cache and mask shapes disagree");
  }
  if (layer < 0 || layer >= L) {
    return ffi::Error::InvalidArgument("cache_attention: layer out of range");
  }
  if (B == 0 || T == 0 || N == 0 || H == 0) return ffi::Error::Success();
  const Problem p{q.typed_data(), k.typed_data(), v.typed_data(), mask.typed_data(),
                  out->typed_data(), B, T, N, H, KH, S, layer, scale};
  // Work items: (batch row, KV head, tile of its T * G query rows, chunk of slots); tiles of
  // balanced height. Chunk c of a tile is item `tile_item * chunks + c`.
  const int64_t rows = T * (N / KH);
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  const int64_t base = rows / tiles, extra = rows % tiles;  // the first `extra` get base + 1
  const int64_t chunks = (S + kChunkSlots - 1) / kChunkSlots;
  const int64_t items = B * KH * tiles * chunks;
  Partials parts{H, std::vector<float>(items * kTileRows * (H + 3))};
  const TileFn fn = tile_for(H);
  auto tile_rows = [&](int64_t tile_id) {
    return std::pair<int64_t, int64_t>{tile_id * base + std::min(tile_id, extra),
                                       base + (tile_id < extra ? 1 : 0)};
  };
  specjax::parallel_for(pool, items, B * T * N * S * H >= kParallelMinMacs,
                        [&](int64_t begin, int64_t end) {
                          Scratch scratch;
                          for (int64_t i = begin; i < end; ++i) {
                            const int64_t chunk = i % chunks, tile_item = i / chunks;
                            const int64_t tile_id = tile_item % tiles, bk = tile_item / tiles;
                            const auto [r0, height] = tile_rows(tile_id);
                            const int64_t j0 = chunk * kChunkSlots;
                            const int64_t j1 = std::min(S, j0 + kChunkSlots);
                            fn(p, bk / KH, bk % KH, r0, height, j0, j1, scratch, parts, i);
                          }
                        });
  const int64_t G = N / KH;
  for (int64_t tile_item = 0; tile_item < B * KH * tiles; ++tile_item) {
    const int64_t tile_id = tile_item % tiles, bk = tile_item / tiles;
    const int64_t b = bk / KH, kh = bk % KH;
    const auto [r0, height] = tile_rows(tile_id);
    for (int64_t i = 0; i < height; ++i) {
      const int64_t t = (r0 + i) / G, n = kh * G + (r0 + i) % G;
      combine(parts, tile_item * chunks, chunks, i, p.out + ((b * T + t) * N + n) * H);
    }
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxCacheAttention, Attention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Attr<int64_t>("layer")
                                  .Attr<float>("scale")
                                  .Ret<ffi::Buffer<ffi::F32>>());
