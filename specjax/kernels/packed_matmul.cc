// Few-row matmul over weights packed once: y[g, t, n] = sum_k x[g, t, k] * W[g, k, n].
//
// Why: XLA:CPU sends a dot with 2+ rows to a GEMM library that re-packs the weight panel on
// every call, so a T-row product over the same weights costs 2-5 one-row ones. A decode
// step's products are bandwidth-bound: T rows need the weights read once, and up to a few
// dozen rows of FMAs fit under that read. Here the weights are laid out once, at load, as
// panels of 16 output columns, contiguous along K:
//
//   packed[g, nb, k, c] = W[g, k, 16 * nb + c]      (zero where 16 * nb + c >= N)
//
// so one output tile reads its panel front to back (one cache line per k) and keeps
// ROWS x COLS accumulators of 16 floats in registers. Rows beyond ROWS are done in further
// passes over the same panel, which is then in L1/L2: the weights cross the memory bus once
// per call, whatever T is. Accumulation is float32 FMA in k order, with no reassociation
// across k (each output is one dot product summed sequentially).
//
// Work is split over output tiles across XLA's own intra-op thread pool (`parallel_for.h`).
// Several products of one x (q/k/v, gate/up) can share one call and one split of their
// tiles (`PackedMatmulMany`): one call's cost and one wake of the other thread, not one each.
//
// Buffers (float32 or bfloat16 weights, float32 activations and outputs, row-major):
//   x [G, T, K], packed [Gw, NB, K, 16], y [G, T, N] with NB = ceil(N / 16) and Gw >= G:
//   the first G matrices are used (Medusa's first n heads, no slice of the stack copied).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "parallel_for.h"
#include "simd.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using specjax::kVecLanes;
using specjax::loadv;
using specjax::vf;

constexpr int kLanes = 16;  // output columns per panel

// A panel's 16 columns are kSub native vectors (`simd.h`).
constexpr int kSub = kLanes / kVecLanes;  // vectors per panel row

// Register tile: ROWS rows x COLS panels, ROWS * COLS * kSub accumulators. AVX-512 has 32
// vector registers, AVX2 16, so the tile is smaller there.
// Wider tiles (more panels in flight per k) for products of at most `wide_rows` rows (the
// call's attribute; kWideRows by default). AVX-512: 4 panels in passes of up to 6 rows (24
// accumulators) for 1-6 and 9-12 rows, 3 panels in passes of up to 8 (also 24) for 7-8 and
// 13 or more; the 2-panel x 8-row tile only where the attribute asks for it (A/B runs).
// Measured on a Zen 5 EPYC (BENCHMARKS.md "Few-row kernel"), 4 panels were 1.06-1.37x faster
// than 2 at 2-5 rows on weights streamed from memory (SmolLM2's 576 x 1536, 768 x 2048),
// 0.95x at 1-2 rows on weights that stay in L3. On a Zen 4 (one 512-bit FMA a cycle; same
// section, 2026-12-07), against the 2-panel tile: 6 rows 0.69x, 9-12 rows 0.77-0.85x, one
// pass of 3 panels at 7-8 rows 0.85-0.93x the two passes of 4, and 3 panels at 13-40 rows
// 0.91-0.96x the 2-panel tile on the quickstart's MLP shape (0.82-0.89x on SmolLM2's), where
// at 9-12 rows they were 1.08-1.10x the 4-panel passes. With AVX2 a one-panel tile of 1-2
// rows holds too few accumulators to hide the FMA latency, so two panels are in flight
// (measured, same section).
#if defined(__AVX512F__)
constexpr int kRows = 8;
constexpr int kCols = 2;
constexpr int kWideCols = 4;
constexpr int kWideRows = 1 << 30;  // every row count (a call's attribute may lower it)
constexpr int kWideMaxRows = 6;  // 24 accumulators + 4 weight vectors + 1 broadcast of 32
constexpr int kMidCols = 3;  // 7-8 rows: one pass of 3 panels, not two of 4
constexpr int kMidMaxRows = 8;  // 24 accumulators + 3 weight vectors + 1 broadcast
#else
constexpr int kRows = 6;  // 12 accumulators + 2 weight vectors + 1 broadcast of 16 ymm
constexpr int kCols = 1;
constexpr int kWideCols = 2;
constexpr int kWideRows = 2;  // one panel's 2 accumulators a row are FMA-latency bound
constexpr int kWideMaxRows = 2;
constexpr int kMidCols = 0;  // none
constexpr int kMidMaxRows = 0;
#endif

