"""Trained draft heads get their drafts accepted: Medusa heads and an EAGLE-3 drafter trained
on a tiny target, then decoded with `sj.generate` (greedy, batch 1) on held-out prompts.

The corpus makes every offset distinguishable: lines are windows of one random cyclic
sequence of six letters in which each of the 36 ordered pairs occurs once a period, so the
next letter is a function of the last two and of no single one (each letter is followed by
each of the six, once). Head k at t should draft the token at t + k + 2; a head one offset
short drafts the token at t + k + 1, i.e. repeats its predecessor's letter, which is right
only on the pairs "aa", "bb", ...: 1 time in 6. Untrained Medusa heads are such heads (an
identity block and the target's LM head draft the token at t + 1 from every head), and so
are heads that the real loop trains with every label moved one early. The target is a tiny
LM trained on the corpus in rows of 32 tokens (prompt + generation stay within them); the
heads train on the corpus rows; the prompts are windows of the same cycle.

Thresholds, for a chain of 3 drafts (acceptance_by_position u_i = P(a step accepts >= i
drafts), tau = tokens per target call): u >= (0.6, 0.5, 0.4) and tau >= 2.4. Measured on
CPU: trained Medusa heads u = (0.95, 0.91, 0.81), tau 3.45; the trained EAGLE-3 drafter
(1.0, 0.89, 0.88), tau 3.45; untrained Medusa heads (0.20, 0, 0), tau 1.19; heads trained one
offset early (0.20, 0.01, 0.01), tau 1.21; the untrained drafter (0, 0, 0), tau 1.0.
"""

import string

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from configs import train_eagle, train_medusa
from configs import train_lm as train_lm_configs
from specjax import data
from specjax.decoding.engine import acceptance_rates
from specjax.train import eagle as te
from specjax.train import heads as th
from specjax.train import lm, losses

LETTERS = string.ascii_lowercase[:6]
SEQ_LEN, PROMPT, NEW = 32, 8, 24  # prompt + generation within the rows' 32 positions
STARTS = range(0, 36, 4)  # nine prompts, each a window of the cycle at its own offset
DRAFTS = 3
THRESHOLDS = (0.6, 0.5, 0.4)
MIN_TAU = 2.4


CYCLE = data.pair_cycle(len(LETTERS))  # the corpus of the `:tiny` quickstart too


def window(start: int, n: int) -> str:
    return " ".join(LETTERS[CYCLE[(start + j) % len(CYCLE)]] for j in range(n))


def test_the_corpus_needs_two_letters_of_context():
    pairs = {(CYCLE[i], CYCLE[(i + 1) % 36]) for i in range(36)}
    assert len(pairs) == 36  # every ordered pair once: two letters fix the next one
    followers = {a: {CYCLE[(i + 1) % 36] for i in range(36) if CYCLE[i] == a} for a in range(6)}
    assert all(len(f) == 6 for f in followers.values())  # one letter fixes nothing
    # a draft one offset off (the letter after the pending one, again) is right 1 in 6
    assert sum(CYCLE[i] == CYCLE[(i + 1) % 36] for i in range(36)) == 6


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(0)
    lines = [window(int(rng.integers(36)), 40) for _ in range(400)]
    path = tmp_path_factory.mktemp("corpus") / "pairs.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def target(corpus, tmp_path_factory):
    config = train_lm_configs.get_config("tiny")
    config.data.update(source=str(corpus), sample_by="line", max_chars=None, eval_fraction=0.1)
    config.tokenizer.vocab_size = 300
    config.model.update(hidden_size=64, head_dim=16, intermediate_size=128)
    config.train.update(seq_len=SEQ_LEN, num_steps=150, learning_rate=1e-2, progress=False)
    workdir = tmp_path_factory.mktemp("target")
    lm.train_lm(config, workdir)
    return sj.load_model(workdir)


def _rows(config, corpus, steps):
    config.data.update(kind="corpus", source=str(corpus), sample_by="line", eval_fraction=0.1,
                       seq_len=SEQ_LEN, max_chars=None)  # fmt: skip
    config.train.update(num_steps=steps, learning_rate=1e-2, eval_every=steps,
                        checkpoint_every=steps, progress=False)  # fmt: skip
    return config


def medusa_config(corpus):
    config = _rows(train_medusa.get_config("tiny"), corpus, 150)
    config.heads.num_heads = DRAFTS
    return config


