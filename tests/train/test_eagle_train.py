"""The EAGLE trainer: the training-time-test mask and unroll, the losses against direct
computations, learning on a tiny target, and a SIGKILLed run resuming exactly.

The training target is a tiny random Llama whose LM head is scaled x20, so that its
next-token distribution is as peaked as a trained model's (entropy ~3.5 nats over 283 ids;
unscaled it is uniform to 0.01 nats and the soft cross-entropy has nothing to teach). The
drafter learns the target's own greedy tokens on a synthetic corpus (lines of the alphabet
in cyclic order), which needs no trained LM. The module keeps jax's persistent compilation
cache in a temporary directory: every `train_eagle` call traces its steps afresh, and the
resumed run (here and in the subprocess) then loads the reference run's programs instead of
compiling them again.
"""

import signal
import string
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from configs import train_eagle as configs
from specjax.io.tokenizer import train_bpe
from specjax.train import checkpoint
from specjax.train import eagle as te
from specjax.train.metrics import read_jsonl

REPO = Path(__file__).resolve().parents[2]
CACHE_KEYS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")


@pytest.fixture(scope="module", autouse=True)
def compile_cache(tmp_path_factory):
    from jax.experimental.compilation_cache import compilation_cache as cc

    path = tmp_path_factory.mktemp("jax_cache")
    old = {k: getattr(jax.config, k) for k in CACHE_KEYS}
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    cc.reset_cache()
    yield path
    for k, v in old.items():
        jax.config.update(k, v)
    cc.reset_cache()


# ------------------------------------------------------------------------- pure functions


def test_ttt_mask_sees_the_prefix_and_the_earlier_steps_same_position_keys():
    # Keys: step 0's entries 0..2, then step 1's, then step 2's.
    want = np.array(
        [
            # step 0 (causal)  step 1 (t only)  step 2 (t only)
            [1, 0, 0,          1, 0, 0,         1, 0, 0],
            [1, 1, 0,          0, 1, 0,         0, 1, 0],
            [1, 1, 1,          0, 0, 1,         0, 0, 1],
        ],
        bool,
    )  # fmt: skip
    np.testing.assert_array_equal(np.asarray(te.ttt_mask(3, 2)), want)
    np.testing.assert_array_equal(np.asarray(te.ttt_mask(3, 1)), want[:, :6])
    np.testing.assert_array_equal(np.asarray(te.ttt_mask(3, 0)), want[:, :3])


def _config(method):
    config = te.default_config()
    config.method = method
    if method == "eagle3":
        config.head.draft_vocab_size = 16
    return config


@pytest.fixture(scope="module")
def drafters(target):
    """An EAGLE-3 drafter (16 of the 32 ids, from random counts) and an EAGLE-1 drafter."""
    counts = np.random.default_rng(3).integers(0, 100, 32)
    return {m: te.make_head(_config(m), target, counts) for m in ("eagle3", "eagle")}


def test_the_drafter_layer_takes_its_mlp_width_from_the_config(target, tmp_path):
    config = _config("eagle3")
    config.head.intermediate_size = 24  # the tiny target's is 128
    counts = np.random.default_rng(3).integers(0, 100, 32)
    head = te.make_head(config, target, counts)
    D = target.config.hidden_size
    assert target.config.intermediate_size != 24 and head.config.layer.intermediate_size == 24
    assert head.mlp.up_proj.kernel[...].shape == (D, 24)
    assert head.mlp.down_proj.kernel[...].shape == (24, D)
    sj.save_draft(head, tmp_path / "narrow")
    back = sj.load_draft(tmp_path / "narrow", target=target)
    assert back.config.layer.intermediate_size == 24
    np.testing.assert_array_equal(back.mlp.down_proj.kernel[...], head.mlp.down_proj.kernel[...])


def _rows(B=2, T=12, seed=0):
    rng = np.random.default_rng(seed)
    tokens = jnp.asarray(rng.integers(0, 32, (B, T)), jnp.int32)
    mask = jnp.asarray(np.arange(T)[None, :] >= np.array([[3], [5]]), jnp.int8)  # prompts
    return {"tokens": tokens, "mask": mask}


