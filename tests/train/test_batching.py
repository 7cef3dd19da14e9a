"""Tokenising, packing and resumable batches: `specjax.train.batching`."""

import itertools

import numpy as np
import pytest

from specjax.train import batching


def test_pack_shapes_and_values():
    docs = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10, 11]]
    packed = batching.pack(docs, seq_len=4, eos_id=0)
    stream = np.array([1, 2, 3, 0, 4, 5, 0, 6, 7, 8, 9, 10, 11, 0])  # 14 tokens
    assert packed.shape == (3, 5) and packed.dtype == np.int32  # (14 - 1) // 4 rows
    for i, row in enumerate(packed):
        np.testing.assert_array_equal(row, stream[i * 4 : i * 4 + 5])
    no_eos = batching.pack(docs, seq_len=2)
    np.testing.assert_array_equal(no_eos[-1], [9, 10, 11])
    with pytest.raises(ValueError, match="cannot fill one row"):
        batching.pack([[1, 2]], seq_len=4, eos_id=0)


def test_pack_from_tokenizer(small_ds, tok):
    streams = batching.tokenize(small_ds["text"], tok)
    assert streams[0].tolist() == tok.encode(small_ds["text"][0])
    packed = batching.pack(streams, seq_len=32, eos_id=tok.eos_token_id)
    flat = np.concatenate([np.r_[s, tok.eos_token_id] for s in streams])
    assert packed.shape == ((len(flat) - 1) // 32, 33)
    np.testing.assert_array_equal(packed[7], flat[7 * 32 : 7 * 32 + 33])


def _take(iterator, n):
    return list(itertools.islice(iterator, n))


def test_batches_resume_exactly():
    packed = np.arange(23 * 9, dtype=np.int32).reshape(23, 9)  # 23 rows, T = 8
    per_epoch = batching.steps_per_epoch(packed, 5)  # 4: the 3 leftover rows are dropped
    full = _take(batching.batches(packed, 5, seed=7), 3 * per_epoch + 2)
    assert [s for s, _ in full] == list(range(len(full)))
    for k in (0, 1, 3, 4, 9):
        resumed = _take(batching.batches(packed, 5, seed=7, start_step=k), len(full) - k)
        for (s1, b1), (s2, b2) in zip(full[k:], resumed, strict=True):
            assert s1 == s2
            np.testing.assert_array_equal(b1["inputs"], b2["inputs"])
            np.testing.assert_array_equal(b1["targets"], b2["targets"])
            np.testing.assert_array_equal(
                b1["inputs"], batching.batch_at(packed, 5, 7, s1)["inputs"]
            )
    _, batch = full[0]
    assert batch["inputs"].shape == batch["targets"].shape == (5, 8)
    np.testing.assert_array_equal(batch["inputs"][:, 1:], batch["targets"][:, :-1])
    epoch0 = np.concatenate([b["inputs"][:, 0] for _, b in full[:per_epoch]]) // 9
    assert len(set(epoch0)) == 20  # an epoch visits distinct rows
    epoch1 = np.concatenate([b["inputs"][:, 0] for _, b in full[per_epoch : 2 * per_epoch]]) // 9
    assert not np.array_equal(epoch0, epoch1)  # reshuffled each epoch
    one_epoch = list(batching.batch_iterator(packed, 5, seed=7, epoch=1))
    assert len(one_epoch) == per_epoch
    np.testing.assert_array_equal(one_epoch[0]["inputs"], full[per_epoch][1]["inputs"])
    other_seed = next(batching.batches(packed, 5, seed=8))[1]
    assert not np.array_equal(other_seed["inputs"], batch["inputs"])
    with pytest.raises(ValueError, match="batch_size=24"):
        batching.steps_per_epoch(packed, 24)
