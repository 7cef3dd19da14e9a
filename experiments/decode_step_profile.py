"""Where a decode step's time goes on this backend: an XLA op breakdown, and matmul cost vs rows.

`--what step`: runs `sj.generate` once under `jax.profiler`, groups the compiled program's ops by
kind (dot, ynn_fusion, copy fusions, ...) and prints milliseconds per decode step, for the
~110M Llama of `bench_autoregressive.py` (autoregressive) or, with `--method`, for the random
8x512 pair of `bench_speculative.py` (draft_model chain N=4 or ngram N=4).

`--what heads-step`: the same op breakdown and the wall milliseconds of one step for a trained
pair (`--target` dir or LM workdir, `--drafter` a Medusa heads or EAGLE drafter dir or
workdir, e.g. the quickstart's): autoregressive, then the drafter's method on a chain of
`--depth` drafts and, for EAGLE, on EAGLE-2's dynamic tree (`--depth`, `--top-k`,
`--total-tokens`; the quickstart's bench uses 4, 2, 6), batch 1, T=0, on a held-out prompt.
What a step spends outside the target's forward: the drafter's forwards, the tree's
selection, the verifier.

`--what cost`: wall milliseconds per decode step (median of 5 calls; a 65-token call minus a
1-token call, over the steps taken) for autoregressive, draft_model chain N=4 and ngram N=4 on
that pair at T=0, batch 1: what a speculative step costs in plain steps.

`--what ar-step`: the same wall-clock per-step timing for the ~110M Llama of
`bench_autoregressive.py`, autoregressive, at `--batch` (32-token random prompts, `--new`
tokens): what a decode-step change buys, without transformers in the loop. Run it under
`XLA_FLAGS=...` or `taskset` to price a flag.

`--what attention`: specjax's `attend` over a head-major [L, B, K, S, H] cache (the layout of
`KVCache`) against the two slot-major [L, B, S, K, H] forms it replaced: the einsum (XLA:CPU
copies a transposed K and V slice per layer) and the block-diagonal form (the cache rows as
stored, K times the multiply-adds), per layer over 12 layers, at the query-block sizes of
decoding, verification and prefill.

`--what rows`: a chain of 12 (up, down) projection pairs (D=768, F=2048, 151 MB of float32
weights) applied to M = 1, 2, 5, 8, 16 rows, with the weights stored
[in, out] (specjax's layout) and [out, in]. A verify block of N+1 tokens and a batch of B rows
are exactly such M-row matmuls, so this prices them against one-row decoding.

    python experiments/decode_step_profile.py --what step --batch 1
    python experiments/decode_step_profile.py --what step --method ngram
    python experiments/decode_step_profile.py --what cost
    python experiments/decode_step_profile.py --what heads-step \
        --target workdirs/quickstart/target --drafter workdirs/quickstart/eagle3
    python experiments/decode_step_profile.py --what ar-step --batch 8
    python experiments/decode_step_profile.py --what attention
    python experiments/decode_step_profile.py --what rows

Prints tables; nothing is written unless `--out` is given. Profiling adds overhead, so read the
step breakdown as shares, and the timings of `bench_*.py` as the speeds.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

import bench_speculative
import jax
import jax.numpy as jnp
import numpy as np
from bench_autoregressive import bench_config
from medusa_cost import held_out

import specjax as sj
from specjax.bench.markdown import table
from specjax.bench.pairs import truncated_draft
from specjax.models.decoder import MASKED, attend


def op_breakdown(run) -> collections.Counter:
    """Microseconds per XLA op kind over one call of `run` (already compiled)."""
    with tempfile.TemporaryDirectory() as logdir:
        jax.profiler.start_trace(logdir)
        out = run()
        jax.profiler.stop_trace()
        (trace,) = Path(logdir).rglob("*.trace.json.gz")
        events = json.load(gzip.open(trace))["traceEvents"]
    kinds = collections.Counter()
    for e in events:
        name = e.get("name", "")
        if e.get("ph") != "X" or name.startswith(("$", "end:")) or "Execute" in name:
            continue
        if "Pjit" in name:
            continue
        kinds[re.sub(r"[.\d]+$", "", name)] += e["dur"]
    return kinds, out


def _pair_target() -> sj.Decoder:
    """The random 8x512 target of bench_speculative.py."""
    return sj.Decoder(bench_speculative.target_config(False), seed=0)


def _spec(method: str, target: sj.Decoder):
    return {
        "autoregressive": None,
        "draft_model": dict(
            method="draft_model", model=truncated_draft(target, 2), num_speculative_tokens=4
        ),
        "ngram": dict(
            method="ngram", num_speculative_tokens=4, prompt_lookup_max=3, prompt_lookup_min=1
        ),
    }[method]


def _prompts(target: sj.Decoder, batch: int) -> list[list[int]]:
    """bench_speculative.py's first prompt (an 8-token unit repeated 4 times), `batch` times."""
    return bench_speculative.prompts(1, target.config.vocab_size) * batch