def _cached_steps(head, target, tokens, feature, t, steps):
    """What the drafter computes when it drafts `steps` tokens from position t with its
    one-layer cache: step 0 over entries 0..t (causal), then one entry per step."""
    B = tokens.shape[0]
    cache = head.init_cache(B, t + 1 + steps)
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((t + 1, t + 1), bool)), (B, t + 1, t + 1))
    positions = jnp.broadcast_to(jnp.arange(t + 1), (B, t + 1))
    h, _, cache = head(target, tokens[:, 1 : t + 2], feature[:, : t + 1], positions, cache, causal)
    outs, prev = [h], h[:, t : t + 1]
    cache = cache.advance(jnp.full((B,), t + 1))
    for k in range(1, steps):
        token = tokens[:, t + 1 + k : t + 2 + k]
        prev, _, cache = head(target, token, prev, jnp.full((B, 1), t + k), cache,
                              jnp.ones((B, 1, 1), bool))  # fmt: skip
        cache = cache.advance(jnp.ones((B,), jnp.int32))
        outs.append(prev)
    return outs


@pytest.mark.parametrize("method", ["eagle3", "eagle"])
def test_unroll_is_what_the_drafter_computes_when_it_drafts(target, drafters, method):
    head, tokens, t = drafters[method], _rows()["tokens"], 5

    @jax.jit
    def both():
        hidden, taps = te._forward(target, tokens, head.config.tap_layers)
        feature = head.target_feature(hidden, taps)
        unrolled = [h for h, _ in te.unroll(head, target, tokens, feature, 3)]
        return unrolled, _cached_steps(head, target, tokens, feature, t, 3)

    outs, cached = both()
    np.testing.assert_allclose(cached[0], outs[0][:, : t + 1], rtol=1e-5, atol=1e-5)
    for k in (1, 2):  # step k's entry t reads token x_{t+1+k} at position t + k
        np.testing.assert_allclose(cached[k][:, 0], outs[k][:, t], rtol=1e-5, atol=1e-5)


def _soft_ce(logits, target_logits):
    p = jax.nn.softmax(np.asarray(target_logits, np.float64), -1)
    return -np.sum(p * jax.nn.log_softmax(np.asarray(logits, np.float64), -1), -1)


