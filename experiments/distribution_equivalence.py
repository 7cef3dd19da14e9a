"""Speculative sampling vs direct target sampling: the same law, and a broken verifier is caught.

Model pair (`common.distribution_pair`): a tiny random target (V=32) whose LM head is scaled
so its laws are peaked, and a draft = the target with noise on its second layer (partly
agreeing). One 12-token prompt is repeated over `--rows` rows with per-row seeds; every row
generates `--new` tokens at T=1. Methods: draft_model chain (probabilistic), draft_model top-k
tree (one_hot), ngram (one_hot), and the draft_model chain with a broken verifier whose
rejection residual norm(max(p - q, 0)) is replaced by p. Direct sampling is `sj.generate`
without speculation, other seeds.

Tests (chi-square): (1) two-sample, speculative vs direct, on the (position, token) table of
generated positions 2..new (position 1 comes from prefill, not the verifier); (2) goodness of
fit of the joint (x1, x2) to the exact law computed from the target's processed
distributions. Pass: p > 0.05 for the lossless methods; the broken verifier must fail.

    python experiments/distribution_equivalence.py         # ~3 min on 2 CPU cores

Writes experiments/results/distribution_equivalence.{json,png}; --log appends to LOG.md.
"""

from __future__ import annotations

import argparse

import common
import jax.numpy as jnp
import numpy as np

import specjax as sj
from specjax import sampling as sp
from specjax.bench import plotstyle
from specjax.bench.markdown import table
from specjax.decoding import engine
from specjax.decoding import verify as vf

V = common.TINY.vocab_size
BATCH = 4096
SAMPLING = sj.SamplingParams(temperature=1.0)


def methods(draft) -> dict:
    chain = {"method": "draft_model", "model": draft, "num_speculative_tokens": 3}
    return {
        "direct": None,
        "draft_model chain (probabilistic)": chain,
        "draft_model tree 2x3 (one_hot)": {
            "method": "draft_model",
            "model": draft,
            "num_speculative_tokens": 2,
            "draft_tree": "small_2x3",
            "verification": "one_hot",
        },
        "ngram (one_hot)": {"method": "ngram", "num_speculative_tokens": 3},
        "BROKEN chain: residual := p": chain,
    }