// bfloat16 is the top half of a float32: widen by shifting into the high 16 bits.
inline vf loadv(const uint16_t* p) {
  typedef uint32_t u32x __attribute__((vector_size(kVecLanes * 4)));
  typedef uint16_t h16x __attribute__((vector_size(kVecLanes * 2)));
  h16x h;
  std::memcpy(&h, p, sizeof(h));
  u32x wide = __builtin_convertvector(h, u32x) << 16;
  vf v;
  std::memcpy(&v, &wide, sizeof(v));
  return v;
}

// bfloat16 panels hold each pair of k-rows interleaved (`kernels.pair_rows`): the words of a
// row pair are (w[k][c], w[k + 1][c]) column by column, so one load of kVecLanes words gives
// both rows' values of kVecLanes columns, widened by a shift (k) and a mask (k + 1), two ALU
// ops per two vectors; a zero-extend per vector (a shuffle) is what widening one row costs.
inline void loadv_pair(const uint16_t* p, vf& lo, vf& hi) {
  typedef uint32_t u32x __attribute__((vector_size(kVecLanes * 4)));
  u32x words;
  std::memcpy(&words, p, sizeof(words));
  const u32x a = words << 16, b = words & 0xFFFF0000u;
  std::memcpy(&lo, &a, sizeof(lo));
  std::memcpy(&hi, &b, sizeof(hi));
}

struct Problem {
  const float* x;
  const void* w;
  float* y;
  int64_t G, T, K, N, NB;
  bool bf16;
};

// One tile: rows [r0, r0 + R) of panels [nb, nb + C) of matrix g.
template <typename W, int R, int C>
void tile(const Problem& p, int64_t g, int64_t nb, int64_t r0) {
  constexpr int V = C * kSub;  // accumulator vectors per row
  const int64_t K = p.K;
  const float* x = p.x + (g * p.T + r0) * K;
  const W* w = static_cast<const W*>(p.w) + (g * p.NB + nb) * K * kLanes;
  vf acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[r][v] = vf{};
  int64_t k0 = 0;
  if constexpr (std::is_same_v<W, uint16_t>) {
    // Row pairs: k, then k + 1, each summed in k order as below.
    for (; k0 + 1 < K; k0 += 2) {
      vf w0[V], w1[V];
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        loadv_pair(w + ((v / kSub) * K + k0) * kLanes + (v % kSub) * kVecLanes * 2, w0[v], w1[v]);
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const float xr = x[r * K + k0];
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) acc[r][v] += xr * w0[v];
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const float xr = x[r * K + k0 + 1];
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) acc[r][v] += xr * w1[v];
      }
    }
  }
  for (int64_t k = k0; k < K; ++k) {  // float32 rows; an odd K's last bfloat16 row
    vf wk[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      wk[v] = loadv(w + ((v / kSub) * K + k) * kLanes + (v % kSub) * kVecLanes);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      // A scalar times a vector is a broadcast load and an FMA. (`vf{} + x` would add a
      // zero first, an extra instruction a row, which the compiler must keep: 0 + -0 = +0.)
      const float xr = x[r * K + k];
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] += xr * wk[v];
    }
  }
  for (int c = 0; c < C; ++c) {
    const int64_t col = (nb + c) * kLanes;
    const int64_t width = std::min<int64_t>(kLanes, p.N - col);
    for (int r = 0; r < R; ++r) {
      float* out = p.y + (g * p.T + r0 + r) * p.N + col;
      float tmp[kLanes];
      std::memcpy(tmp, &acc[r][c * kSub], sizeof(tmp));
      std::memcpy(out, tmp, width * sizeof(float));
    }
  }
}

// One tile of R rows (R <= kRows), dispatched to its unrolled instance.
template <typename W, int C>
void tile_of(const Problem& p, int64_t g, int64_t nb, int64_t r0, int64_t R) {
  switch (R) {
#define SPECJAX_ROWS(n)          \
  case n:                        \
    if constexpr (n <= kRows) {  \
      tile<W, n, C>(p, g, nb, r0); \
    }                            \
    break;
    SPECJAX_ROWS(1)
    SPECJAX_ROWS(2)
    SPECJAX_ROWS(3)
    SPECJAX_ROWS(4)
    SPECJAX_ROWS(5)
    SPECJAX_ROWS(6)
    SPECJAX_ROWS(7)
    SPECJAX_ROWS(8)
#undef SPECJAX_ROWS
    default:
      break;
  }
}

// Rows one pass of a C-panel tile takes (its accumulators fill the registers).
constexpr int64_t max_pass_rows(int C) {
  return C == kWideCols ? kWideMaxRows : (C == kMidCols ? kMidMaxRows : kRows);
}

