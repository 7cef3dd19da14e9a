"""The training losses against numpy: the distillation losses ("ce" | "kl" | "tv"), Medusa's
loss and EAGLE-3's training-time-test loss by loops over (b, t, k), and the configs that
name them."""

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


def _log_softmax(x, t=1.0):
    z = np.asarray(x, np.float64) / t
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _law(p_logits, q_logits, kind, t):
    """One entry of `law_loss`, in float64: kl, tv or the soft cross entropy."""
    logp, logq = _log_softmax(p_logits, t), _log_softmax(q_logits, t)
    p, q = np.exp(logp), np.exp(logq)
    return {"kl": np.sum(p * (logp - logq)), "tv": 1 - np.minimum(p, q).sum(),
            "ce": -np.sum(p * logq)}[kind]  # fmt: skip


def _mean(values):
    return float(np.sum(values)) / max(len(values), 1)  # masked_mean: 0 when nothing counts


def _medusa_oracle(
    heads, tokens, mask, decay, target, kind, temp, ranks, label=2, law=1, draft_ids=None
):
    """Medusa's loss by loops over (b, t, k): head k at t is scored against the token at
    t + k + `label` (counted iff it lies in the row and its mask is 1) and, for the soft
    kinds, against the target's law at t + k + `law`. With `draft_ids` the heads' logits are
    over those target ids: a label outside them is a miss in the accuracies and out of the
    losses, and the target's law is its restriction to them. Returns (loss, metrics)."""
    B, T, K, V = heads.shape
    ids = np.arange(V) if draft_ids is None else np.asarray(draft_ids)
    loss, metrics = 0.0, {}
    for k in range(K):
        names = ["ce", "top1", "top5", "law"] + [f"rank_{r}" for r in range(ranks)]
        per = {n: [] for n in names + ["coverage"]}
        for b in range(B):
            for t in range(T):
                j = t + k + label
                if j >= T or not mask[b, j]:
                    continue
                logq = _log_softmax(heads[b, t, k])
                order = ids[np.argsort(-logq, kind="stable")]  # ranks, lower id first on ties
                y = tokens[b, j]
                per["top1"].append(float(order[0] == y))
                per["top5"].append(float(y in order[:5]))
                for r in range(ranks):
                    per[f"rank_{r}"].append(float(order[r] == y))
                per["coverage"].append(float(y in ids))
                if y not in ids:
                    continue
                per["ce"].append(-logq[list(ids).index(y)])
                if kind != "ce":
                    p_logits = target[b, t + k + law][ids]
                    per["law"].append(_law(p_logits, heads[b, t, k], kind, temp))
        skip = {"law"} if kind == "ce" else set()
        if draft_ids is None:
            skip.add("coverage")
        means = {n: _mean(v) for n, v in per.items() if n not in skip}
        loss += decay**k * (means["ce"] if kind == "ce" else means["law"])
        metrics.update({f"head_{k}/{n}": v for n, v in means.items()})
    return loss, metrics


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kind", losses.LOSS_KINDS)
def test_medusa_loss_against_a_numpy_loop(kind, seed):
    """Head k at t learns token t + k + 2 (soft kinds: the target's law at t + k + 1, whose
    argmax predicts that token), weighted decay^k; each head's term is a mean over its
    counted labels. Random shapes, masks with holes (a masked prompt, gaps, one row that
    counts nothing at all when B > 1); the oracle with either offset moved by one gives
    another number, so the comparison would catch it."""
    rng = np.random.default_rng(seed)
    B, K = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    T, V = int(rng.integers(K + 4, 16)), int(rng.integers(6, 14))
    decay, temp, ranks = float(rng.uniform(0.3, 1.0)), float(rng.uniform(0.5, 2.0)), 3
    heads = rng.normal(size=(B, T, K, V)) * 2
    target = rng.normal(size=(B, T, V)) * 2
    tokens = rng.integers(0, V, (B, T))
    mask = (rng.random((B, T)) > 0.3).astype(np.int8)  # holes
    mask[0, : T // 3] = 0  # a prompt
    if B > 1:
        mask[-1] = 0  # a row that teaches nothing
    medusa_loss = jax.jit(losses.medusa_loss, static_argnames=("ranks", "kind", "temperature"))
    loss, metrics = medusa_loss(  # one program: cheaper than op by op for each new shape
        jnp.asarray(heads, jnp.float32), jnp.asarray(tokens), jnp.asarray(mask), decay, ranks,
        target_logits=jnp.asarray(target, jnp.float32), kind=kind, temperature=temp,
    )  # fmt: skip
    args = (heads, tokens, mask, decay, target, kind, temp, ranks)
    want, want_metrics = _medusa_oracle(*args)
    assert sorted(metrics) == sorted(want_metrics)
    for name, value in want_metrics.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(loss, want, rtol=1e-4, atol=1e-6)
    # One too early (head k on token t + k + 1, the law at t + k): another number.
    assert abs(_medusa_oracle(*args, label=1, law=0)[0] - float(loss)) > 1e-3
    if kind != "ce":  # the law at the label's own position: another number too
        assert abs(_medusa_oracle(*args, law=2)[0] - float(loss)) > 1e-3


@pytest.mark.parametrize("kind", losses.LOSS_KINDS)
def test_medusa_loss_over_a_draft_vocabulary_against_a_numpy_loop(kind):
    """Heads over a draft vocabulary (vLLM's token_map): logits over Vd target ids, labels
    outside them out of the losses but misses in the accuracies, the target's law restricted
    to the ids and renormalised. Against the oracle; and without the map (the same logits read
    as ids 0..Vd-1) the numbers differ."""
    rng = np.random.default_rng(5)
    B, T, K, V, Vd, decay, temp, ranks = 2, 12, 3, 12, 5, 0.8, 0.7, 3
    draft_ids = np.array([0, 2, 3, 7, 9])
    heads = rng.normal(size=(B, T, K, Vd)) * 2
    target = rng.normal(size=(B, T, V)) * 2
    tokens = rng.choice([0, 2, 3, 7, 9, 1, 4], size=(B, T))  # some labels outside the map
    mask = (rng.random((B, T)) > 0.2).astype(np.int8)
    loss, metrics = losses.medusa_loss(
        jnp.asarray(heads, jnp.float32), jnp.asarray(tokens), jnp.asarray(mask), decay, ranks,
        target_logits=jnp.asarray(target[..., draft_ids], jnp.float32), kind=kind,
        temperature=temp, draft_ids=jnp.asarray(draft_ids, jnp.int32),
    )  # fmt: skip
    want, want_metrics = _medusa_oracle(
        heads, tokens, mask, decay, target, kind, temp, ranks, draft_ids=draft_ids
    )
    assert sorted(metrics) == sorted(want_metrics)
    for name, value in want_metrics.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(loss, want, rtol=1e-4, atol=1e-6)
    assert 0.3 < float(metrics["head_0/coverage"]) < 0.95  # labels inside and outside
    plain, _ = _medusa_oracle(heads, np.minimum(tokens, Vd - 1), mask, decay,
                              target[..., :Vd], kind, temp, ranks)  # fmt: skip
    assert abs(plain - float(loss)) > 1e-3


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
    # The same loss and metrics from the targets computed once for every step (the trainer's
    # path): the law restricted to the draft ids and the argmax over the whole vocabulary.
    law, best = losses.eagle_targets(jnp.asarray(target), jnp.asarray(draft_ids))
    once, m_once = losses.eagle_step_loss(
        jnp.asarray(draft), law, jnp.asarray(mask), step,
        jnp.asarray(draft_ids), jnp.asarray(in_draft), "tv", temp, target_best=best,
    )  # fmt: skip
    _, m_direct = losses.eagle_step_loss(
        jnp.asarray(draft), jnp.asarray(target), jnp.asarray(mask), step,
        jnp.asarray(draft_ids), jnp.asarray(in_draft), "tv", temp,
    )  # fmt: skip
    np.testing.assert_allclose(once, loss, rtol=1e-6)
    for name in ("ce", "top1", "coverage"):
        np.testing.assert_allclose(m_once[name], m_direct[name], rtol=1e-6)
    assert 0 < float(m_once["coverage"]) < 1  # some greedy tokens are undraftable


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


# ------------------------------------------------------------ EAGLE-3's training-time test


@pytest.fixture(scope="module")
def peaked_target(tiny_config):
    """A tiny random Llama (V = 32) whose LM head is scaled x20: its laws are peaked, as a
    trained model's, so a label read one position off changes the loss visibly."""
    import specjax as sj

    module = sj.Decoder(tiny_config, seed=0)
    module.lm_head.kernel.set_value(module.lm_head.kernel[...] * 20.0)
    return module


def _ttt_draft_logits(head, target, tokens, feature, steps, feed_back=True):
    """Each TTT step's draft logits [B, T, Vd] from the drafter's own cached forward, one call
    per step over all T entries, with the recurrence written out here: step k reads token
    x_{t+1+k} (0 past the row) at position t + k and, as its hidden input, its own step
    k - 1 output at the same entry (feed_back=False: the target's feature at every step, the
    bug to catch); its query at t sees step 0's slots 0..t and step j's slot j * T + t,
    j = 1..k, of one cache that holds step j's T keys at slots j * T .. (j + 1) * T - 1."""
    B, T = tokens.shape
    tokens = np.asarray(tokens)
    inputs = []
    for k in range(steps):
        shifted = np.zeros_like(tokens)
        shifted[:, : T - 1 - k] = tokens[:, 1 + k :]  # [B, T]
        see = np.zeros((T, (k + 1) * T), bool)
        for t in range(T):
            see[t, : t + 1] = True
            for j in range(1, k + 1):
                see[t, j * T + t] = True
        positions = np.broadcast_to(np.arange(T) + k, (B, T)).astype(np.int32)
        inputs.append((shifted.astype(np.int32), positions, np.broadcast_to(see, (B, *see.shape))))

    @jax.jit
    def run(feature0):
        cache, feature, out = head.init_cache(B, steps * T), feature0, []
        for k, (tok, pos, see) in enumerate(inputs):
            offset = jnp.full((B,), k * T, jnp.int32)
            h, _, cache = head(target, tok, feature, pos, cache, see, offset)  # h [B, T, H]
            out.append(head.draft_logits(target, h))  # [B, T, Vd]
            feature = h if feed_back else feature0
        return out

    return [np.asarray(x, np.float64) for x in run(feature)]


def _ttt_oracle(draft, full, mask, ids, decay, kind, temp, step_offset=1):
    """EAGLE-3's loss by loops: step k's entry t drafts token t + k + 2, counted iff it lies
    in the row and mask[b, t + k + 2]; its label is the target's law at t + k + 1 restricted
    to the draft ids and renormalised, dropped when the target's argmax there is not
    draftable (kept in top-1 as a miss). Total: sum_k decay^k mean_k. step_offset=0: every
    step scored as step 0 (labels not shifted with the step; the bug to catch)."""
    B, T, V = full.shape
    in_draft = np.zeros(V, bool)
    in_draft[ids] = True
    loss, metrics = 0.0, {}
    for k, logits in enumerate(draft):
        s = k * step_offset
        vals, ces, hits, kept = [], [], [], []
        for b in range(B):
            for t in range(T - s - 2):
                if not mask[b, t + s + 2]:
                    continue
                law = full[b, t + s + 1]
                best = int(np.argmax(law))
                hits.append(float(ids[np.argmax(logits[b, t])] == best))
                kept.append(float(in_draft[best]))
                if not in_draft[best]:
                    continue
                ces.append(_law(law[ids], logits[b, t], "ce", 1.0))
                vals.append(ces[-1] if kind == "ce" else _law(law[ids], logits[b, t], kind, temp))
        loss += decay**k * _mean(vals)
        metrics.update({f"step_{k}/ce": _mean(ces), f"step_{k}/top1": _mean(hits)})
        if k == 0:
            metrics["step_0/coverage"] = _mean(kept)
    return loss, metrics


@pytest.fixture(scope="module")
def ttt_case(peaked_target):
    """A tiny random EAGLE-3 drafter (16 of the 32 ids) on the peaked target, one batch with
    masked prompts and holes, the target's features and logits, and the recurrence's draft
    logits: right, and with the target's feature fed at every step."""
    from specjax.train import eagle as te

    target, steps = peaked_target, 3
    config = te.default_config()
    config.head.draft_vocab_size = 16
    counts = np.random.default_rng(3).integers(0, 100, target.config.vocab_size)
    head = te.make_head(config, target, counts)
    rng = np.random.default_rng(5)
    B, T = 2, 12
    tokens = jnp.asarray(rng.integers(0, target.config.vocab_size, (B, T)), jnp.int32)
    mask = (np.arange(T)[None, :] >= np.array([[3], [5]])) & (rng.random((B, T)) > 0.2)

    @jax.jit
    def features():
        hidden, taps = te._forward(target, tokens, head.config.tap_layers)
        return hidden, taps, head.target_feature(hidden, taps), target.unembed(hidden)

    hidden, taps, feature, full = features()
    return {
        "config": config, "head": head, "steps": steps, "mask": mask, "hidden": hidden,
        "taps": taps, "batch": {"tokens": tokens, "mask": jnp.asarray(mask, jnp.int8)},
        "full": np.asarray(full, np.float64), "ids": np.asarray(head.draft_to_target_ids()),
        "draft": _ttt_draft_logits(head, target, tokens, feature, steps),
        "stale": _ttt_draft_logits(head, target, tokens, feature, steps, feed_back=False),
    }  # fmt: skip


@pytest.mark.parametrize("kind,temp", [("ce", 1.0), ("kl", 0.7)])
def test_eagle3_ttt_loss_against_a_numpy_recurrence(peaked_target, ttt_case, kind, temp):
    """`eagle.compute_losses` over 3 TTT steps with decay 0.7 (steps 1 and 2 weigh in):
    each step's labels (the law one further per step), masks (a prompt, holes, the row's
    end moving in by one per step), the draft-vocabulary drops, decay^k, and that each step
    reads its own previous hidden state, against the recurrence written out here on a tiny
    random drafter (its cached forward per step). Feeding the target's feature at every step,
    or labels that do not move with the step, gives another number."""
    from specjax.train import eagle as te

    c, decay = ttt_case, 0.7
    config = c["config"].copy_and_resolve_references()
    config.loss.update(decay=decay, kind=kind, temperature=temp)

    @jax.jit
    def code():
        return te.compute_losses(
            config, c["head"], peaked_target, c["batch"], c["hidden"], c["taps"], c["steps"]
        )

    loss, metrics = jax.device_get(code())
    oracle = lambda draft, **kw: _ttt_oracle(  # noqa: E731
        draft, c["full"], c["mask"], c["ids"], decay, kind, temp, **kw
    )
    want, want_metrics = oracle(c["draft"])
    assert 0 < want_metrics["step_0/coverage"] < 1  # the case exercises the dropping
    assert sorted(metrics) == sorted(want_metrics)
    for name, value in want_metrics.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(loss, want, rtol=1e-4)
    # The later steps weigh in, and the two bugs each give another number.
    assert abs(oracle(c["draft"][:1])[0] - want) > 1e-2
    assert abs(oracle(c["stale"])[0] - want) > 1e-3
    assert abs(oracle(c["draft"], step_offset=0)[0] - want) > 1e-3
