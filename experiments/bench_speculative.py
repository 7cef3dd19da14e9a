"""Speculative decoding vs autoregressive in the same run: tau and wall-clock speedup.

Pair: a Llama-shaped target with random weights (8 layers, D=512, 8 heads, F=1376, V=8192,
~34M parameters) and, as its draft, the same model truncated to its first 2 layers plus the
final norm and LM head (`specjax.bench.pairs.truncated_draft`: an early-exit self-draft, the
only way to get a draft that agrees with an untrained target). Random weights make the
residual stream of every layer small next to the token embedding, so the truncated draft
agrees with the target far more than a trained 2-of-8-layer draft would: read tau as a
property of this pair, not of the method.

Methods: draft_model chain (N=4), draft_model top-k tree (depth 3, width 2), ngram (N=4,
lookup 1..3), each against autoregressive decoding, at batch 1 and 8, T=0 and T=1. Prompts:
32 tokens made of a random 8-token unit repeated 4 times (something for ngram to look up),
64 new tokens, no stop ids. Timing: `specjax.bench.timing.Runner.compare`: the first call of
each side is the warm-up (its extra time reported as compile time), then `--repeats` timed
repeats interleaved (AR, method, AR, method, ...), medians; speedup = median AR / median method.
The draft/target cost ratio c is measured the same way (draft alone vs target alone, AR).

    python experiments/bench_speculative.py              # ~15 min on 2 CPU cores
    python experiments/bench_speculative.py --quick      # 2-layer target, 1-layer draft

Writes experiments/results/bench_speculative.{json,png} and prints the markdown table.
"""

from __future__ import annotations

import argparse
import statistics

import common
import numpy as np

import specjax as sj
from specjax.bench import plotstyle
from specjax.bench.markdown import table
from specjax.bench.pairs import truncated_draft
from specjax.bench.timing import Runner, machine_info

BATCHES = (1, 8)
TEMPERATURES = (0.0, 1.0)
PROMPT_UNIT, PROMPT_REPEATS, NEW = 8, 4, 64


def target_config(quick: bool) -> sj.ModelConfig:
    return sj.ModelConfig(
        model_type="llama",
        vocab_size=8192,
        hidden_size=512,
        num_layers=2 if quick else 8,
        num_heads=8,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=1376,
        max_position_embeddings=512,
    )


def methods(draft) -> dict:
    return {
        "draft_model chain N=4": {
            "method": "draft_model",
            "model": draft,
            "num_speculative_tokens": 4,
        },
        "draft_model tree 3x2": {
            "method": "draft_model",
            "model": draft,
            "num_speculative_tokens": 3,
            "draft_tree": {"depth": 3, "width": 2},
        },
        "ngram N=4": {
            "method": "ngram",
            "num_speculative_tokens": 4,
            "prompt_lookup_min": 1,
            "prompt_lookup_max": 3,
        },
    }


def prompts(num: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, PROMPT_UNIT).tolist() * PROMPT_REPEATS for _ in range(num)]


