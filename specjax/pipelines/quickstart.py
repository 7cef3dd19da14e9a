"""The quickstart: the embedded default pipeline in one call.

    embedded corpus -> BPE tokenizer -> target LM -> draft LM (same tokenizer)
        -> Medusa heads and an EAGLE-3 drafter on the frozen target
        -> benchmark of every method against autoregressive -> report

    python -m launch.main --config=configs/quickstart.py --workdir=workdirs/quickstart
    python -m launch.main --config=configs/smollm2.py --workdir=workdirs/smollm2  # a real target

The real-model pipeline is this one with `target_path` set (a GGUF or HF directory: no target
is trained), `draft_enabled=False` and heads trained on the target's answers to instruction
prompts (`specjax.data.instruction_prompts`).

Workdir layout: `target/` and `draft/` are `train_lm` workdirs (each exports `hf/`, so
`sj.load_model(<workdir>/target)` works), `medusa/` and `eagle3/` head-training workdirs
(`sj.load_draft(<workdir>/eagle3)` loads the drafter), `bench/` holds the benchmark's own results.json,
report.md and plots, and the top level holds `report.md` and `results.json` (this run's
summary: the two models, their decode cost, and the benchmark rows). Every stage resumes:
a second call with the same workdir restores the trained models from their checkpoints.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import jax
import ml_collections
import numpy as np

from specjax import parallel
from specjax.bench.harness import run_bench
from specjax.bench.markdown import table
from specjax.decoding.engine import generate
from specjax.io.drafts import load_draft
from specjax.io.hf import load_model
from specjax.models import Model
from specjax.train.eagle import train_eagle
from specjax.train.heads import train_heads
from specjax.train.lm import HF, train_lm

log = logging.getLogger(__name__)

RESULTS, REPORT = "results.json", "report.md"


def _hf_dir(path: Path) -> Path:
    """A training workdir's exported model, or `path` itself when it is an HF directory."""
    return path / HF if (path / HF / "config.json").is_file() else path


def decode_ms_per_token(model: Model, prompt: list[int], new_tokens: int) -> float:
    """Autoregressive decode cost at batch 1 in ms per token (best of 3, after a warm-up)."""
    run = lambda: generate(model, [prompt], new_tokens, stop_token_ids=[])
    run()  # compile
    times = []
    for _ in range(3):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000.0 * min(times) / new_tokens


def quickstart(config: ml_collections.ConfigDict, workdir) -> dict:
    """Trains a target and a draft LM, benchmarks every method, writes the report.

    Args:
      config: configs/quickstart.py: target and draft (train_lm configs), target_path (""
        or a trained target to reuse), bench (a `specjax.bench.default_config()`).
      workdir: the run's directory.
    Returns:
      The summary written to `<workdir>/results.json`: target, draft (training summaries,
      `decode_ms_per_token` at batch 1), decode_cost_ratio (draft / target) and runs (the
      benchmark's rows: method, category, batch_size, temperature, tau, speedup, ...).
    """
    workdir = Path(workdir).absolute()
    medusa_methods = [m for m in config.bench.methods if m.startswith("medusa")]
    deepest = max([int(config.bench.num_speculative_tokens), *config.bench.tau_vs_n])
    if medusa_methods and config.medusa.heads.num_heads < deepest:
        raise ValueError(
            f"config.medusa.heads.num_heads={config.medusa.heads.num_heads} is fewer than the "
            f"bench drafts with {medusa_methods} (num_speculative_tokens / tau_vs_n up to "
            f"{deepest}): train at least {deepest} heads"
        )
    if config.get("target_required") and not config.target_path:
        raise ValueError(
            f"config.target_path is empty and this pipeline needs a real target: "
            f"{config.target_required}, or pass --config.target_path=<a .gguf or HF directory>"
        )

    log.info("quickstart 1/6: target LM")
    if config.target_path:
        target_dir, target_summary = _hf_dir(Path(config.target_path)), {}
    else:
        target_summary = train_lm(config.target, workdir / "target")
        target_dir = workdir / "target" / HF

    draft_summary, draft = None, None
    if config.get("draft_enabled", True):
        log.info("quickstart 2/6: draft LM (the target's tokenizer)")
        draft_config = config.draft.copy_and_resolve_references()
        if not draft_config.tokenizer.path:
            draft_config.tokenizer.path = str(target_dir)
        draft_summary = train_lm(draft_config, workdir / "draft")
        draft = load_model(workdir / "draft")
    else:
        log.info("quickstart 2/6: no draft LM (draft_enabled=False)")

    log.info("quickstart 3/6: Medusa heads on the frozen target (Medusa-1)")
    target = load_model(target_dir)
    medusa_config = config.medusa.copy_and_resolve_references()
    medusa_config.target = str(target_dir)
    # One self-distillation for both head trainers: the target generates the rows once.
    shared_rows = str(workdir / "distill")
    medusa_config.data.cache_dir = medusa_config.data.cache_dir or shared_rows
    medusa_summary = train_heads(medusa_config, workdir / "medusa", target=target)
    heads = load_draft(workdir / "medusa", target=target)

    log.info("quickstart 4/6: EAGLE-3 drafter on the frozen target (training-time test)")
    eagle3_config = config.eagle3.copy_and_resolve_references()
    eagle3_config.target = str(target_dir)
    eagle3_config.data.cache_dir = eagle3_config.data.cache_dir or shared_rows
    eagle3_summary = train_eagle(eagle3_config, workdir / "eagle3", target=target)
    drafter = load_draft(workdir / "eagle3", target=target)

    log.info("quickstart 5/6: benchmark")
    bench = run_bench(
        config.bench,
        workdir / "bench",
        target=target,
        draft=draft,
        heads={"medusa": heads, "eagle3": drafter},
    )
    # The bench's prompt and generation lengths: the target's program is already compiled.
    text_ids = target.tokenizer.encode("def main(argv):\n    return 0\n")
    prompt = (text_ids * config.bench.prompt_tokens)[: config.bench.prompt_tokens]
    for model, info in ((target, target_summary), (draft, draft_summary)):
        if model is not None:
            info["decode_ms_per_token"] = decode_ms_per_token(
                model, prompt, config.bench.max_new_tokens
            )

    log.info("quickstart 6/6: report")
    summary = {
        "task": "quickstart",
        "target": {"model": _describe(target), **target_summary},
        "draft": None if draft is None else {"model": _describe(draft), **draft_summary},
        "medusa": medusa_summary,
        "eagle3": eagle3_summary,
        "decode_cost_ratio": None
        if draft is None
        else draft_summary["decode_ms_per_token"] / target_summary["decode_ms_per_token"],
        "runs": bench["runs"],
    }
    if jax.process_index() == 0:  # several processes share the workdir: one writer
        (workdir / RESULTS).write_text(json.dumps(summary, indent=2, default=str) + "\n")
        (workdir / REPORT).write_text(report_markdown(summary))
        log.info("quickstart report: %s", workdir / REPORT)
    parallel.barrier(f"quickstart {workdir}")  # every process returns once they exist
    return summary


