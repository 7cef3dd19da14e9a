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
from tqdm.auto import tqdm

from specjax import parallel
from specjax import sampling as sp
from specjax.decoding.engine import generate
from specjax.models import Model

log = logging.getLogger(__name__)


def target_fingerprint(model: Model) -> str:
    """sha256 of the target's parameters and config: which model generated the data."""
    h = hashlib.sha256(repr(model.config).encode())
    for _, value in sorted(nnx.to_flat_state(nnx.state(model.module, nnx.Param)), key=str):
        h.update(np.ascontiguousarray(parallel.to_host(value.get_value())).tobytes())
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
      prompts: token-id lists. Of one length, rows are prompt + new_tokens long; of several
        (chat prompts), each row is right-padded to the longest with the tokenizer's pad id
        (0 without one), masked out: causal attention never lets a pad reach a label.
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
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("self_distill needs at least one prompt, none of them empty")
    lengths = [len(p) for p in prompts]
    flat = np.concatenate([np.asarray(p, np.int32) for p in prompts])
    if len(set(lengths)) > 1:  # ragged: the lengths join the hash (one length: as before)
        flat = np.concatenate([flat, np.asarray(lengths, np.int32)])
    key = {
        "target": target_fingerprint(target),
        "prompts": hashlib.sha256(flat.tobytes()).hexdigest(),
        "new_tokens": int(new_tokens),
        "sampling": repr(sampling),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    where = Path(cache_dir) / f"distill-{digest}"
    parallel.barrier(f"self-distill check {digest}")  # every process decides on the same files
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
    width = max(lengths) + new_tokens
    pad_id = (target.tokenizer.pad_token_id if target.tokenizer is not None else None) or 0
    mask = [[0] * n + [1] * new_tokens + [0] * (width - n - new_tokens) for n in lengths]
    rows = [r + [pad_id] * (width - len(r)) for r in rows]
    ds = datasets.Dataset.from_dict({"input_ids": rows, "loss_mask": mask})
    ds = ds.cast_column("input_ids", datasets.Sequence(datasets.Value("int32")))
    ds = ds.cast_column("loss_mask", datasets.Sequence(datasets.Value("int8")))
    if jax.process_index() == 0:  # one writer; the others wait for it
        ds.save_to_disk(str(where))
        (where / "key.json").write_text(json.dumps(key, indent=2) + "\n")
        log.info("self-distillation data: %d rows written to %s", len(rows), where)
    parallel.barrier(f"self-distill {digest}")
    return datasets.load_from_disk(str(where))


def store_features(
    directory: Path, key: dict, fn, tokens: np.ndarray, shapes: dict, *, batch_size: int,
    progress: bool, mesh=None, dtypes: dict | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """`fn(tokens [b, T]) -> {name: [b, ...]}` over every row, stored once as `<name>.npy`.

    Reused while `key.json` under `directory` equals `key`. Rows go through `fn` in batches
    of `batch_size` (the last one padded: one shape, one compile). With a device `mesh` each
    batch is placed replicated on it and each output gathered, so `fn` may close over
    parameters sharded across processes; every process runs every batch (the forward is a
    collective) and process 0 alone writes.

    Args:
      shapes: {name: per-row shape}; the stores are [N, *shape].
      dtypes: {name: numpy dtype} for stores that are not float32 (e.g. token ids).
    Returns:
      {name: array [N, *shape]}, memory-mapped read-only.
    """
    paths = {n: directory / f"{n}.npy" for n in shapes}
    key_path = directory / "key.json"
    if key_path.is_file() and json.loads(key_path.read_text()) == key:
        if all(p.is_file() for p in paths.values()):
            log.info("features reused from %s", directory)
            return {n: np.load(p, mmap_mode="r") for n, p in paths.items()}
    # Nothing is written before every process has looked at the key (and missed: with no
    # writes before this point, they all see the same files).
    parallel.barrier(f"features compute {directory}")
    writer = jax.process_index() == 0
    N = len(tokens)
    if writer:
        directory.mkdir(parents=True, exist_ok=True)
        key_path.unlink(missing_ok=True)  # a half-written store is never reused
        out = {
            n: np.lib.format.open_memmap(
                p, "w+", (dtypes or {}).get(n, np.float32), (N, *shapes[n])
            )
            for n, p in paths.items()
        }
    replicated = None if mesh is None else parallel.layout_of(mesh).replicated()
    for start in tqdm(range(0, N, batch_size), desc="features", disable=not progress):
        chunk = tokens[start : start + batch_size]
        pad = batch_size - len(chunk)
        full = np.concatenate([chunk, np.repeat(chunk[:1], pad, 0)]) if pad else chunk
        if replicated is not None:
            full = parallel.place(full, replicated)
        values = {n: parallel.to_host(v) for n, v in fn(full).items()}
        if writer:
            for n, v in values.items():
                out[n][start : start + len(chunk)] = v[: len(chunk)]
    if writer:
        for array in out.values():
            array.flush()
        del out
        key_path.write_text(json.dumps(key) + "\n")
    parallel.barrier(f"features {directory}")
    return {n: np.load(p, mmap_mode="r") for n, p in paths.items()}


def as_rows(ds: datasets.Dataset) -> dict[str, np.ndarray]:
    """{"tokens" [N, T] int32, "mask" [N, T] int8} from a self-distillation dataset."""
    ds = ds.with_format("numpy")
    return {
        "tokens": np.asarray(ds["input_ids"], np.int32),
        "mask": np.asarray(ds["loss_mask"], np.int8),
    }