def cost_ratio(target, draft, batch, repeats: int) -> float:
    """Median time of AR decoding with the draft alone over the target alone."""
    rows = prompts(batch, target.config.vocab_size, seed=1)
    times = {"target": [], "draft": []}
    for _ in range(repeats + 1):  # the first round is the warm-up
        for name, model in (("target", target), ("draft", draft)):
            runner = Runner(model, NEW)
            seconds, _ = runner.run([rows], 0.0, None)
            times[name].append(seconds[0])
    return statistics.median(times["draft"][1:]) / statistics.median(times["target"][1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    config = target_config(args.quick)
    target = sj.Model(sj.Decoder(config, seed=0), None, "random llama 8x512")
    draft = truncated_draft(target, 1 if args.quick else 2)
    print(
        f"target {config.num_params() / 1e6:.1f}M params; draft {draft.config.num_params() / 1e6:.1f}M"
    )
    rows = []
    ratios = {b: cost_ratio(target, draft, b, args.repeats) for b in BATCHES}
    print("draft/target cost ratio c:", ratios)
    for batch in BATCHES:
        workload = {"repetitive": [prompts(batch, config.vocab_size)]}
        for temperature in TEMPERATURES:
            for name, spec in methods(draft).items():
                runner = Runner(target, NEW, seed=0)
                res = runner.compare(workload, temperature, spec, args.repeats)
                cell = res["categories"]["repetitive"]
                t_ar, t_m = (
                    statistics.median(cell["ar_times_s"]),
                    statistics.median(cell["times_s"]),
                )
                stats = cell["stats"]
                row = dict(
                    method=name, batch=batch, temperature=temperature, tau=stats["tau"],
                    acceptance_by_position=stats["acceptance_by_position"],
                    ar_s=t_ar, method_s=t_m, speedup=t_ar / t_m,
                    ar_tokens_per_s=batch * NEW / t_ar, method_tokens_per_s=batch * NEW / t_m,
                    compile_s=res["compile_s"], ar_compile_s=res["ar_compile_s"],
                    retraced=res["retraced"], ar_times_s=cell["ar_times_s"],
                    times_s=cell["times_s"],
                )  # fmt: skip
                rows.append(row)
                print(
                    f"B={batch} T={temperature} {name:24s} tau {row['tau']:.2f} "
                    f"speedup {row['speedup']:.2f} (AR {t_ar:.2f}s, method {t_m:.2f}s; "
                    f"compile {row['compile_s']:.1f}s)"
                )

    result = dict(
        target=config.__dict__ | {"params_M": config.num_params() / 1e6},
        draft_layers=draft.config.num_layers,
        draft_params_M=draft.config.num_params() / 1e6,
        cost_ratio=ratios,
        new_tokens=NEW,
        prompt_tokens=PROMPT_UNIT * PROMPT_REPEATS,
        repeats=args.repeats,
        rows=rows,
        machine=machine_info(),
        command=common.command(),
    )
    common.save_json("bench_speculative" + ("_quick" if args.quick else ""), result)

    path = common.RESULTS / ("bench_speculative" + ("_quick" if args.quick else "") + ".png")
    with plotstyle.figure(path, ncols=2, width=11, height=4) as (fig, axes):
        labels = [f"B={b} T={t:g}" for b in BATCHES for t in TEMPERATURES]
        x = np.arange(len(labels))
        width = 0.8 / len(methods(draft))
        for j, (name, spec) in enumerate(methods(draft).items()):
            sel = [r for r in rows if r["method"] == name]
            color = plotstyle.method_color("draft_tree" if "draft_tree" in spec else spec["method"])
            axes[0].bar(x + j * width, [r["speedup"] for r in sel], width, label=name, color=color)
            axes[1].bar(x + j * width, [r["tau"] for r in sel], width, label=name, color=color)
        axes[0].axhline(1.0, color="k", lw=0.8)
        titles = ("wall-clock speedup over AR", "tau (tokens per target call)")
        for ax, title in zip(axes, titles, strict=True):
            ax.set_xticks(x + 0.4 - width / 2, labels)
            ax.set_title(title)
        axes[0].legend(fontsize=7)
        fig.suptitle(f"random {config.num_layers}x{config.hidden_size} target, first-"
                     f"{draft.config.num_layers}-layer draft; CPU")  # fmt: skip

    header = ["method", "batch", "T", "tau", "AR tok/s", "method tok/s", "speedup"]
    header += ["compile s (method / AR)"]
    print()
    print(
        table(
            header,
            [
                [r["method"], r["batch"], f"{r['temperature']:g}", f"{r['tau']:.2f}",
                 f"{r['ar_tokens_per_s']:.1f}", f"{r['method_tokens_per_s']:.1f}",
                 f"{r['speedup']:.2f}", f"{r['compile_s']:.1f} / {r['ar_compile_s']:.1f}"]
                for r in rows
            ],
            "lrrrrrrr",
        )
    )  # fmt: skip


if __name__ == "__main__":
    main()