def sample(target, prompt, cfg, rows: int, new: int, seed0: int):
    """[rows, new] tokens; and (accepted, drafted) counts."""
    calls = -(-rows // BATCH)
    out, accepted, drafted = [], 0, 0
    for c in range(calls):
        seeds = list(range(seed0 + c * BATCH, seed0 + (c + 1) * BATCH))
        res = sj.generate(target, [prompt] * BATCH, new, SAMPLING, [], cfg, seeds=seeds)
        out.append(np.asarray(res.tokens))
        accepted += res.stats["accepted_tokens"]
        drafted += res.stats["draft_tokens"]
    return np.concatenate(out)[:rows], accepted, drafted


def position_table(tokens: np.ndarray) -> np.ndarray:
    """[positions 2.., V] counts of each token at each generated position after the first."""
    return np.stack([np.bincount(tokens[:, i], minlength=V) for i in range(1, tokens.shape[1])])


def exact_joint(target, prompt) -> np.ndarray:
    """Exact law of (x1, x2) under the target's processed distributions: [V, V]."""
    base = np.asarray(prompt)[None]
    p1 = np.asarray(sp.processed_probs(common.last_logits(target, base), SAMPLING), np.float64)[0]
    ctx = np.concatenate([np.repeat(base, V, 0), np.arange(V)[:, None]], 1)  # [V, T+1]
    p2 = np.asarray(sp.processed_probs(common.last_logits(target, ctx), SAMPLING), np.float64)
    return p1[:, None] * p2


def broken_reject_update(r, q, x, mode):
    return vf._normalize(r.astype(jnp.float32), r)  # the target's law instead of the residual


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--new", type=int, default=5)
    parser.add_argument("--log", action="store_true")
    args = parser.parse_args()

    target, draft = common.distribution_pair()
    prompt = np.random.default_rng(0).integers(0, V, 12).tolist()
    law12 = exact_joint(target, prompt)
    results, tables = {}, {}
    for i, (name, cfg) in enumerate(methods(draft).items()):
        broken = name.startswith("BROKEN")
        original = vf.reject_update
        if broken:
            vf.reject_update = broken_reject_update
            engine._generate_jit.clear_cache()  # force a trace with the broken walk
        try:
            tokens, acc, dr = sample(target, prompt, cfg, args.rows, args.new, 10_000_000 * i)
        finally:
            vf.reject_update = original
            engine._generate_jit.clear_cache()
        tables[name] = position_table(tokens)
        joint = np.zeros((V, V))
        np.add.at(joint, (tokens[:, 0], tokens[:, 1]), 1)
        results[name] = {
            "rows": int(tokens.shape[0]),
            "verified_tokens": int(tokens[:, 1:].size),
            "acceptance_rate": acc / dr if dr else None,
            "p_joint_x1x2_vs_exact": common.chi2_pvalue(joint, law12),
        }
    for name, counts in tables.items():
        if name != "direct":
            results[name]["p_two_sample_vs_direct"] = common.two_sample_pvalue(
                counts, tables["direct"]
            )
    for name, r in results.items():
        print(name, r)

    path = common.RESULTS / "distribution_equivalence.png"
    with plotstyle.figure(path, width=10, height=4) as (_, (ax,)):
        marg = law12.sum(0)
        order = np.argsort(-marg)[:14]
        width = 0.8 / len(tables)
        for j, (name, counts) in enumerate(tables.items()):
            freq = counts[0] / counts[0].sum()
            ax.bar(np.arange(len(order)) + j * width, freq[order], width, label=name)
        ax.plot(np.arange(len(order)) + 0.4 - width / 2, marg[order], "k_", ms=18, mew=2,
                label="exact law of x2")  # fmt: skip
        ax.set_xticks(np.arange(len(order)) + 0.4 - width / 2, [str(t) for t in order])
        ax.set(xlabel="token (most likely 14)", ylabel="frequency of x2",
               title=f"x2 at T=1, {args.rows:,} rows per method")  # fmt: skip
        ax.legend(fontsize=7)
    common.save_json(
        "distribution_equivalence",
        dict(rows=args.rows, new=args.new, sampling=str(SAMPLING), results=results,
             machine=common.machine()),
    )  # fmt: skip

    if args.log:

        def fmt(x, spec):
            return "-" if x is None else format(x, spec)

        lines = table(
            ["method", "verified tokens", "acceptance",
             f"p (two-sample vs direct, positions 2..{args.new})", "p ((x1, x2) vs exact law)"],
            [
                [name, f"{r['verified_tokens']:,}", fmt(r["acceptance_rate"], ".3f"),
                 fmt(r.get("p_two_sample_vs_direct"), ".3g"),
                 fmt(r["p_joint_x1x2_vs_exact"], ".3g")]
                for name, r in results.items()
            ],
            "lrrrr",
        )  # fmt: skip
        lossless = [n for n in results if n not in ("direct",) and not n.startswith("BROKEN")]
        ok = all(
            results[n]["p_two_sample_vs_direct"] > 0.05
            and results[n]["p_joint_x1x2_vs_exact"] > 0.05
            for n in lossless
        )
        b = results["BROKEN chain: residual := p"]
        common.log_entry(
            "Distribution equivalence: speculative vs direct target sampling",
            f"""
Tiny random target (V=32, LM head x20 so laws are peaked) and a layer-1-perturbed draft;
one prompt, {args.rows:,} rows per method (per-row seeds), {args.new} new tokens at T=1.
"verified tokens" = tokens at positions 2..{args.new} (what the verifier emits).

{lines}

Conclusion: {"every lossless method passes both tests (p > 0.05)" if ok else "NOT all lossless methods pass: see the table"};
the broken verifier (rejections resampled from p) is rejected with p = {b["p_two_sample_vs_direct"]:.2g}
(two-sample) and {b["p_joint_x1x2_vs_exact"]:.2g} (exact).
Files: results/distribution_equivalence.json, results/distribution_equivalence.png.
""",
        )


if __name__ == "__main__":
    main()