def decode(target, draft, method):
    """Greedy, batch 1, one call per prompt: ({acceptance_by_position, tau} of all the calls'
    steps together, the generated tokens of each call)."""
    tok = target.tokenizer
    spec = {"method": method, "model": draft, "num_speculative_tokens": DRAFTS}
    keys = ("offered_by_position", "reached_by_position", "accepted_by_position")
    counts, accepted, steps, outputs = dict.fromkeys(keys, 0), 0, 0, []
    for start in STARTS:
        out = sj.generate(target, [tok.encode(window(start, PROMPT))], NEW, stop_token_ids=[],
                          speculative_config=spec)  # fmt: skip
        counts = {k: counts[k] + np.asarray(out.stats[k]) for k in keys}
        accepted += out.stats["accepted_tokens"]
        steps += sum(out.stats["row_steps"])
        outputs.append(out.tokens[0])
    u = acceptance_rates(counts)["acceptance_by_position"]
    return {"acceptance_by_position": u, "tau": (accepted + steps) / steps}, outputs


def passes(stats) -> bool:
    u = stats["acceptance_by_position"]
    return all(a >= b for a, b in zip(u, THRESHOLDS, strict=True)) and stats["tau"] >= MIN_TAU


def follows_the_cycle(target, outputs) -> float:
    """The share of generated tokens that are the cycle's next letter (the target's fit)."""
    tok, hits = target.tokenizer, []
    for start, out in zip(STARTS, outputs, strict=True):
        want = tok.encode(" " + window(start + PROMPT, NEW))
        hits += [a == b for a, b in zip(out, want, strict=True)]
    return float(np.mean(hits))


@pytest.fixture(scope="module")
def medusa(corpus, target, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("medusa")
    summary = th.train_heads(medusa_config(corpus), workdir, target=target)
    return summary, sj.load_draft(workdir, target=target)


def test_trained_medusa_heads_get_their_drafts_accepted(corpus, target, medusa):
    summary, heads = medusa
    stats, outputs = decode(target, heads, "medusa")
    assert follows_the_cycle(target, outputs) > 0.9  # the target learned the process
    assert passes(stats), (stats, summary["top1"])
    # Negative control: the untrained heads (identity blocks, the target's LM head) draft
    # the token at t + 1 from every head, one offset short: they cannot pass.
    graphdef, state, _ = th.make_state(medusa_config(corpus), target)
    untrained = nnx.merge(graphdef, state)[0]
    control, _ = decode(target, untrained, "medusa")
    assert not passes(control) and control["acceptance_by_position"][0] < 2 / 6, control


@pytest.mark.slow
def test_medusa_heads_trained_one_offset_early_cannot_pass(corpus, target, tmp_path, monkeypatch):
    """Heads trained by the real loop with every label moved one early (head k on the token
    at t + k + 1): as trained as the real ones, and rejected."""
    real = losses.medusa_loss

    def one_early(head_logits, tokens, mask, *args, **kwargs):
        late = lambda x: jnp.pad(x, ((0, 0), (1, 0)))[:, : x.shape[1]]  # noqa: E731
        return real(head_logits, late(tokens), late(mask), *args, **kwargs)

    monkeypatch.setattr(losses, "medusa_loss", one_early)
    summary = th.train_heads(medusa_config(corpus), tmp_path, target=target)
    monkeypatch.undo()
    assert summary["top1"][0] > 0.6, summary["top1"]  # it learned its (wrong) labels
    stats, _ = decode(target, sj.load_draft(tmp_path, target=target), "medusa")
    assert not passes(stats) and stats["acceptance_by_position"][0] < 2 / 6, stats


@pytest.mark.slow
def test_trained_eagle3_drafter_gets_its_drafts_accepted(corpus, target, tmp_path):
    config = _rows(train_eagle.get_config("tiny"), corpus, 150)
    config.ttt_steps = DRAFTS
    summary = te.train_eagle(config, tmp_path, target=target)
    stats, outputs = decode(target, sj.load_draft(tmp_path, target=target), "eagle3")
    assert follows_the_cycle(target, outputs) > 0.9
    assert passes(stats), (stats, summary["top1"])
    # Negative control: the same drafter untrained (its seed's initialisation).
    untrained = te.make_head(config, target)  # the full vocabulary: no counts needed
    control, _ = decode(target, untrained, "eagle3")
    assert not passes(control), control