def _describe(model: Model) -> str:
    c = model.config
    return f"{c.num_layers}x{c.hidden_size}, V={c.vocab_size}, {c.num_params() / 1e6:.2f}M params"


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report_markdown(summary: dict) -> str:
    """The quickstart's report: the models and heads, then the benchmark pooled over categories."""
    models = table(
        ["model", "architecture", "train steps", "eval loss", "perplexity", "decode ms/token (b=1)"],
        [
            [name, s["model"], s.get("step", "-"), _fmt(s.get("eval_loss"), ".3f"),
             _fmt(s.get("eval_perplexity"), ".1f"), f"{s['decode_ms_per_token']:.2f}"]
            for name, s in ((n, summary[n]) for n in ("target", "draft"))
            if s is not None
        ],
        "llrrrr",
    )  # fmt: skip
    runs = summary["runs"]
    pooled = [r for r in runs if r.get("category") == "overall"] or runs
    bench = table(
        ["method", "batch", "temperature", "tau", "speedup", "tokens/s"],
        [
            [r["method"], r["batch_size"], f"{r['temperature']:g}", f"{r['tau']:.2f}",
             f"{r['speedup']:.2f}", _fmt(r.get("tokens_per_s"), ".1f")]
            for r in pooled
        ],
        "lrrrrr",
    )  # fmt: skip
    lines = [
        "# specjax quickstart",
        "",
        models,
        "",
    ]
    if summary["decode_cost_ratio"] is not None:
        lines += [f"Decode cost ratio c = draft / target = {summary['decode_cost_ratio']:.3f}.", ""]
    medusa = summary.get("medusa")
    if medusa:
        lines += [
            f"Medusa heads ({len(medusa['top1'])} heads, {medusa['num_params'] / 1e6:.2f}M "
            f"params, draft vocabulary {medusa.get('draft_vocab_size', '?')}, "
            f"{medusa['step']} steps on {medusa['train_rows']} {medusa['data_kind']} "
            "rows): held-out top-1 / top-5 accuracy per head (head k: token t + k + 2):",
            "",
            table(
                ["head", "top-1", "top-5"],
                [
                    [k, f"{a:.3f}", f"{b:.3f}"]
                    for k, (a, b) in enumerate(zip(medusa["top1"], medusa["top5"], strict=True))
                ],
                "lrr",
            ),  # fmt: skip
            "",
        ]
    eagle3 = summary.get("eagle3")
    if eagle3:
        lines += [
            f"EAGLE-3 drafter ({eagle3['num_params'] / 1e6:.2f}M params, taps "
            f"{tuple(eagle3['tap_layers'])}, draft vocabulary {eagle3['draft_vocab_size']}, "
            f"{eagle3['step']} steps with a {eagle3['ttt_steps']}-step training-time test on "
            f"{eagle3['train_rows']} {eagle3['data_kind']} rows): held-out top-1 agreement "
            "with the target per drafting step (step k drafts token t + k + 2 from its own "
            "earlier outputs): " + " / ".join(f"{a:.3f}" for a in eagle3["top1"]) + ".",
            "",
        ]
    lines.append(bench)
    if pooled:
        best = max(pooled, key=lambda r: r["speedup"])
        lines += [
            "",
            f"Fastest: {best['method']} at batch {best['batch_size']}, T={best['temperature']:g}: "
            f"{best['speedup']:.2f}x (median speedup over all rows "
            f"{float(np.median([r['speedup'] for r in pooled])):.2f}x).",
        ]
    lines += ["", "Per-category rows, tau vs N and plots: bench/report.md, bench/plots/.", ""]
    return "\n".join(lines)
