"""Self-distillation data: the target regenerates continuations of training prompts.

Heads learn to predict what the *target* writes, not what the corpus says (Medusa-2 and EAGLE
train on the target's own generations; a head fit to text the target would not produce
drafts tokens the verifier rejects). `self_distill` runs `generate` over prompts cut from the
train split, at a configurable temperature, and stores the rows as a `datasets.Dataset` on
disk: columns `input_ids` (prompt + continuation) and `loss_mask` (0 on the prompt, 1 on the
continuation). The directory name is a hash of everything that decides the rows (the target's
weights, the prompts, the sampling), so a second run with the same inputs reuses them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import datasets
import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from tqdm.auto import tqdm

from specjax import sampling as sp
from specjax.decoding.engine import generate
from specjax.models import Model

log = logging.getLogger(__name__)


def target_fingerprint(model: Model) -> str:
    """sha256 of the target's parameters and config: which model generated the data."""
    h = hashlib.sha256(repr(model.config).encode())
    for _, value in sorted(nnx.to_flat_state(nnx.state(model.module, nnx.Param)), key=str):
        h.update(np.ascontiguousarray(np.asarray(value.get_value())).tobytes())
    return h.hexdigest()


def self_distill(
    target: Model,
    prompts: list[list[int]],
    new_tokens: int,
    sampling: sp.SamplingParams,
    cache_dir,
    *,
    batch_size: int = 32,
    progress: bool = True,
    mesh=None,
) -> datasets.Dataset:
    """The target's continuations of `prompts`, generated once and stored under `cache_dir`.

    Args:
      target: the model whose outputs the heads learn.
      prompts: token-id lists, all of one length (rows are then prompt + new_tokens long).
      new_tokens: tokens generated per prompt (stop ids disabled: every row is full length).
      sampling: the target's sampling (temperature 0 = its greedy continuations).
      cache_dir: parent directory of the stored datasets.
      batch_size: prompts per `generate` call.
      mesh: a ("data", "model") device mesh to generate on (None: one device). With several
        processes every process generates the same rows, process 0 stores them and the others
        read them back after a barrier.
    Returns:
      Dataset with `input_ids` [prompt + new_tokens] and `loss_mask` (int8) columns.
    """
    lengths = {len(p) for p in prompts}
    if len(lengths) != 1:
        raise ValueError(f"self_distill needs prompts of one length, got {sorted(lengths)}")
    key = {
        "target": target_fingerprint(target),
        "prompts": hashlib.sha256(np.asarray(prompts, np.int32).tobytes()).hexdigest(),
        "new_tokens": int(new_tokens),
        "sampling": repr(sampling),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    where = Path(cache_dir) / f"distill-{digest}"
    if (where / "dataset_info.json").is_file():
        log.info("self-distillation data reused from %s", where)
        return datasets.load_from_disk(str(where))
    rows = []
    batch_size = min(batch_size, len(prompts))
    with tqdm(total=len(prompts), desc="self-distill", unit="prompt", disable=not progress) as bar:
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            real = len(chunk)
            chunk = chunk + [chunk[0]] * (batch_size - real)  # one shape: one compile
            # Row i's stream depends on its index alone, not on the batching.
            seeds = [(sampling.seed + start + i) % 2**32 for i in range(batch_size)]
            out = generate(
                target, chunk, new_tokens, sampling, stop_token_ids=[], seeds=seeds, mesh=mesh
            )
            rows += [p + t for p, t in zip(chunk[:real], out.tokens[:real], strict=True)]
            bar.update(real)
    prompt_len = lengths.pop()
    mask = [[0] * prompt_len + [1] * new_tokens for _ in rows]
    ds = datasets.Dataset.from_dict({"input_ids": rows, "loss_mask": mask})
    ds = ds.cast_column("input_ids", datasets.Sequence(datasets.Value("int32")))
    ds = ds.cast_column("loss_mask", datasets.Sequence(datasets.Value("int8")))
    if jax.process_index() == 0:  # one writer; the others wait for it
        ds.save_to_disk(str(where))
        (where / "key.json").write_text(json.dumps(key, indent=2) + "\n")
        log.info("self-distillation data: %d rows written to %s", len(rows), where)
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"self-distill {digest}")
    return datasets.load_from_disk(str(where))


def as_rows(ds: datasets.Dataset) -> dict[str, np.ndarray]:
    """{"tokens" [N, T] int32, "mask" [N, T] int8} from a self-distillation dataset."""
    ds = ds.with_format("numpy")
    return {
        "tokens": np.asarray(ds["input_ids"], np.int32),
        "mask": np.asarray(ds["loss_mask"], np.int8),
    }
