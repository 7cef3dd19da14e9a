"""How to write a T-row projection x[T, D] @ W[D, F] so it costs about what the 1-row one does.

A verify step runs one target forward over T = 1 + K tokens, so every projection of the target
is a T-row matmul. On this CPU XLA sends a 1-row dot to its own LLVM matrix-vector emitter
(`kTiledLlvmIrGemv`, no packing) and a T-row dot (T >= 2) to YNNPACK (`ynn_fusion`), which
packs the weight panel on every call; this script prices formulations of the same product,
each written in plain JAX inside one jitted function, against the 1-row product over the same
weights measured in the same run.

Each variant rewrites *every* projection of a stack; medians of `--repeats` timed calls after
warm-up, every (variant, T) program called once per repeat in a freshly shuffled order so that
machine load hits all alike. Ratios (`x1`) are to the 1-row time of the baseline (`x @ W`, W
stored [in, out], specjax's layout) in the same run; `x_floor` to the fastest 1-row variant. Numerics: max |y - y_base| (same input, the baseline's
float32 output) and max |y - y_f64| (a float64 numpy reference of the whole stack).

`--what pair`: L (up, down) pairs, x = x + tanh(x @ U) @ W_down, as in
`decode_step_profile.py --what rows`. `--model quickstart`: D=384, F=1024, 6 pairs (19 MB,
cache-resident); `--model ar`: D=768, F=2048, 12 pairs (151 MB, streamed from memory).

`--what decoder`: the projections of the decoder, per layer q, k, v (GQA widths), o, gate,
up, down, then the LM head ([V, D] table contracted as stored, like `Decoder.lm_logits`),
with cheap elementwise glue standing in for attention/norms. `--model quickstart`: 6 x 384,
6 heads / 2 kv heads of 64, F=1024, V=2048 (the quickstart target); `--model ar`: 12 x 768,
12 heads, F=2048, V=32000 (bench_autoregressive.py). Variants marked `+fused` concatenate
q|k|v and gate|up into one wider weight each; `<layers>/<head>` (e.g.
`dsum96+fused/oi`) uses a different variant for the LM head.

`--what head`: the LM head alone, x @ W[D, V] (V = 2048 / 32000), one matmul per call.

`--what flags`: re-runs `--what pair` for the baseline and a few variants in one subprocess
per XLA_FLAGS setting (for options that cannot be set per jit: xla_backend_extra_options).

Variant names (a `*_eig` suffix means the same formulation compiled with per-jit
`compiler_options` {ynn fusion off}, i.e. XLA's Eigen/LLVM dot paths; `*_eig1` additionally
single-threaded Eigen):
  io          x @ W, W [in, out] (baseline: what nnx.Linear does)
  oi          dot_general(x, W[out, in]) contracting both minor dims
  wt_io       dot_general(W[in, out], x) -> [out, T], then .T (weight as LHS)
  wt_oi       dot_general(W[out, in], x) -> [out, T], then .T
  fcat<c>     W split into [in, c] column panels (separate arrays), T x panel each, concat
  fbat<c>     W stored [out/c, in, c]; one batched einsum over the panels
  dsum<c>     W stored [in/c, c, out]; batched partial products over contraction chunks, summed
  dcat<c>     W split into [c, out] row panels (separate arrays); sum of x[:, chunk] @ panel
  conv        1x1 lax.conv_general_dilated (NWC, WIO)
  highest     x @ W with precision=HIGHEST (the tests' global setting)
  rows        T separate 1-row products (T matrix-vector dots), concatenated
  rowsf<c>    `rows` within each [in, c] column panel (T x F/c matrix-vector dots)
  mulsum      sum(W[out, in][:, None, :] * x[None], -1).T (YNNPACK fuses it as a reduction)
  p<c>:<v>    W split into [in, c] column panels (separate arrays), variant <v> on each, concat

Commands (2-core machine; 1-3 minutes each; the results/ files were written by these):

    python experiments/verify_matmul.py --what pair --model quickstart
    python experiments/verify_matmul.py --what pair --model ar --T 1 2 5 8 16 32 --repeats 7 \
        --variants oi dsum64 dsum96 fcat256 mulsum rows
    python experiments/verify_matmul.py --what head --model ar --T 1 2 5 8 16 32 --repeats 7
    python experiments/verify_matmul.py --what decoder --model quickstart \
        --variants io+fused oi dsum64 dsum96 dsum96+fused fcat256 mulsum
    python experiments/verify_matmul.py --what decoder --model ar --T 1 2 5 8 16 --repeats 11 \
        --variants oi dsum64/p2048:dsum96 dsum96/p2048:dsum96 fcat256/oi \
        --out experiments/results/verify_matmul_decoder_ar_rerun.json
    python experiments/verify_matmul.py --what flags --model quickstart --T 1 2 5 8 16 \
        --repeats 7 --out experiments/results/verify_matmul_flags_quickstart.json

Writes experiments/results/verify_matmul_<what>_<model>.json (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from specjax.bench.markdown import table

RESULTS = Path(__file__).resolve().parent / "results"
NO_YNN = {"xla_cpu_experimental_ynn_fusion_type": ""}
NO_YNN_1T = {"xla_cpu_experimental_ynn_fusion_type": "", "xla_cpu_multi_thread_eigen": False}
NT = (((1,), (1,)), ((), ()))  # contract the minor dims of both operands


def chunk_width(n: int, c: int) -> int:
    """The largest panel width <= c that divides n into equal panels."""
    k = -(-n // c)
    while n % k:
        k += 1
    return n // k


# A variant: (prepare W[in, out] numpy -> stored pytree, apply(x [T, in], stored) -> [T, out]).
def _io():
    return (jnp.asarray, lambda x, w: x @ w)


def _oi():
    return (lambda w: jnp.asarray(w.T.copy()), lambda x, w: lax.dot_general(x, w, NT))


def _wt_io():
    return (jnp.asarray, lambda x, w: lax.dot_general(w, x, (((0,), (1,)), ((), ()))).T)


def _wt_oi():
    return (lambda w: jnp.asarray(w.T.copy()), lambda x, w: lax.dot_general(w, x, NT).T)


def _fcat(c):
    def prep(w):
        c2 = chunk_width(w.shape[1], c)
        return [jnp.asarray(w[:, j : j + c2].copy()) for j in range(0, w.shape[1], c2)]

    return (prep, lambda x, ws: jnp.concatenate([x @ w for w in ws], axis=1))


def _fbat(c):
    def prep(w):
        i, o = w.shape
        c2 = chunk_width(o, c)
        return jnp.asarray(w.reshape(i, o // c2, c2).transpose(1, 0, 2).copy())

    def apply(x, w):
        n, _, c2 = w.shape
        return jnp.einsum("ti,nic->tnc", x, w).reshape(x.shape[0], n * c2)

    return (prep, apply)


def _dsum(c):
    def prep(w):
        i, o = w.shape
        c2 = chunk_width(i, c)
        return jnp.asarray(w.reshape(i // c2, c2, o))

    def apply(x, w):
        n, c2, _ = w.shape
        return jnp.einsum("tnc,nco->nto", x.reshape(x.shape[0], n, c2), w).sum(0)

    return (prep, apply)


def _dcat(c):
    def prep(w):
        c2 = chunk_width(w.shape[0], c)
        return [jnp.asarray(w[j : j + c2].copy()) for j in range(0, w.shape[0], c2)]

    def apply(x, ws):
        c2 = ws[0].shape[0]
        parts = [x[:, j * c2 : (j + 1) * c2] @ w for j, w in enumerate(ws)]
        return sum(parts[1:], parts[0])

    return (prep, apply)


def _conv():
    def apply(x, w):
        dn = ("NWC", "WIO", "NWC")
        return lax.conv_general_dilated(x[None], w[None], (1,), "VALID", dimension_numbers=dn)[0]

    return (jnp.asarray, apply)


def _highest():
    return (jnp.asarray, lambda x, w: jnp.matmul(x, w, precision=lax.Precision.HIGHEST))


def _rows():
    def apply(x, w):
        return jnp.concatenate([x[t : t + 1] @ w for t in range(x.shape[0])], axis=0)

    return (jnp.asarray, apply)


def _rowsf(c):
    prep, _ = _fcat(c)

    def apply(x, ws):
        return jnp.concatenate(
            [jnp.concatenate([x[t : t + 1] @ w for t in range(x.shape[0])], 0) for w in ws], 1
        )

    return (prep, apply)


def _mulsum():
    def apply(x, w):  # w [out, in]
        return jnp.sum(w[:, None, :] * x[None, :, :], axis=-1).T

    return (lambda w: jnp.asarray(w.T.copy()), apply)


BASE = {
    "io": _io,
    "oi": _oi,
    "wt_io": _wt_io,
    "wt_oi": _wt_oi,
    "conv": _conv,
    "highest": _highest,
    "rows": _rows,
    "mulsum": _mulsum,
}
PARAMETRIC = {"dcat": _dcat, "fcat": _fcat, "fbat": _fbat, "dsum": _dsum, "rowsf": _rowsf}


def _panels(c, inner):
    """W split into [in, c] column panels (separate arrays); `inner` variant per panel; concat."""
    iprep, iapply = inner

    def prep(w):
        c2 = chunk_width(w.shape[1], c)
        return [iprep(w[:, j : j + c2].copy()) for j in range(0, w.shape[1], c2)]

    return (prep, lambda x, ws: jnp.concatenate([iapply(x, w) for w in ws], axis=1))


def base_variant(core: str):
    """'io' -> BASE['io']; 'dsum128' -> _dsum(128) (any width); 'p2048:dsum96' -> panels."""
    if ":" in core:
        outer, inner = core.split(":", 1)
        m = re.fullmatch(r"p(\d+)", outer)
        if not m:
            raise SystemExit(f"unknown panel prefix {outer!r}; use p<width>:<variant>")
        return lambda: _panels(int(m.group(1)), base_variant(inner)())
    if core in BASE:
        return BASE[core]
    m = re.fullmatch(r"([a-z]+)(\d+)", core)
    if m and m.group(1) in PARAMETRIC:
        return lambda: PARAMETRIC[m.group(1)](int(m.group(2)))
    raise SystemExit(f"unknown variant {core!r}; known: {sorted(BASE)}, {sorted(PARAMETRIC)}<c>")


def parse_variant(name: str):
    """'io', 'rows_eig', 'io+fused', ... -> (prep, apply, compiler_options, fused)."""
    fused = name.endswith("+fused")
    core = name.removesuffix("+fused")
    opts = None
    if core.endswith("_eig1"):
        core, opts = core.removesuffix("_eig1"), NO_YNN_1T
    elif core.endswith("_eig"):
        core, opts = core.removesuffix("_eig"), NO_YNN
    prep, apply = base_variant(core)()
    return prep, apply, opts, fused, core


# ----------------------------------------------------------------------------- stacks


MODELS = {
    # name: (D, F, layers, heads, kv heads, head dim, vocab)
    "quickstart": (384, 1024, 6, 6, 2, 64, 2048),
    "ar": (768, 2048, 12, 12, 12, 64, 32000),
}


def pair_weights(model: str, rng):
    D, F, L = MODELS[model][:3]
    ups = [rng.standard_normal((D, F), np.float32) * 0.02 for _ in range(L)]
    downs = [rng.standard_normal((F, D), np.float32) * 0.02 for _ in range(L)]
    return dict(ups=ups, downs=downs)


def pair_fn(apply):
    def run(x, ws):
        for u, d in zip(ws["ups"], ws["downs"], strict=True):
            x = x + apply(jnp.tanh(apply(x, u)), d)
        return x

    return run


def pair_ref(x, ws):
    x = x.astype(np.float64)
    for u, d in zip(ws["ups"], ws["downs"], strict=True):
        x = x + np.tanh(x @ u.astype(np.float64)) @ d.astype(np.float64)
    return x


def head_weights(model: str, rng):
    D, V = MODELS[model][0], MODELS[model][6]
    return dict(head=rng.standard_normal((D, V), np.float32) * 0.02)


def head_fn(apply):
    return lambda x, ws: apply(x, ws["head"])


def head_ref(x, ws):
    return x.astype(np.float64) @ ws["head"].astype(np.float64)


def decoder_weights(model: str, rng):
    D, F, L, N, K, H, V = MODELS[model]
    s = 0.02

    def w(i, o):
        return rng.standard_normal((i, o), np.float32) * s

    layers = [
        dict(
            q=w(D, N * H),
            k=w(D, K * H),
            v=w(D, K * H),
            o=w(N * H, D),
            gate=w(D, F),
            up=w(D, F),
            down=w(F, D),
        )
        for _ in range(L)
    ]
    return dict(layers=layers, head=w(D, V))  # head stored [in, out] here; see below


def decoder_fn(apply, fused: bool, model: str, head_apply=None):
    D, F, L, N, K, H, V = MODELS[model]
    head_apply = head_apply or apply

    def run(x, ws):
        for lw in ws["layers"]:
            h = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
            if fused:
                qkv = apply(h, lw["qkv"])
                q, k, v = jnp.split(qkv, [N * H, N * H + K * H], axis=-1)
            else:
                q, k, v = apply(h, lw["q"]), apply(h, lw["k"]), apply(h, lw["v"])
            # attention stand-in: mixes k and v into every head of q
            kv = jnp.tile(k * jax.nn.sigmoid(v), N // K)
            x = x + apply(q * kv, lw["o"])
            h = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
            if fused:
                g, u = jnp.split(apply(h, lw["gateup"]), 2, axis=-1)
            else:
                g, u = apply(h, lw["gate"]), apply(h, lw["up"])
            x = x + apply(jax.nn.silu(g) * u, lw["down"])
        return head_apply(x, ws["head"])

    return run


def decoder_ref(x, ws):
    x = x.astype(np.float64)
    for lw in ws["layers"]:
        lw64 = {k: v.astype(np.float64) for k, v in lw.items()}
        h = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6)
        q, k, v = h @ lw64["q"], h @ lw64["k"], h @ lw64["v"]
        N = q.shape[-1] // k.shape[-1]
        kv = np.tile(k / (1 + np.exp(-v)), N)
        x = x + (q * kv) @ lw64["o"]
        h = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6)
        g, u = h @ lw64["gate"], h @ lw64["up"]
        x = x + (g / (1 + np.exp(-g)) * u) @ lw64["down"]
    return x @ ws["head"].astype(np.float64)


def prepare(ws, prep, fused: bool, head_prep=None):
    """Store every [in, out] weight the way the variant wants it (fusing first if asked)."""
    head_prep = head_prep or prep
    if "ups" in ws:
        return dict(ups=[prep(w) for w in ws["ups"]], downs=[prep(w) for w in ws["downs"]])
    if "layers" not in ws:
        return dict(head=prep(ws["head"]))
    layers = []
    for lw in ws["layers"]:
        if fused:
            lw = dict(
                qkv=np.concatenate([lw["q"], lw["k"], lw["v"]], 1),
                o=lw["o"],
                gateup=np.concatenate([lw["gate"], lw["up"]], 1),
                down=lw["down"],
            )
        layers.append({k: prep(v) for k, v in lw.items()})
    return dict(layers=layers, head=head_prep(ws["head"]))


# ----------------------------------------------------------------------------- timing


def measure(args) -> dict:
    rng = np.random.default_rng(0)
    D = MODELS[args.model][0]
    if args.what == "pair":
        ws, make, ref = pair_weights(args.model, rng), (lambda a, f, h: pair_fn(a)), pair_ref
    elif args.what == "head":
        ws, make, ref = head_weights(args.model, rng), (lambda a, f, h: head_fn(a)), head_ref
    else:
        ws = decoder_weights(args.model, rng)
        make, ref = (lambda a, f, h: decoder_fn(a, f, args.model, h)), decoder_ref
    nbytes = sum(a.nbytes for a in jax.tree.leaves(ws))
    xs = {T: rng.standard_normal((T, D), np.float32) for T in args.T}
    refs = {T: ref(xs[T], ws) for T in args.T}

    variants = list(dict.fromkeys(["io"] + args.variants))
    compiled, stored_cache = {}, {}
    for name in variants:
        layer_name, _, head_name = name.partition("/")
        prep, apply, opts, fused, core = parse_variant(layer_name)
        hprep, happly, hcore = None, None, None
        if head_name:  # decoder only: a different variant for the LM head
            hprep, happly, _, _, hcore = parse_variant(head_name)
        key = (core, fused, hcore)
        if key not in stored_cache:
            stored_cache[key] = prepare(ws, prep, fused, hprep)
        stored = stored_cache[key]
        fn = jax.jit(make(apply, fused, happly))
        for T in args.T:
            x = jnp.asarray(xs[T])
            t0 = time.perf_counter()
            c = fn.lower(x, stored).compile(compiler_options=opts)
            compiled[name, T] = (c, x, stored, time.perf_counter() - t0)
    print(f"compiled {len(compiled)} programs; weights {nbytes / 1e6:.0f} MB", flush=True)

    rows, outs = {}, {}
    for (name, T), (c, x, stored, _) in compiled.items():
        for _ in range(args.warmup):
            y = jax.block_until_ready(c(x, stored))
        outs[name, T] = np.asarray(y)
    times = {k: [] for k in compiled}
    order = list(compiled)
    shuffle = np.random.default_rng(1)
    for _ in range(args.repeats):
        shuffle.shuffle(order)  # a fresh interleaving per repeat: no variant always runs first
        for key in order:
            c, x, stored, _ = compiled[key]
            t0 = time.perf_counter()
            jax.block_until_ready(c(x, stored))
            times[key].append(time.perf_counter() - t0)
    base1 = statistics.median(times["io", args.T[0]]) * 1e3
    floor = min(statistics.median(times[n, args.T[0]]) for n in variants) * 1e3
    for (name, T), ts in times.items():
        ms = statistics.median(ts) * 1e3
        rows[name, T] = dict(
            variant=name,
            T=T,
            ms=ms,
            x1=ms / base1,
            x_floor=ms / floor,
            spread=(min(ts) * 1e3, max(ts) * 1e3),
            diff_base=float(np.abs(outs[name, T] - outs["io", T]).max()),
            diff_f64=float(np.abs(outs[name, T] - refs[T]).max()),
            compile_s=compiled[name, T][3],
        )
    return dict(
        what=args.what,
        model=args.model,
        shapes=MODELS[args.model],
        weights_mb=nbytes / 1e6,
        T=args.T,
        repeats=args.repeats,
        base_T=args.T[0],
        base_ms=base1,
        floor_ms=floor,
        rows=list(rows.values()),
        loadavg_end=os.getloadavg(),
    )


def print_table(result: dict) -> None:
    Ts = result["T"]
    by = {(r["variant"], r["T"]): r for r in result["rows"]}
    names = list(dict.fromkeys(r["variant"] for r in result["rows"]))
    print(
        f"\n{result['what']} / {result['model']}: {result['weights_mb']:.0f} MB of weights; "
        f"ms per pass (x: / io at T={result['base_T']}, {result['base_ms']:.2f} ms; "
        f"fastest T={result['base_T']} variant {result['floor_ms']:.2f} ms); "
        f"load at end {result['loadavg_end'][0]:.2f}"
    )
    rows = []
    for n in names:
        cells = [f"{by[n, T]['ms']:.2f} ({by[n, T]['x1']:.2f}x)" for T in Ts]
        d = max(by[n, T]["diff_base"] for T in Ts)
        f = max(by[n, T]["diff_f64"] for T in Ts)
        rows.append([n, *cells, f"{d:.1e}", f"{f:.1e}"])
    header = ["variant", *(f"T={T}" for T in Ts), "max diff vs io", "vs f64"]
    print(table(header, rows, "l" + "r" * (len(Ts) + 2)))


FLAG_SETS = [
    "",
    "--xla_cpu_multi_thread_eigen=false",
    "--xla_cpu_experimental_ynn_fusion_type=",
    "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_multi_thread_eigen=false "
    "--xla_backend_extra_options=xla_force_enable_experimental_llvm_ir_gemm",
    "--xla_backend_extra_options=xla_llvm_dot_tiling_factor=16",
    "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_experimental_xnn_fusion_type=dot",
    "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_experimental_onednn_fusion_type=dot",
    "--xla_cpu_prefer_vector_width=512",
    "--xla_cpu_enable_fast_math=true",
]


def flags(args) -> dict:
    out = dict(what="flags", model=args.model, runs=[])
    for fl in FLAG_SETS:
        env = dict(os.environ, XLA_FLAGS=fl)
        cmd = [
            sys.executable,
            __file__,
            "--what",
            "pair",
            "--model",
            args.model,
            "--repeats",
            str(args.repeats),
            "--T",
            *map(str, args.T),
            "--variants",
            *args.variants,
            "--out",
            "-",
        ]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode:
            print(f"XLA_FLAGS={fl!r}: failed\n{p.stderr[-2000:]}")
            out["runs"].append(dict(xla_flags=fl, error=p.stderr[-2000:]))
            continue
        res = json.loads(p.stdout.strip().splitlines()[-1])
        res["xla_flags"] = fl
        print(f"\nXLA_FLAGS={fl!r}")
        print_table(res)
        out["runs"].append(res)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--what", choices=["pair", "head", "decoder", "flags"], default="pair")
    p.add_argument("--model", choices=list(MODELS), default="quickstart")
    p.add_argument("--T", type=int, nargs="+", default=[1, 2, 5, 8, 16, 32, 64])
    p.add_argument("--variants", nargs="+", default=None)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON path; '-' prints one JSON line to stdout")
    args = p.parse_args()
    if args.variants is None:
        args.variants = {
            "pair": [
                "oi",
                "wt_oi",
                "fcat256",
                "dsum64",
                "dsum96",
                "dsum128",
                "conv",
                "highest",
                "rows",
                "mulsum",
                "io_eig",
            ],
            "head": ["oi", "wt_oi", "mulsum", "fcat1024", "p1024:dsum96", "p2048:dsum96"],
            "decoder": ["io+fused", "oi", "dsum64", "dsum96", "dsum96+fused", "fcat256"],
            "flags": ["oi", "dsum96"],
        }[args.what]
    result = flags(args) if args.what == "flags" else measure(args)
    result["command"] = " ".join(["python", "experiments/verify_matmul.py", *sys.argv[1:]])
    result["machine"] = dict(
        jax=jax.__version__,
        nproc=os.cpu_count(),
        cpu=platform.processor(),
        xla_flags=os.environ.get("XLA_FLAGS", ""),
    )
    if args.out == "-":
        print(json.dumps(result))
        return
    if args.what != "flags":
        print_table(result)
    path = Path(args.out) if args.out else RESULTS / f"verify_matmul_{args.what}_{args.model}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
