"""The distillation losses ("ce" | "kl" | "tv") against numpy, and the configs that name them."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from specjax.train import losses

RNG = np.random.default_rng(0)


def _softmax(x, t):
    z = np.asarray(x, np.float64) / t
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_law_losses_against_numpy(temperature):
    q_logits = RNG.normal(size=(3, 5, 11)) * 2
    p_logits = RNG.normal(size=(3, 5, 11)) * 2
    p, q = _softmax(p_logits, temperature), _softmax(q_logits, temperature)
    got = {
        k: np.asarray(losses.law_loss(jnp.asarray(q_logits), jnp.asarray(p_logits), k, temperature))
        for k in losses.LOSS_KINDS
    }
    np.testing.assert_allclose(got["kl"], np.sum(p * (np.log(p) - np.log(q)), -1), rtol=1e-4)
    np.testing.assert_allclose(got["tv"], 1 - np.minimum(p, q).sum(-1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["ce"], -np.sum(p * np.log(q), -1), rtol=1e-4)
    # tv is half the L1 distance, and the rejection chance of a draft sampled from q
    np.testing.assert_allclose(got["tv"], 0.5 * np.abs(p - q).sum(-1), rtol=1e-4, atol=1e-6)


def test_law_losses_vanish_at_the_target_and_push_toward_it():
    p_logits = jnp.asarray(RNG.normal(size=(4, 9)))
    for kind in ("kl", "tv"):
        np.testing.assert_allclose(losses.law_loss(p_logits, p_logits, kind), 0, atol=1e-6)
        q = jnp.zeros((4, 9))
        grad = jax.grad(lambda x, k=kind: losses.law_loss(x, p_logits, k).sum())(q)
        moved = losses.law_loss(q - 0.5 * grad, p_logits, kind)
        assert np.all(np.asarray(moved) < np.asarray(losses.law_loss(q, p_logits, kind)))
        # the target side is a constant: no gradient flows into it
        g_target = jax.grad(lambda t, k=kind, x=q: losses.law_loss(x, t, k).sum())(p_logits)
        np.testing.assert_array_equal(g_target, 0)


@pytest.mark.parametrize("kind", ["kl", "tv"])
def test_medusa_soft_loss_reads_the_target_law_one_before_the_label(kind):
    B, T, K, V, decay, temp = 2, 9, 3, 7, 0.8, 1.5
    heads = RNG.normal(size=(B, T, K, V))
    target = RNG.normal(size=(B, T, V))
    tokens = RNG.integers(0, V, (B, T))
    mask = (RNG.random((B, T)) > 0.2).astype(np.int8)
    loss, metrics = losses.medusa_loss(
        jnp.asarray(heads), jnp.asarray(tokens), jnp.asarray(mask), decay,
        target_logits=jnp.asarray(target), kind=kind, temperature=temp,
    )  # fmt: skip
    total = 0.0
    for k in range(K):
        vals = []
        for b in range(B):
            for t in range(T - k - 2):
                if mask[b, t + k + 2]:  # head k at t drafts token t+k+2: the target's law at t+k+1
                    p, q = _softmax(target[b, t + k + 1], temp), _softmax(heads[b, t, k], temp)
                    vals.append(
                        np.sum(p * np.log(p / q)) if kind == "kl" else 1 - np.minimum(p, q).sum()
                    )
        np.testing.assert_allclose(metrics[f"head_{k}/law"], np.mean(vals), rtol=1e-4)
        total += decay**k * np.mean(vals)
    np.testing.assert_allclose(loss, total, rtol=1e-4)
    # the wrong offset (the law at the label's own position) gives another number
    shifted = np.roll(target, -1, axis=1)
    wrong, _ = losses.medusa_loss(
        jnp.asarray(heads), jnp.asarray(tokens), jnp.asarray(mask), decay,
        target_logits=jnp.asarray(shifted), kind=kind, temperature=temp,
    )  # fmt: skip
    assert abs(float(wrong) - total) > 1e-3


def test_eagle_tv_step_loss_over_a_reduced_draft_vocabulary():
    B, T, V, Vd, step, temp = 2, 8, 12, 5, 1, 0.7
    draft_ids = np.array([0, 2, 3, 7, 9])
    in_draft = np.zeros(V, bool)
    in_draft[draft_ids] = True
    draft = RNG.normal(size=(B, T, Vd))
    target = RNG.normal(size=(B, T, V)) * 2
    mask = np.ones((B, T), np.int8)
    loss, _ = losses.eagle_step_loss(
        jnp.asarray(draft), jnp.asarray(target), jnp.asarray(mask), step,
        jnp.asarray(draft_ids), jnp.asarray(in_draft), "tv", temp,
    )  # fmt: skip
    vals = []
    for b in range(B):
        for t in range(T - step - 2):
            full = target[b, t + step + 1]
            if not in_draft[full.argmax()]:
                continue  # undraftable greedy token: dropped, as in the reference
            p, q = _softmax(full[draft_ids], temp), _softmax(draft[b, t], temp)
            vals.append(1 - np.minimum(p, q).sum())
    assert 0 < len(vals) < B * (T - step - 2)
    np.testing.assert_allclose(loss, np.mean(vals), rtol=1e-4)


@pytest.mark.parametrize(
    "kind,temperature,match",
    [("mse", 1.0, "config.loss.kind='mse'"), ("kl", 0.0, "temperature=0.0"),
     ("tv", "1", "temperature='1'")],
)  # fmt: skip
def test_bad_loss_configs_are_refused_by_name(kind, temperature, match):
    with pytest.raises(ValueError, match=match):
        losses.check_loss_config(
            ml_collections.ConfigDict(dict(kind=kind, temperature=temperature))
        )


def test_soft_medusa_loss_needs_the_target_logits():
    z = jnp.zeros((1, 5, 2, 4))
    with pytest.raises(ValueError, match="needs the target's logits"):
        losses.medusa_loss(z, jnp.zeros((1, 5), int), jnp.ones((1, 5)), kind="kl")
