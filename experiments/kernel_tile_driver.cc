// The few-row kernel's register tile outside XLA: GFLOP/s of y = x @ W over packed float32
// panels, with the weights hot in L2 (one matrix) or streamed from L3 (several), on one or
// more threads splitting the work items evenly (no XLA, no FFI call, no thread pool wake).
// What it separates: the tile's own efficiency from what the stream and the split cost.
//
//   g++ -O3 -std=c++17 -march=native -pthread -w \
//       -I$(python -c "import jax; print(jax.ffi.include_dir())") \
//       experiments/kernel_tile_driver.cc -o kernel_tile_driver
//   ./kernel_tile_driver K N T MATRICES THREADS    # e.g. 384 1024 24 18 2
//
// Prints the best of 20 rounds (20 passes over the matrices each), us a product and GFLOP/s.
#include "../specjax/kernels/packed_matmul.cc"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s K N T MATRICES THREADS\n", argv[0]);
    return 2;
  }
  const int64_t K = std::atoll(argv[1]), N = std::atoll(argv[2]), T = std::atoll(argv[3]);
  const int mats = std::atoi(argv[4]), threads = std::atoi(argv[5]);
  const int64_t NB = (N + 15) / 16;
  std::vector<float> w(mats * NB * K * 16), x(T * K);
  for (auto& v : w) v = (std::rand() % 1000) / 1000.0f - 0.5f;
  for (auto& v : x) v = (std::rand() % 1000) / 1000.0f - 0.5f;
  const int iters = 20;
  double best = 1e9;
  for (int round = 0; round < 20; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    auto work = [&](int tid) {
      std::vector<float> y(T * N);
      for (int it = 0; it < iters; ++it) {
        for (int m = 0; m < mats; ++m) {
          Job job;
          int64_t xd[3] = {1, T, K}, wd[4] = {1, NB, K, 16}, yd[3] = {1, T, N};
          make_job(x.data(), w.data() + m * NB * K * 16, false, ffi::Span<const int64_t>(xd, 3),
                   ffi::Span<const int64_t>(wd, 4), y.data(), ffi::Span<const int64_t>(yd, 3), -1,
                   job);
          const int64_t lo = job.items * tid / threads, hi = job.items * (tid + 1) / threads;
          for (int64_t i = lo; i < hi; ++i) {
            run_item<float>(job.p, i, job.groups_per_matrix, job.cols);
          }
        }
      }
    };
    std::vector<std::thread> helpers;
    for (int t = 1; t < threads; ++t) helpers.emplace_back(work, t);
    work(0);
    for (auto& h : helpers) h.join();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt / iters / mats);
  }
  std::printf("K=%ld N=%ld T=%ld matrices=%d threads=%d: %.1f us a product, %.1f GFLOP/s\n",
              static_cast<long>(K), static_cast<long>(N), static_cast<long>(T), mats, threads,
              best * 1e6, 2.0 * K * N * T / best / 1e9);
  return 0;
}