def test_one_step_ttt_loss_is_the_plain_eagle3_step_loss(target, drafters):
    head, config, batch = drafters["eagle3"], _config("eagle3"), _rows()
    tokens, mask = batch["tokens"], np.asarray(batch["mask"])
    B, T = tokens.shape

    @jax.jit
    def plain():  # the drafter's cached forward over each row (causal), one step
        hidden, taps = te._forward(target, tokens, head.config.tap_layers)
        feature = head.target_feature(hidden, taps)
        cache, causal = head.init_cache(B, T), jnp.tril(jnp.ones((T, T), bool))[None].repeat(B, 0)
        pad = jnp.pad(tokens[:, 1:], ((0, 0), (0, 1)))
        h, _, _ = head(target, pad, feature, jnp.broadcast_to(jnp.arange(T), (B, T)), cache, causal)
        return hidden, taps, head.draft_logits(target, h), target.unembed(hidden)

    hidden, taps, draft, full = jax.device_get(plain())  # draft [B, T, 16], full [B, T, 32]

    def ttt(steps, decay):
        config.loss.decay = decay
        return jax.jit(
            lambda: te.compute_losses(config, head, target, batch, hidden, taps, steps)
        )()

    loss, metrics = ttt(1, 0.8)
    ids = np.arange(16) + np.asarray(head.d2t[...])  # target id of each draft id
    ces, kept, total = [], 0, 0
    for b in range(B):
        for t in range(T - 2):
            if not mask[b, t + 2]:
                continue
            total += 1
            if full[b, t + 1].argmax() not in ids:
                continue  # the target's greedy token cannot be drafted: dropped
            kept += 1
            ces.append(_soft_ce(draft[b, t], full[b, t + 1, ids]))
    assert 0 < kept < total  # the case exercises the dropping
    np.testing.assert_allclose(loss, np.mean(ces), rtol=1e-5)
    np.testing.assert_allclose(metrics["step_0/coverage"], kept / total, rtol=1e-6)
    # Later steps weigh decay^k: with decay 0 a 3-step unroll is the one-step loss again.
    np.testing.assert_allclose(ttt(3, 0.0)[0], loss, rtol=1e-6)
    # Stored features carry the target's greedy tokens: the law is then computed at the draft
    # ids alone (`unembed_at`), with the same loss and metrics over a 3-step unroll.
    config.loss.decay = 0.8
    stored = {**batch, "best": full.argmax(-1).astype(np.int32)}
    got = jax.jit(lambda: te.compute_losses(config, head, target, stored, hidden, taps, 3))()
    want = jax.jit(lambda: te.compute_losses(config, head, target, batch, hidden, taps, 3))()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for name, value in want[1].items():
        np.testing.assert_allclose(got[1][name], value, rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(
        target.unembed_at(jnp.asarray(hidden), jnp.asarray(ids)),
        full[..., ids],
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("method,stored", [("eagle3", False), ("eagle3", True), ("eagle", False)])
def test_losses_at_the_counted_labels_alone_are_the_losses_at_every_entry(
    target, drafters, method, stored
):
    """The LM heads run at the M counted label positions of each row (gathered) instead of
    at every entry: the same loss and metrics, whatever M is as long as no row has more."""
    head, config, batch = drafters[method], _config(method), _rows(B=3, T=12, seed=2)
    mask = (np.arange(12)[None, :] >= np.array([[3], [5], [2]])).astype(np.int8)  # prompts
    mask[2, 4:7] = 0  # a row whose counted labels are not one suffix
    batch = {**batch, "mask": jnp.asarray(mask)}
    hidden, taps = te._forward(target, batch["tokens"], head.config.tap_layers)
    if stored:
        batch["best"] = jnp.argmax(target.unembed(hidden), -1).astype(jnp.int32)
    steps = 3 if method == "eagle3" else 1
    most = te.label_count({"mask": mask})
    assert most == 9
    run = lambda labels: jax.jit(  # noqa: E731
        lambda: te.compute_losses(config, head, target, batch, hidden, taps, steps, labels=labels)
    )()
    want = run(None)
    for labels in (most, most + 2):
        got = run(labels)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        assert got[1].keys() == want[1].keys()
        for name, value in want[1].items():
            np.testing.assert_allclose(got[1][name], value, rtol=1e-5, atol=1e-7, err_msg=name)
    # One label short of the most counted: a row loses a label, and what counts changes (the
    # untrained drafter's CE is flat, so the share of draftable labels shows it: 12 of 23
    # against 11 of 22).
    if method == "eagle3":
        short = run(most - 1)[1]["step_0/coverage"]
        np.testing.assert_allclose([want[1]["step_0/coverage"], short], [12 / 23, 11 / 22])


def test_eagle1_loss_is_smooth_l1_plus_a_tenth_of_the_soft_ce(target, drafters):
    head, config, batch = drafters["eagle"], _config("eagle"), _rows(seed=1)
    tokens, mask = batch["tokens"], np.asarray(batch["mask"])
    B, T = tokens.shape

    @jax.jit
    def run():
        hidden, _ = te._forward(target, tokens, ())
        loss, metrics = te.compute_losses(config, head, target, batch, hidden, (), 1)
        h = te.unroll(head, target, tokens, hidden, 1)[0][0]  # f_hat at every entry
        return loss, metrics, hidden, h, target.unembed(h), target.unembed(hidden)

    loss, metrics, f, h, lm, full = jax.device_get(run())
    feats, ces = [], []
    for b in range(B):
        for t in range(T - 2):
            if mask[b, t + 2]:  # entry t predicts f_{t+1}, whose logits draft token t + 2
                d = np.abs(h[b, t].astype(np.float64) - f[b, t + 1])
                feats.append(np.mean(np.where(d < 1, 0.5 * d**2, d - 0.5)))
                ces.append(_soft_ce(lm[b, t], full[b, t + 1]))
    np.testing.assert_allclose(metrics["feature_loss"], np.mean(feats), rtol=1e-5)
    np.testing.assert_allclose(metrics["step_0/ce"], np.mean(ces), rtol=1e-5)
    np.testing.assert_allclose(loss, np.mean(feats) + 0.1 * np.mean(ces), rtol=1e-5)


# ------------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(0)
    letters = string.ascii_lowercase
    lines = []
    for _ in range(400):
        s = int(rng.integers(26))
        lines.append(" ".join(letters[(s + j) % 26] for j in range(40)))
    path = tmp_path_factory.mktemp("corpus") / "cycles.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def target_dir(corpus, tmp_path_factory, tiny_config):
    tok = train_bpe(corpus.read_text().splitlines(), vocab_size=300)
    module = sj.Decoder(tiny_config.replace(vocab_size=tok.vocab_size), seed=0)
    module.lm_head.kernel.set_value(module.lm_head.kernel[...] * 20.0)  # a peaked distribution
    return sj.save_hf(sj.Model(module, tok, "peaked"), tmp_path_factory.mktemp("target"))


def eagle_config(corpus, target_dir, **train):
    config = configs.get_config("tiny")
    config.target = str(target_dir)
    config.data.update(kind="corpus", source=str(corpus), sample_by="line", eval_fraction=0.1,
                       seq_len=32, max_chars=None)  # fmt: skip
    config.train.update(num_steps=40, learning_rate=1e-2, eval_every=20, checkpoint_every=10,
                        progress=False)  # fmt: skip
    config.train.update(train)
    return config


@pytest.fixture(scope="module")
def reference(corpus, target_dir, tmp_path_factory):
    """An uninterrupted EAGLE-3 run (2 TTT steps): (config, workdir, summary)."""
    config = eagle_config(corpus, target_dir)
    workdir = tmp_path_factory.mktemp("eagle3")
    return config, workdir, te.train_eagle(config, workdir)


def final_state(config, workdir, target):
    """The run's last checkpoint as a pure dict (drafter and optimizer)."""
    _, state, _ = te.make_state(config, target, np.zeros(target.config.vocab_size))
    manager = checkpoint.make_manager(workdir / te.CHECKPOINTS)
    like = nnx.to_pure_dict(state)
    return checkpoint.restore(manager, manager.latest_step(), like)


def test_eagle3_learns_the_targets_tokens(reference, target_dir):
    config, workdir, summary = reference
    target = sj.load_model(target_dir)
    rows = te.th.prepare_rows(config, target, workdir)[1]
    graphdef, state, _ = te.make_state(config, target, np.zeros(target.config.vocab_size))
    _, eval_step = te.make_steps(config, graphdef, target)
    untrained = te.th.evaluate(eval_step, state, rows, config.train.batch_size, 8)
    logged = [r["train/loss"] for r in read_jsonl(workdir / "metrics.jsonl") if "train/loss" in r]
    assert logged[-1] < logged[0] - 1.0, logged
    assert summary["eval_loss"] < untrained["eval/loss"] - 1.0, (summary, untrained)
    # The target's greedy token among 283: chance is ~0.
    assert untrained["eval/step_0/top1"] < 0.05 and summary["top1"][0] > 0.5, summary
    assert summary["top1"][1] > 0.4 and len(summary["top1"]) == 2, summary
    assert summary["tap_layers"] == [0, 1, 1] and summary["coverage"] == 1.0


def test_the_exported_drafter_loads(reference, target_dir):
    config, workdir, summary = reference
    if summary.get("export_error"):
        pytest.skip(f"specjax.io.drafts refused the drafter: {summary['export_error']}")
    target = sj.load_model(target_dir)
    loaded = sj.load_draft(workdir, target=target)
    assert loaded.config.method == "eagle3" and loaded.config.tap_layers == (0, 1, 1)
    saved = final_state(config, workdir, target)[0]
    got = nnx.to_pure_dict(nnx.state(loaded))
    for path, value in jax.tree_util.tree_leaves_with_path(saved):
        want = got
        for part in path:
            want = want[part.key]
        np.testing.assert_array_equal(np.asarray(want), np.asarray(value), err_msg=str(path))


CHILD = """
import os, signal, sys
from specjax.train import checkpoint, eagle
from tests.train.test_eagle_train import eagle_config
from pathlib import Path
corpus, target_dir, workdir, kill_at = sys.argv[1:5]
managers, real_save, real_steps = [], checkpoint.save, eagle.make_steps
def save(manager, *args):
    managers.append(manager)
    real_save(manager, *args)
def make_steps(*args):
    train_step, eval_step = real_steps(*args)
    calls = [0]
    def step(state, batch):
        calls[0] += 1
        if calls[0] == int(kill_at):  # mid-interval, the last save committed
            managers[-1].wait_until_finished()
            os.kill(os.getpid(), signal.SIGKILL)
        return train_step(state, batch)
    return step, eval_step
checkpoint.save, eagle.make_steps = save, make_steps
eagle.train_eagle(eagle_config(Path(corpus), Path(target_dir)), workdir)
"""


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_uninterrupted_parameters(
    reference, corpus, target_dir, tmp_path, compile_cache, child_env
):
    config, ref_dir, _ = reference
    workdir = tmp_path / "killed"
    env = {**child_env, "JAX_DEFAULT_MATMUL_PRECISION": "highest",
           "JAX_COMPILATION_CACHE_DIR": str(compile_cache),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}  # fmt: skip
    argv = [sys.executable, "-c", CHILD, str(corpus), str(target_dir), str(workdir), "26"]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert not (workdir / "heads").exists() and not (workdir / te.RESULTS).exists()
    summary = te.train_eagle(config, workdir)
    assert summary["resumed_from"] == 20
    steps = [r["step"] for r in read_jsonl(workdir / "metrics.jsonl") if "train/loss" in r]
    assert steps == list(range(5, 45, 5))  # step 25's record of the killed run was dropped
    target = sj.load_model(target_dir)
    got, want = final_state(config, workdir, target), final_state(config, ref_dir, target)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want),
                            strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=str(path))


