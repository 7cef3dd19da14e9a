"""Training rows and batches: tokenised documents packed into rows, resumable batch order.

    rows = pack(tokenize(train_ds["text"], tok), seq_len=256, eos_id=tok.eos_token_id)
    for step, batch in batches(rows, batch_size=32, seed=0, start_step=restored_step): ...

The corpora come from `specjax.data`; only the trainers read this module. Batch order is a
permutation per epoch from (seed, epoch), so step k's batch is a pure function of
(rows, batch_size, seed, k) and a restored trainer sees exactly the batches it would have.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from specjax.validate import check_int

# ------------------------------------------------------------------- tokenising and packing


def tokenize(texts: Iterable[str], tokenizer, chunk_size: int = 256) -> list[np.ndarray]:
    """Encodes documents (no special tokens) with a progress bar on a terminal.

    Args:
      texts: the documents (a list or a Dataset column).
      tokenizer: a `specjax.io.tokenizer.Tokenizer` (anything with `encode_batch`).
      chunk_size: documents per `encode_batch` call.

    Returns:
      One int32 array of ids per document (arrays, not lists: a large corpus fits in memory).
    """
    texts = list(texts)
    out: list[np.ndarray] = []
    with tqdm(total=len(texts), desc="tokenize", unit="doc", disable=None) as bar:
        for start in range(0, len(texts), chunk_size):
            chunk = texts[start : start + chunk_size]
            out += [np.asarray(ids, np.int32) for ids in tokenizer.encode_batch(chunk)]
            bar.update(len(chunk))
    return out


def pack(
    token_streams: Iterable[Sequence[int]], seq_len: int, eos_id: int | None = None
) -> np.ndarray:
    """Concatenates documents and cuts the stream into rows for next-token training.

    The stream is doc_0 [eos] doc_1 [eos] ... (eos after every document when given). Row i
    is stream[i * seq_len : i * seq_len + seq_len + 1]: consecutive rows share one token,
    so every token after the first is a target exactly once (inputs = row[:-1],
    targets = row[1:]). The tail that does not fill a row is dropped.

    Args:
      token_streams: token ids per document.
      seq_len: T, tokens per training input.
      eos_id: appended after each document; None to concatenate as they are.

    Returns:
      int32 [num_seqs, seq_len + 1].
    """
    check_int("seq_len", seq_len, 1)
    suffix = np.asarray([] if eos_id is None else [eos_id], dtype=np.int64)
    parts = []
    for doc in token_streams:
        parts += [np.asarray(doc, dtype=np.int64), suffix]
    stream = np.concatenate(parts) if parts else np.zeros((0,), np.int64)  # [N]
    if stream.size and (stream.min() < 0 or stream.max() > np.iinfo(np.int32).max):
        raise ValueError("token ids must lie in [0, 2**31 - 1]")
    stream = stream.astype(np.int32)
    num_seqs = (stream.size - 1) // seq_len
    if num_seqs < 1:
        raise ValueError(
            f"{stream.size} tokens cannot fill one row of seq_len + 1 = {seq_len + 1} tokens"
        )
    starts = np.arange(num_seqs)[:, None] * seq_len  # [num_seqs, 1]
    return stream[starts + np.arange(seq_len + 1)]  # [num_seqs, T + 1]


# ------------------------------------------------------------------- batches


def num_rows(packed) -> int:
    """Rows of a packed array, or of a dict of equally long row arrays."""
    if isinstance(packed, dict):
        sizes = {len(v) for v in packed.values()}
        if len(sizes) != 1:
            raise ValueError(f"row arrays have different lengths: {sorted(sizes)}")
        return sizes.pop()
    return len(packed)


def steps_per_epoch(packed, batch_size: int) -> int:
    """Full batches per epoch (the last partial batch of each epoch is dropped)."""
    n = num_rows(packed)
    check_int("batch_size", batch_size, 1, n, note="rows in packed")
    return n // batch_size


def _epoch_permutation(num_rows: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(num_rows)  # [num_rows]


def _make_batch(packed, rows: np.ndarray) -> dict[str, np.ndarray]:
    """LM rows [N, T + 1] -> {"inputs", "targets"} [B, T]; a dict of row arrays -> the same
    keys, each [B, ...] (e.g. a head trainer's {"tokens", "mask"})."""
    if isinstance(packed, dict):
        return {k: v[rows] for k, v in packed.items()}
    chosen = packed[rows]  # [B, T + 1]
    return {"inputs": chosen[:, :-1], "targets": chosen[:, 1:]}  # [B, T] each


def batch_at(packed, batch_size: int, seed: int, step: int) -> dict[str, np.ndarray]:
    """The batch of global step `step`: {"inputs" [B, T], "targets" [B, T]} int32 (LM rows),
    or the selected rows of each array of a dict."""
    per_epoch = steps_per_epoch(packed, batch_size)
    epoch, i = divmod(step, per_epoch)
    perm = _epoch_permutation(num_rows(packed), seed, epoch)
    return _make_batch(packed, perm[i * batch_size : (i + 1) * batch_size])


def batches(
    packed, batch_size: int, seed: int, start_step: int = 0, local: slice = slice(None)
) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """Yields (step, batch) forever from `start_step`, each as `batch_at` gives it.

    `packed` is LM rows [N, T + 1] or a dict of row arrays sharing their first axis.
    `local`: the rows of each global batch this process reads (a training process on a
    device mesh reads only its own shard of the batch; all of them by default).

    Epoch e visits the rows in the permutation drawn from (seed, e); resuming at step k
    yields exactly what the uninterrupted iterator yields from step k.
    """
    check_int("start_step", start_step, 0)
    per_epoch = steps_per_epoch(packed, batch_size)
    epoch, first = divmod(start_step, per_epoch)
    while True:
        perm = _epoch_permutation(num_rows(packed), seed, epoch)
        for i in range(first, per_epoch):
            rows = perm[i * batch_size : (i + 1) * batch_size]
            yield epoch * per_epoch + i, _make_batch(packed, rows[local])
        epoch, first = epoch + 1, 0


def batch_iterator(
    packed, batch_size: int, seed: int, epoch: int = 0
) -> Iterator[dict[str, np.ndarray]]:
    """The batches of one epoch, in that epoch's order (the same as `batches` gives)."""
    per_epoch = steps_per_epoch(packed, batch_size)
    stream = batches(packed, batch_size, seed, start_step=epoch * per_epoch)
    for _ in range(per_epoch):
        yield next(stream)[1]
