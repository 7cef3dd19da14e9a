// Work split over XLA's own intra-op thread pool (the FFI ThreadPool), never a pool of our own.
//
// The calling thread claims chunks of items from an atomic counter alongside the helpers it
// scheduled, so a call finishes even if no helper ever runs (no deadlock when the pool is
// busy), and a helper that starts late finds no work. The shared state lives on the heap
// (a late helper still reads its counter after the call returned); `fn` itself is only ever
// called before the call returns, so it may capture the caller's stack by reference.

#ifndef SPECJAX_KERNELS_PARALLEL_FOR_H_
#define SPECJAX_KERNELS_PARALLEL_FOR_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace specjax {

// Pause instructions before the waiting thread yields its core (about 10-100 us).
constexpr int64_t kSpinsBeforeYield = 1 << 12;

struct ParallelState {
  std::function<void(int64_t, int64_t)> fn;  // items [begin, end)
  int64_t items = 0, chunk = 1;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};

  void drain() {
    while (true) {
      const int64_t start = next.fetch_add(chunk, std::memory_order_relaxed);
      if (start >= items) return;
      const int64_t stop = std::min(start + chunk, items);
      fn(start, stop);
      done.fetch_add(stop - start, std::memory_order_release);
    }
  }
};

// Run fn(begin, end) over [0, items), on up to all of the pool's threads when `parallel`.
inline void parallel_for(xla::ffi::ThreadPool& pool, int64_t items, bool parallel,
                         std::function<void(int64_t, int64_t)> fn) {
  if (items <= 0) return;
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  const int64_t workers = parallel && items > 1 ? std::min<int64_t>(threads, items) : 1;
  if (workers == 1) {
    fn(0, items);
    return;
  }
  auto state = std::make_shared<ParallelState>();
  state->fn = std::move(fn);
  state->items = items;
  // Several items per claim keeps the atomic traffic low; 4 claims per worker balance the load.
  state->chunk = std::max<int64_t>(1, items / (workers * 4));
  for (int64_t i = 1; i < workers; ++i) {
    pool.Schedule([state]() { state->drain(); });
  }
  state->drain();
  // Wait for the chunks other workers still hold. Spin briefly (a chunk takes microseconds),
  // then yield: on a busy machine a worker can be preempted mid-chunk, and spinning through
  // its time slice would keep it off the core it needs.
  for (int64_t spins = 0; state->done.load(std::memory_order_acquire) < items; ++spins) {
    if (spins < kSpinsBeforeYield) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace specjax

#endif  // SPECJAX_KERNELS_PARALLEL_FOR_H_