@pytest.mark.parametrize(
    "change,match",
    [
        ({"method": "medusa"}, r"config.method='medusa' is not one of"),
        ({"ttt_steps": 0}, r"config.ttt_steps=0 must be an int >= 1"),
        ({"head.fc_bias": True}, r"config.head.fc_bias=True: EAGLE-3's fc has no bias"),
        ({"method": "eagle", "head.draft_vocab_size": 8}, r"EAGLE-3 options"),
        ({"head.draft_vocab_size": 10_000}, r"draft_vocab_size=10000 exceeds"),
        ({"head.intermediate_size": -4}, r"config.head.intermediate_size=-4 must be an int >= 0"),
        ({"loss.noise": -0.5}, r"config.loss.noise=-0.5 must be >= 0"),
        ({"loss.kind": "mse"}, r"config.loss.kind='mse' is not one of"),
        ({"loss.temperature": -1.0}, r"config.loss.temperature=-1.0 must be a number > 0"),
    ],
)
def test_bad_configs_are_refused_by_name(corpus, target_dir, tmp_path, change, match):
    config = eagle_config(corpus, target_dir)
    for key, value in change.items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    with pytest.raises(ValueError, match=match):
        te.train_eagle(config, tmp_path)
    assert not (tmp_path / te.CHECKPOINTS).exists()