// All rows of panels [nb, nb + C) in ceil(T / max rows) passes of balanced height (T = 8 on
// AVX2 is 4 + 4 rows, not 6 + 2): a pass of R rows issues 2R FMAs a k, and below 4 rows too
// few are in flight to hide the FMA latency, so a short remainder pass costs about as much
// as a full one.
template <typename W, int C>
void column_group(const Problem& p, int64_t g, int64_t nb) {
  const int64_t max_rows = max_pass_rows(C);
  const int64_t passes = (p.T + max_rows - 1) / max_rows;
  const int64_t base = p.T / passes, extra = p.T % passes;  // the first `extra` get base + 1
  int64_t r0 = 0;
  for (int64_t i = 0; i < passes; ++i) {
    const int64_t rows = base + (i < extra ? 1 : 0);
    tile_of<W, C>(p, g, nb, r0, rows);
    r0 += rows;
  }
}

// Work item i: matrix g, panels [nb, nb + cols) (single panels where NB runs out).
template <typename W>
void run_item(const Problem& p, int64_t item, int64_t groups_per_matrix, int cols) {
  const int64_t g = item / groups_per_matrix;
  const int64_t nb = (item % groups_per_matrix) * cols;
  if (nb + cols <= p.NB) {
    if (cols == kWideCols) {
      column_group<W, kWideCols>(p, g, nb);
    } else if (kMidCols > 1 && cols == kMidCols) {
      column_group<W, (kMidCols > 1 ? kMidCols : kCols)>(p, g, nb);
    } else {
      column_group<W, kCols>(p, g, nb);
    }
  } else {
    for (int64_t b = nb; b < p.NB; ++b) column_group<W, 1>(p, g, b);
  }
}

// Below this many multiply-adds one thread is faster than waking another. Measured with both
// kernels in whole forwards (BENCHMARKS.md, 2026-12-06): 2^14 for both (was 2^18 for the
// matmul, 2^16 here) made a decode step 1.08-1.17x faster (a 1-token k/v projection and a
// short cache's attention now split over both threads); lower changed nothing.
constexpr int64_t kParallelMinMacs = 1 << 14;

// One product's work: its problem, tile width and work items (output column groups).
struct Job {
  Problem p;
  int cols;
  int64_t groups_per_matrix, items;
};

// Checks the shapes of one product and describes its work; K == 0 writes zeros here.
ffi::Error make_job(const float* x, const void* w, bool bf16, ffi::Span<const int64_t> xd,
                    ffi::Span<const int64_t> wd, float* y, ffi::Span<const int64_t> yd,
                    int64_t wide_rows, Job& job) {
  if (xd.size() != 3 || wd.size() != 4 || yd.size() != 3) {
    return ffi::Error::InvalidArgument("packed_matmul: expected x[G,T,K], w[G,NB,K,16], y[G,T,N]");
  }
  const int64_t G = xd[0], T = xd[1], K = xd[2], N = yd[2], NB = wd[1];
  if (wd[0] < G || wd[2] != K || wd[3] != kLanes || yd[0] != G || yd[1] != T ||
      NB != (N + kLanes - 1) / kLanes) {
    return ffi::Error::InvalidArgument("packed_matmul: x, w and y shapes disagree");
  }
  job.p = Problem{x, w, y, G, T, K, N, NB, bf16};
  if (T > (wide_rows < 0 ? kWideRows : wide_rows)) {
    job.cols = kCols;
  } else if (kMidCols > 1 && T > kWideMaxRows && (T <= kMidMaxRows || T > 2 * kWideMaxRows)) {
    job.cols = kMidCols;  // 7-8 rows in one pass of 3 panels; 13+ in passes of up to 8
  } else {
    job.cols = kWideCols;  // up to 6 rows in one pass of 4 panels, 9-12 in two
  }
  job.groups_per_matrix = (NB + job.cols - 1) / job.cols;
  job.items = (G == 0 || T == 0 || N == 0 || K == 0) ? 0 : G * job.groups_per_matrix;
  if (K == 0) std::fill(y, y + G * T * N, 0.0f);
  return ffi::Error::Success();
}

// Every job's work items in one split over the threads: products of the same activations
// (q/k/v, gate/up) wake the other thread once, not once each.
void run_jobs(ffi::ThreadPool& pool, const Job* jobs, int64_t count) {
  int64_t items = 0, macs = 0;
  for (int64_t j = 0; j < count; ++j) {
    items += jobs[j].items;
    macs += jobs[j].p.G * jobs[j].p.T * jobs[j].p.K * jobs[j].p.N;
  }
  specjax::parallel_for(pool, items, macs >= kParallelMinMacs, [&](int64_t begin, int64_t end) {
    int64_t j = 0, first = 0;  // the job holding item `begin` and its first item
    for (int64_t i = begin; i < end; ++i) {
      while (i >= first + jobs[j].items) first += jobs[j++].items;
      const Job& job = jobs[j];
      if (job.p.bf16) {
        run_item<uint16_t>(job.p, i - first, job.groups_per_matrix, job.cols);
      } else {
        run_item<float>(job.p, i - first, job.groups_per_matrix, job.cols);
      }
    }
  });
}