def step_profile(args) -> dict:
    if args.method == "autoregressive":
        target = sj.Decoder(bench_config(False), seed=0)
    else:
        target = _pair_target()
    spec = _spec(args.method, target)
    prompts = _prompts(target, args.batch)

    def run():
        return sj.generate(target, prompts, args.new, stop_token_ids=[], speculative_config=spec)

    run()  # compile
    kinds, out = op_breakdown(run)
    steps = out.stats["steps"]
    rows, total = per_step(kinds, steps, args.top)
    print(f"{args.method}, batch {args.batch}: {steps} steps, {total:.2f} ms/step of ops")
    print_ops(rows, total)
    return dict(method=args.method, batch=args.batch, steps=steps, total_ms=total, ops=rows)


def per_step(kinds: collections.Counter, steps: int, top: int) -> tuple[list[dict], float]:
    """The `top` op kinds in ms per decode step, and the total of all kinds."""
    rows = [dict(kind=k, ms_per_step=us / 1e3 / steps) for k, us in kinds.most_common(top)]
    return rows, sum(kinds.values()) / 1e3 / steps


def print_ops(rows: list[dict], total: float) -> None:
    cells = [
        [r["kind"], f"{r['ms_per_step']:.3f}", f"{r['ms_per_step'] / total:.0%}"] for r in rows
    ]
    print(table(["op kind", "ms / step", "share"], cells, "lrr"))


def ms_per_step(target, prompts, spec, new: int) -> tuple[float, int]:
    """Wall ms per decode step: median of 5 `new`-token calls minus median of 5 1-token calls
    (prefill and host work cancel), over the steps the long call took. Both compile first."""

    def call(n):
        t = time.perf_counter()
        out = sj.generate(target, prompts, n, stop_token_ids=[], speculative_config=spec)
        return time.perf_counter() - t, out.stats["steps"]

    call(new), call(1)
    long = statistics.median(call(new)[0] for _ in range(5))
    short = statistics.median(call(1)[0] for _ in range(5))
    steps = call(new)[1]
    return 1e3 * (long - short) / steps, steps


def heads_step_profile(args) -> dict:
    target = sj.load_model(args.target)
    drafter = sj.load_draft(args.drafter, target=target)
    method = drafter.config.method
    prompts = held_out(target, 1)[:1]
    base = {"method": method, "model": drafter, "num_speculative_tokens": args.depth}
    settings = [("autoregressive", None), (f"{method} chain {args.depth}", base)]
    if method != "medusa":
        tree = {"dynamic": {"top_k": args.top_k, "total_tokens": args.total_tokens}}
        name = f"{method} dynamic d{args.depth} k{args.top_k} n{args.total_tokens}"
        settings.append((name, {**base, "draft_tree": tree}))
    result = dict(rows=[])
    for name, spec in settings:

        def run(spec=spec):
            return sj.generate(
                target, prompts, args.new, stop_token_ids=[], speculative_config=spec
            )

        run()  # compile
        kinds, out = op_breakdown(run)
        steps = out.stats["steps"]
        ops, total = per_step(kinds, steps, args.top)
        wall, _ = ms_per_step(target, prompts, spec, args.new)
        tau = out.stats.get("mean_accepted_length", 1.0)
        print(f"\n{name}: {steps} steps, tau {tau:.2f}, {wall:.2f} wall ms/step, "
              f"{total:.2f} ms/step of ops (profiled)")  # fmt: skip
        print_ops(ops, total)
        result["rows"].append(dict(setting=name, steps=steps, tau=tau, wall_ms_per_step=wall,
                                   ops_ms_per_step=total, ops=ops))  # fmt: skip
    return result