@pytest.mark.slow
def test_stored_features_and_taps_train_the_same_drafter(corpus, target_dir, tmp_path):
    """Live features against stored ones, over a reduced draft vocabulary: the stored run
    reads the target's greedy tokens from `best.npy` and its law at the draft ids alone."""
    config = eagle_config(corpus, target_dir, num_steps=20, eval_every=20, checkpoint_every=20)
    config.head.draft_vocab_size = 24
    live = te.train_eagle(config, tmp_path / "live")
    config.features.precompute = True
    stored = te.train_eagle(config, tmp_path / "stored")
    store = tmp_path / "stored" / te.FEATURES / "train"
    taps = np.load(store / "taps.npy", mmap_mode="r")
    assert taps.shape[2:] == (3, 32)  # [N, T, taps, D]
    best, hidden = np.load(store / "best.npy"), np.load(store / "hidden.npy")
    assert best.dtype == np.int32
    target = sj.load_model(target_dir)
    np.testing.assert_array_equal(best, np.asarray(target.module.unembed(hidden)).argmax(-1))
    np.testing.assert_allclose(stored["top1"], live["top1"], rtol=1e-4)
    got = final_state(config, tmp_path / "stored", target)
    want = final_state(config, tmp_path / "live", target)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_eagle1_learns_the_targets_features_and_tokens(corpus, target_dir, tmp_path):
    config = eagle_config(corpus, target_dir, eval_every=40, checkpoint_every=40)
    config.method = "eagle"
    summary = te.train_eagle(config, tmp_path)
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "train/loss" in r]
    assert records[-1]["train/feature_loss"] < 0.5 * records[0]["train/feature_loss"]
    assert records[-1]["train/step_0/top1"] > records[0]["train/step_0/top1"] + 0.3
    assert summary["top1"][0] > 0.5 and len(summary["top1"]) == config.ttt_steps, summary