// One product y = x @ W (weights float32 or bfloat16).
template <ffi::DataType WT>
ffi::Error PackedMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<WT> w,
                        ffi::ResultBuffer<ffi::F32> y, int64_t wide_rows) {
  Job job;
  ffi::Error err =
      make_job(x.typed_data(), w.untyped_data(), WT == ffi::DataType::BF16, x.dimensions(),
               w.dimensions(), y->typed_data(), y->dimensions(), wide_rows, job);
  if (err.failure()) return err;
  run_jobs(pool, &job, 1);
  return ffi::Error::Success();
}

// Up to kMaxMany products y_i = x @ W_i of one x in one call (weights all float32 or all
// bfloat16): the weights as args after x, the outputs in the same order.
constexpr int64_t kMaxMany = 8;

template <ffi::DataType WT>
ffi::Error PackedMatmulMany(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                            ffi::RemainingArgs ws, ffi::RemainingRets ys, int64_t wide_rows) {
  const int64_t count = static_cast<int64_t>(ws.size());
  if (count != static_cast<int64_t>(ys.size()) || count < 1 || count > kMaxMany) {
    return ffi::Error::InvalidArgument("packed_matmul_many: 1-8 weights, one output each");
  }
  Job jobs[kMaxMany];
  for (int64_t i = 0; i < count; ++i) {
    auto w = ws.get<ffi::Buffer<WT>>(i);
    auto y = ys.get<ffi::Buffer<ffi::F32>>(i);
    if (w.has_error()) return w.error();
    if (y.has_error()) return y.error();
    ffi::Error err = make_job(x.typed_data(), w->untyped_data(), WT == ffi::DataType::BF16,
                              x.dimensions(), w->dimensions(), (*y)->typed_data(),
                              (*y)->dimensions(), wide_rows, jobs[i]);
    if (err.failure()) return err;
  }
  run_jobs(pool, jobs, count);
  return ffi::Error::Success();
}

// Rows of a bfloat16 table packed as panels [NB, D, 16] (token t is lane t % 16 of panel
// t / 16, its row pairs interleaved), widened to float32: out[r, d] = W[t_r, d]. XLA:CPU runs a
// gather of bfloat16 in float32, converting the whole table first, and a decode loop hoists
// that conversion out of the loop: a float32 copy of the table each call. Tokens arrive
// clamped to [0, NB * 16) (kernels.embed_lookup).
ffi::Error TableRowsBF16(ffi::Buffer<ffi::BF16> panels, ffi::Buffer<ffi::S32> tokens,
                         ffi::ResultBuffer<ffi::F32> out) {
  auto pd = panels.dimensions();
  if (pd.size() != 3 || pd[2] != kLanes) {
    return ffi::Error::InvalidArgument("table_rows: panels must be [NB, D, 16]");
  }
  const int64_t NB = pd[0], D = pd[1], R = tokens.element_count();
  if (out->element_count() != R * D) {
    return ffi::Error::InvalidArgument("table_rows: output must hold [R, D] floats");
  }
  const uint16_t* src = reinterpret_cast<const uint16_t*>(panels.untyped_data());
  const int32_t* tok = tokens.typed_data();
  float* dst = out->typed_data();
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = tok[r];
    if (t < 0 || t >= NB * kLanes) {
      return ffi::Error::InvalidArgument("table_rows: token out of the table's range");
    }
    const uint16_t* panel = src + (t / kLanes) * D * kLanes;
    const int64_t c = t % kLanes, even = D - D % 2;
    for (int64_t d = 0; d < D; ++d) {  // row pairs interleaved (kernels.pair_rows)
      const int64_t at = d < even ? (d / 2) * 2 * kLanes + 2 * c + d % 2 : d * kLanes + c;
      const uint32_t bits = static_cast<uint32_t>(panel[at]) << 16;
      std::memcpy(dst + r * D + d, &bits, sizeof(float));
    }
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxTableRowsBF16, TableRowsBF16,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxPackedMatmulF32, PackedMatmul<ffi::DataType::F32>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("wide_rows"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxPackedMatmulBF16, PackedMatmul<ffi::DataType::BF16>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("wide_rows"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxPackedMatmulManyF32, PackedMatmulMany<ffi::DataType::F32>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int64_t>("wide_rows"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecjaxPackedMatmulManyBF16, PackedMatmulMany<ffi::DataType::BF16>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int64_t>("wide_rows"));