def cost_profile(args) -> dict:
    target = _pair_target()
    prompts = _prompts(target, 1)
    result = dict(rows=[])
    cells, base = [], None
    for method in ("autoregressive", "draft_model", "ngram"):
        ms, steps = ms_per_step(target, prompts, _spec(method, target), 65)
        base = base or ms
        result["rows"].append(dict(method=method, ms_per_step=ms, steps=steps))
        cells.append([method, f"{ms:.2f}", steps, f"{ms / base:.2f}x"])
    header = ["method (8x512 pair, T=0, batch 1)", "ms / step", "steps", "x autoregressive step"]
    print(table(header, cells, "lrrr"))
    return result


def ar_step_profile(args) -> dict:
    target = sj.Decoder(bench_config(False), seed=0)
    prompts = np.random.default_rng(0).integers(0, target.config.vocab_size, (args.batch, 32))
    ms, steps = ms_per_step(target, prompts.tolist(), None, args.new)
    print(f"110M Llama, batch {args.batch}: {ms:.2f} ms per autoregressive step ({steps} steps)")
    return dict(batch=args.batch, ms_per_step=ms, steps=steps)


def _layers(fn):
    """Attention over each layer of a stacked cache; each layer's query depends on the last."""

    @jax.jit
    def run(q, k_layers, v_layers, mask):
        out = jnp.zeros_like(q)
        for layer in range(k_layers.shape[0]):
            out = out + fn(q + 0.0 * out, k_layers[layer], v_layers[layer], mask, 0.125)
        return out

    return run


