"""The few-row kernel's throughput by rows: where memory prices a product and where the FMAs do.

L independent products y = x @ W_l of one shape (K x N) in one jit, x of T rows, the weights
packed once (`specjax.kernels.pack`). XLA may run independent FFI calls side by side, so read
the figures as the machine's throughput (wall time of the call over L), not one product's
latency. Per T: us a product, GB/s of weights and GFLOP/s, median of `--repeats` rounds (the
T values in a fresh random order every round, `--calls` calls a timing).

    python experiments/kernel_throughput.py --shape 384 1024     # the quickstart's MLP: L3
    python experiments/kernel_throughput.py --shape 576 1536     # SmolLM2's: memory
    python experiments/kernel_throughput.py --peak               # and this CPU's FMA peak

`--peak` also compiles a loop of independent FMAs in registers (no memory traffic) with the
kernels' compiler and `-march=native` and times it on one core and on every core: the
float32 FMA peak the GFLOP/s column is a fraction of (on a Zen 4 a 512-bit FMA issues at one
a cycle, on a Zen 5 at two).

Prints a table and the CPU's description; `--out` writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specjax import kernels
from specjax.kernels import build

PEAK_SOURCE = r"""
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
typedef float vf __attribute__((vector_size(64)));  // the compiler splits it on AVX2
static float run(long iters) {
  vf a[12], b, c;
  for (int i = 0; i < 12; ++i) a[i] = vf{} + (1.0f + i * 1e-7f);
  b = vf{} + 0.999999f;
  c = vf{} + 1e-7f;
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = a[i] * b + c;  // 12 chains hide the FMA latency
  float s = 0;
  for (int i = 0; i < 12; ++i) s += a[i][0] + a[i][15];
  return s;
}
int main(int argc, char** argv) {
  const long iters = 100000000 / 12;
  const int all = atoi(argv[1]);
  for (int threads : {1, all}) {
    double best = 0;
    for (int r = 0; r < 5; ++r) {
      std::vector<std::thread> pool;
      std::vector<float> sink(threads);
      auto t0 = std::chrono::steady_clock::now();
      for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { sink[t] = run(iters); });
      for (auto& t : pool) t.join();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double gflops = threads * iters * 12.0 * 16 * 2 / s / 1e9;
      if (gflops > best) best = gflops;
    }
    printf("%d %.1f\n", threads, best);
  }
}
"""


def fma_peak() -> dict:
    """{threads: GFLOP/s}: float32 FMAs in registers on 1 core and on every core."""
    compiler = build._compiler()
    if compiler is None:
        raise SystemExit("--peak needs a C++ compiler (set $CXX)")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "peak.cc", Path(tmp) / "peak"
        src.write_text(PEAK_SOURCE)
        cmd = [compiler, "-O3", "-march=native", "-std=c++17", "-pthread", str(src), "-o", str(exe)]
        subprocess.run(cmd, check=True)
        out = subprocess.run([str(exe), str(os.cpu_count())], check=True, capture_output=True)
    return {int(t): float(g) for t, g in (ln.split() for ln in out.stdout.decode().splitlines())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs=2, default=[384, 1024], metavar=("K", "N"))
    ap.add_argument("--matrices", type=int, default=12)
    ap.add_argument("--T", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 8, 9, 12, 16])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--out", default=None)
    ap.add_argument("--peak", action="store_true", help="also time this CPU's FMA peak")
    args = ap.parse_args()
    peak = fma_peak() if args.peak else None  # first: a missing compiler fails at once
    K, N = args.shape
    rng = np.random.default_rng(0)
    ws = [kernels.pack(jnp.asarray(rng.standard_normal((K, N)), jnp.float32))
          for _ in range(args.matrices)]  # fmt: skip
    f = jax.jit(lambda x, ws: [kernels.matmul(x, w) for w in ws])
    xs = {T: jnp.asarray(rng.standard_normal((1, T, K)), jnp.float32) for T in args.T}
    for T in args.T:
        jax.block_until_ready(f(xs[T], ws))  # compile outside the timing
    times = {T: [] for T in args.T}
    for r in range(args.repeats):
        for T in np.random.default_rng(r).permutation(args.T):
            start = time.perf_counter()
            for _ in range(args.calls):
                jax.block_until_ready(f(xs[T], ws))
            times[T].append((time.perf_counter() - start) / args.calls / args.matrices)
    rows = []
    print(f"{args.matrices} products of {K} x {N} ({args.matrices * K * N * 4 / 1e6:.0f} MB)")
    print("  T   us/product    GB/s  GFLOP/s")
    for T in args.T:
        s = statistics.median(times[T])
        row = dict(T=T, us=s * 1e6, gb_s=K * N * 4 / s / 1e9, gflop_s=2 * T * K * N / s / 1e9)
        rows.append(row)
        print(f"{T:3d} {row['us']:12.1f} {row['gb_s']:7.1f} {row['gflop_s']:8.1f}")
    if peak:
        top = max(peak.values())
        print("FMA peak GFLOP/s by threads:", peak, "; the products at",
              ", ".join(f"T={r['T']}: {r['gflop_s'] / top:.0%}" for r in rows))  # fmt: skip
    cpu = build.cpu_description()
    print("cpu:", cpu)
    if args.out:
        result = dict(shape=[K, N], rows=rows, cpu=cpu, fma_peak_gflop_s=peak)
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