def slot_major_einsum(q, k, v, mask, scale):
    """The attention of a slot-major cache (k, v [B, S, K, H]), as specjax had it before."""
    B, T, N, H = q.shape
    K = k.shape[2]
    q = q.reshape(B, T, K, N // K, H)
    scores = jnp.einsum("btkgh,bskh->bkgts", q, k, preferred_element_type=jnp.float32) * scale
    probs = jax.nn.softmax(jnp.where(mask[:, None, None], scores, MASKED), axis=-1)
    v = jnp.where(jnp.any(mask, axis=1)[:, :, None, None], v, 0.0)
    return jnp.einsum("bkgts,bskh->btkgh", probs, v).reshape(B, T, N, H)


def slot_major_blockdiag(q, k, v, mask, scale):
    """The block-diagonal form over a slot-major cache: each query head in its KV head's slice
    of a zero [K*H] row, one matmul against the [S, K*H] cache rows (K x the multiply-adds)."""
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    G = N // K
    eye = jnp.eye(K, dtype=q.dtype)
    qbd = jnp.einsum("btkgh,kj->btkgjh", q.reshape(B, T, K, G, H), eye).reshape(B, T * N, K * H)
    scores = jnp.einsum("bmc,bsc->bms", qbd, k.reshape(B, S, K * H)) * scale
    scores = jnp.where(mask[:, :, None], scores.reshape(B, T, N, S), MASKED)
    probs = jax.nn.softmax(scores, axis=-1).reshape(B, T * N, S)
    v = jnp.where(jnp.any(mask, axis=1)[:, :, None, None], v, 0.0).reshape(B, S, K * H)
    out = jnp.einsum("bms,bsc->bmc", probs, v).reshape(B, T, K, G, K, H)
    return jnp.einsum("btkgjh,kj->btkgh", out, eye).reshape(B, T, N, H)


def attention_profile(args) -> dict:
    L, H = 12, 64
    shapes = [(1, 1, 256, 12, 12), (1, 2, 256, 12, 12), (1, 4, 256, 12, 12), (1, 8, 256, 12, 12)]
    shapes += [(1, 16, 256, 12, 12), (8, 1, 256, 12, 12), (1, 1, 2048, 12, 12)]
    shapes += [(1, 1, 256, 6, 2), (1, 7, 256, 6, 2), (1, 16, 256, 6, 2), (8, 7, 256, 6, 2)]
    shapes += [(1, 1, 1024, 9, 3), (1, 7, 1024, 9, 3), (1, 64, 512, 9, 3)]
    shapes += [(1, 1, 1024, 32, 8), (1, 8, 1024, 32, 8)]
    result = dict(rows=[])
    cells = []
    for B, T, S, N, K in shapes:
        rng = np.random.default_rng(0)
        q = jnp.asarray(rng.standard_normal((B, T, N, H)), jnp.float32)
        kc = rng.standard_normal((L, B, S, K, H)).astype(np.float32)  # slot-major
        vc = rng.standard_normal((L, B, S, K, H)).astype(np.float32)
        visible = np.arange(S)[None, :] < S // 2 + np.arange(T)[:, None]  # [T, S]
        mask = jnp.asarray(np.broadcast_to(visible, (B, T, S)))
        slot = (q, jnp.asarray(kc), jnp.asarray(vc), mask)
        head = (
            q,
            jnp.asarray(kc.transpose(0, 1, 3, 2, 4)),
            jnp.asarray(vc.transpose(0, 1, 3, 2, 4)),
        )
        a = _timed(_layers(slot_major_einsum), *slot) / L
        b = _timed(_layers(slot_major_blockdiag), *slot) / L
        c = _timed(_layers(attend), *head, mask) / L
        row = dict(B=B, T=T, S=S, N=N, K=K, slot_einsum_ms=a, slot_blockdiag_ms=b, head_major_ms=c)
        result["rows"].append(row)
        cells.append([B, T, S, N, K, f"{a:.3f}", f"{b:.3f}", f"{c:.3f}"])
    header = ["B", "T", "S", "N", "K", "slot-major einsum", "slot-major block-diag", "head-major"]
    print("ms per layer")
    print(table(header, cells, "rrrrrrrr"))
    return result


def _timed(fn, *a, repeats=15) -> float:
    jax.block_until_ready(fn(*a))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*a))
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def rows_profile(args) -> dict:
    D, F, L = 768, 2048, 12
    rng = np.random.default_rng(0)
    up = [rng.standard_normal((D, F), np.float32) * 0.02 for _ in range(L)]
    down = [rng.standard_normal((F, D), np.float32) * 0.02 for _ in range(L)]
    in_out = ([jnp.asarray(w) for w in up], [jnp.asarray(w) for w in down])
    out_in = ([jnp.asarray(w.T.copy()) for w in up], [jnp.asarray(w.T.copy()) for w in down])
    nt = (((1,), (1,)), ((), ()))

    @jax.jit
    def chain_in_out(x, ups, downs):
        for u, d in zip(ups, downs, strict=True):
            x = x + jnp.tanh(x @ u) @ d
        return x

    @jax.jit
    def chain_out_in(x, ups, downs):
        for u, d in zip(ups, downs, strict=True):
            x = x + jax.lax.dot_general(jnp.tanh(jax.lax.dot_general(x, u, nt)), d, nt)
        return x

    mb = 2 * L * D * F * 4 / 1e6
    result = dict(weights_mb=mb, rows=[])
    print(f"{2 * L} projections, {mb:.0f} MB float32; median ms per pass over the chain")
    cells, base = [], None
    for m in (1, 2, 5, 8, 16):
        x = jnp.ones((m, D), jnp.float32)
        a, b = _timed(chain_in_out, x, *in_out), _timed(chain_out_in, x, *out_in)
        base = base or a
        result["rows"].append(dict(m=m, in_out_ms=a, out_in_ms=b))
        cells.append([m, f"{a:.1f}", f"{b:.1f}", f"{a / base:.2f}x"])
    header = ["rows M", "[in, out] ms", "[out, in] ms", "[in, out] / (M = 1)"]
    print(table(header, cells, "rrrr"))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--what",
        choices=["step", "heads-step", "cost", "ar-step", "attention", "rows"],
        default="step",
    )
    parser.add_argument("--target", help="heads-step: the target's dir or LM workdir")
    parser.add_argument("--drafter", help="heads-step: Medusa heads or an EAGLE drafter")
    parser.add_argument("--depth", type=int, default=4, help="heads-step: drafts per step")
    parser.add_argument("--top-k", type=int, default=2, help="heads-step: dynamic tree top-k")
    parser.add_argument("--total-tokens", type=int, default=6, help="heads-step: tree drafts")
    parser.add_argument(
        "--method", choices=["autoregressive", "draft_model", "ngram"], default="autoregressive"
    )
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--new", type=int, default=129)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--out", default=None, help="write the result as JSON here")
    args = parser.parse_args()
    if args.what == "heads-step" and not (args.target and args.drafter):
        parser.error("--what heads-step needs --target and --drafter")
    result = {
        "step": step_profile,
        "heads-step": heads_step_profile,
        "cost": cost_profile,
        "ar-step": ar_step_profile,
        "attention": attention_profile,
        "rows": rows_profile,
    }[args.what](args)
    result["command"] = "python experiments/decode_step_profile.py " + " ".join(
        f"--{k}={v}" for k, v in vars(args).items() if k != "out"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
