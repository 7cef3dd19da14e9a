"""Training losses of the draft heads (Medusa, EAGLE-1/3), as pure functions.

Conventions: `tokens [B, T]` is one row of text; `mask [B, T]` marks the positions whose
token is a training label (1: a response token; 0: prompt or padding). A loss at position t
that predicts the token at t + s reads its label at tokens[:, t + s] and counts iff
mask[:, t + s]; positions whose label lies past the row are dropped. All reductions in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def _shifted(logits, tokens, mask, shift: int):
    """(logits at t, label at t + shift, weight) for t = 0 .. T - shift - 1."""
    T = tokens.shape[1]
    return logits[:, : T - shift], tokens[:, shift:], mask[:, shift:].astype(jnp.float32)


def masked_mean(values, weights):
    """sum(values * weights) / max(sum(weights), 1): a mean over the counted positions."""
    return jnp.sum(values * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def next_token_ce(logits, tokens, mask):
    """Masked mean cross entropy of next-token prediction. logits [B, T, V] -> []."""
    lg, labels, w = _shifted(logits, tokens, mask, 1)
    return masked_mean(optax.softmax_cross_entropy_with_integer_labels(lg, labels), w)


# The token losses both head trainers take (`config.loss.kind`):
#   "ce": hard labels (Medusa: the row's token; EAGLE: its reference loss, the soft CE to the
#         target's law at temperature 1, which equals "kl" at 1 up to the target's entropy);
#   "kl": forward KL(p || q) of the target's law p to the drafter's q, both at the training
#         temperature (soft labels: Medusa-2's self-distillation, HASS);
#   "tv": the acceptance-rate loss 1 - sum_v min(p_v, q_v) (total variation; "LK losses"),
#         which is exactly the chance that a probabilistic verifier rejects the draft.
LOSS_KINDS = ("ce", "kl", "tv")


def check_loss_config(loss) -> None:
    """Refuse a bad `config.loss.kind` / `temperature`, naming the key and what is allowed."""
    if loss.kind not in LOSS_KINDS:
        raise ValueError(f"config.loss.kind={loss.kind!r} is not one of {LOSS_KINDS}")
    t = loss.temperature
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
        raise ValueError(f"config.loss.temperature={t!r} must be a number > 0")


def law_loss(logits, target_logits, kind: str, temperature: float = 1.0):
    """Per-entry distance of the drafter's law to the target's. [..., V] x [..., V] -> [...].

    kind "kl": sum p (log p - log q); "tv": 1 - sum min(p, q); "ce": -sum p log q (soft CE).
    Both laws are softmax(logits / temperature) in float32; the target side is a constant.
    """
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss kind={kind!r} is not one of {LOSS_KINDS}")
    t = jnp.float32(temperature)
    logq = jax.nn.log_softmax(logits.astype(jnp.float32) / t, -1)
    logp = jax.nn.log_softmax(jax.lax.stop_gradient(target_logits).astype(jnp.float32) / t, -1)
    p = jnp.exp(logp)
    if kind == "tv":
        return 1.0 - jnp.sum(jnp.minimum(p, jnp.exp(logq)), -1)
    if kind == "kl":
        return jnp.sum(p * (logp - logq), -1)
    return -jnp.sum(p * logq, -1)


def topk_hit(logits, labels, k: int):
    """[...] float32: 1 where the label is among the k largest logits (ties: lower id first)."""
    _, top = jax.lax.top_k(logits, k)  # [..., k]
    return jnp.any(top == labels[..., None], axis=-1).astype(jnp.float32)


def medusa_loss(
    head_logits,
    tokens,
    mask,
    decay: float = 0.8,
    ranks: int = 0,
    *,
    target_logits=None,
    kind: str = "ce",
    temperature: float = 1.0,
    draft_ids=None,
):
    """Medusa's loss: sum_k decay^k loss(head_k at t, token at t + k + 2).

    With a draft vocabulary (`draft_ids`), the heads' logits are over the Vd draft ids, the
    target's law is restricted to them and renormalised, and entries whose label lies outside
    it are dropped from the loss (no head can draft that token); they stay in the accuracies,
    as misses: what the verifier would see. "head_<k>/coverage" is the share of counted labels
    inside it.

    Args:
      head_logits: [B, T, K, V] the heads' logits at every position ([B, T, K, Vd] over the
        draft ids with `draft_ids`).
      tokens, mask: [B, T].
      decay: lambda_k = decay^k (Medusa: 0.8).
      ranks: R > 0 adds "head_<k>/rank_<r>" for r < R: how often exactly the rank-r token is
        right (what `trees.sparse_tree` builds a tree from).
      target_logits: [B, T, V] the target's logits at every position (needed by "kl"/"tv":
        head k at t learns the target's law at t + k + 1, which predicts token t + k + 2);
        [B, T, Vd] at the draft ids with `draft_ids`.
      kind: "ce" (hard labels, Medusa-1), "kl" or "tv" (`law_loss`).
      temperature: the training temperature of "kl"/"tv".
      draft_ids: [Vd] int32 target id of each draft id, strictly increasing (None: Vd = V).
    Returns:
      (loss [], metrics {"head_<k>/ce", "head_<k>/top1", "head_<k>/top5", ...} of [] each;
      "head_<k>/law" too when kind is "kl" or "tv", "head_<k>/coverage" with `draft_ids`).
    """
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss kind={kind!r} is not one of {LOSS_KINDS}")
    if kind != "ce" and target_logits is None:
        raise ValueError(f"loss kind={kind!r} needs the target's logits")
    K = head_logits.shape[2]
    loss, metrics = jnp.zeros((), jnp.float32), {}
    for k in range(K):
        lg, labels, w = _shifted(head_logits[:, :, k], tokens, mask, k + 2)  # [B, T-k-2, V]
        keep, draft_labels = w, labels
        if draft_ids is not None:  # labels as draft ids; those outside the vocabulary dropped
            slot = jnp.minimum(jnp.searchsorted(draft_ids, labels), draft_ids.shape[0] - 1)
            inside = (draft_ids[slot] == labels).astype(jnp.float32)
            keep, draft_labels = w * inside, slot.astype(jnp.int32)
            metrics[f"head_{k}/coverage"] = masked_mean(inside, w)
        ce = masked_mean(optax.softmax_cross_entropy_with_integer_labels(lg, draft_labels), keep)
        if kind == "ce":
            loss = loss + decay**k * ce
        else:
            tl = target_logits[:, k + 1 : k + 1 + lg.shape[1]]  # [B, T-k-2, V]
            law = masked_mean(law_loss(lg, tl, kind, temperature), keep)
            loss = loss + decay**k * law
            metrics[f"head_{k}/law"] = law
        metrics[f"head_{k}/ce"] = ce
        # accuracies over every counted label, in draft ids (a label outside never hits)
        hit_labels = draft_labels if draft_ids is None else jnp.where(keep > 0, draft_labels, -1)
        metrics[f"head_{k}/top1"] = masked_mean(topk_hit(lg, hit_labels, 1), w)
        metrics[f"head_{k}/top5"] = masked_mean(topk_hit(lg, hit_labels, min(5, lg.shape[-1])), w)
        if ranks:
            _, top = jax.lax.top_k(lg, min(ranks, lg.shape[-1]))  # [B, T', R]
            hits = (top == hit_labels[..., None]).astype(jnp.float32)  # [B, T', R]
            for r in range(top.shape[-1]):
                metrics[f"head_{k}/rank_{r}"] = masked_mean(hits[..., r], w)
    return loss, metrics


def kl_to_reference(logits, ref_logits, tokens, mask):
    """Masked mean KL(softmax(ref) || softmax(logits)) over next-token positions: Medusa-2's
    self-distillation term, keeping the fine-tuned backbone close to the original."""
    lg, _, w = _shifted(logits, tokens, mask, 1)
    ref = jax.lax.stop_gradient(ref_logits[:, : lg.shape[1]])
    ref_logp = jax.nn.log_softmax(ref.astype(jnp.float32), -1)
    logp = jax.nn.log_softmax(lg.astype(jnp.float32), -1)
    kl = jnp.sum(jnp.exp(ref_logp) * (ref_logp - logp), axis=-1)  # [B, T-1]
    return masked_mean(kl, w)


# ------------------------------------------------------------------------------ EAGLE


def soft_cross_entropy(logits, target_logits):
    """-sum_v softmax(target)_v * log_softmax(logits)_v in float32. [..., V] x [..., V] -> [...].

    The target side is a constant (stop_gradient): the drafter learns the target's
    distribution, never the reverse.
    """
    p = jax.nn.softmax(jax.lax.stop_gradient(target_logits).astype(jnp.float32), -1)
    return -jnp.sum(p * jax.nn.log_softmax(logits.astype(jnp.float32), -1), -1)


def eagle_targets(target_logits, draft_ids=None):
    """What every drafting step's loss reads of the target, computed once for all of them.

    Args:
      target_logits: [B, T, V] the target's logits at every position.
      draft_ids: [Vd] int32 target id of each draft id (None: Vd = V).
    Returns:
      (law [B, T, Vd] float32: the logits restricted to the draft ids, best [B, T] int32: the
      target's argmax over its whole vocabulary, lowest id on ties). `eagle_step_loss` reads
      them with `target_best=best`; per step they would be an argmax over V and a gather of
      Vd columns each time (on a 49,152-word target, a quarter of a training step's time).
    """
    target_logits = target_logits.astype(jnp.float32)
    best = jnp.argmax(target_logits, -1).astype(jnp.int32)
    law = target_logits if draft_ids is None else jnp.take(target_logits, draft_ids, axis=-1)
    return law, best


def eagle_step_loss(
    draft_logits,
    target_logits,
    mask,
    step: int,
    draft_ids=None,
    in_draft=None,
    kind: str = "ce",
    temperature: float = 1.0,
    target_best=None,
):
    """The token loss of drafting step k (EAGLE-3's training-time test; EAGLE-1 at k = 0).

    Entry t of step k drafts token t + k + 2: its label is the target's distribution at
    position t + k + 1 (whose logits predict that token), and it counts iff t + k + 2 < T
    and mask[:, t + k + 2] (the `_shifted` convention). With a reduced draft vocabulary the
    target's logits are restricted to the draft ids and renormalised, and entries whose
    target argmax lies outside the draft vocabulary are dropped from the loss (the drafter
    cannot propose that token; the reference drops them too). They stay in the accuracy,
    as misses: what the verifier would see.

    Args:
      draft_logits: [B, T, Vd] the drafter's logits of step k at every entry.
      target_logits: [B, T, V] the target's logits at every position; with `target_best`,
        the law of `eagle_targets` ([B, T, Vd], already restricted to the draft ids).
      mask: [B, T] loss mask.
      step: k >= 0.
      draft_ids: [Vd] int32 target id of each draft id (None: Vd = V, the identity).
      in_draft: [V] bool, the target ids in the draft vocabulary (t2d; None: all).
      kind: "ce" (soft CE at temperature 1: the reference's loss), "kl" or "tv"
        (`law_loss` at `temperature`, over the draft vocabulary's renormalised law).
      target_best: [B, T] the target's argmax at every position (`eagle_targets`), or None.
    Returns:
      (loss [] masked mean of that loss, metrics {"ce", "top1", "coverage"} of [] each;
      coverage: the share of counted entries whose target argmax is draftable).
    """
    s = step + 2
    T = mask.shape[1]
    lg = draft_logits[:, : max(T - s, 0)]  # [B, T-s, Vd]
    window = slice(step + 1, step + 1 + lg.shape[1])  # the positions whose logits label them
    if target_best is None:
        law, best = eagle_targets(target_logits[:, window], draft_ids)
    else:
        law, best = target_logits, target_best
        law, best = law[:, window].astype(jnp.float32), best[:, window]
    w = mask[:, s:].astype(jnp.float32)  # [B, T-s]
    return eagle_label_loss(lg, law, best, w, draft_ids, in_draft, kind, temperature)


def eagle_label_loss(
    draft_logits, law, best, weights, draft_ids=None, in_draft=None, kind="ce", temperature=1.0
):
    """`eagle_step_loss` on entries already paired with their labels (any layout [B, M]).

    Args:
      draft_logits: [B, M, Vd] the drafter's logits at each entry.
      law: [B, M, Vd] the target's logits that label it, restricted to the draft ids.
      best: [B, M] the target's argmax there (over its whole vocabulary).
      weights: [B, M] 1 where the entry counts, else 0.
      draft_ids, in_draft, kind, temperature: as `eagle_step_loss`.
    Returns:
      As `eagle_step_loss`.
    """
    lg, tl, w = draft_logits, law.astype(jnp.float32), weights.astype(jnp.float32)
    keep = jnp.ones_like(w) if in_draft is None else in_draft[best].astype(jnp.float32)
    ce = masked_mean(soft_cross_entropy(lg, tl), w * keep)
    loss = ce if kind == "ce" else masked_mean(law_loss(lg, tl, kind, temperature), w * keep)
    drafted = jnp.argmax(lg, -1)  # [B, M] draft ids
    if draft_ids is not None:
        drafted = draft_ids[drafted]  # target ids
    top1 = masked_mean((drafted == best).astype(jnp.float32), w)
    return loss, {"ce": ce, "top1": top1, "coverage": masked_mean(keep, w)}


def eagle_feature_loss(pred_hidden, hidden, mask):
    """EAGLE-1's regression term: SmoothL1(f_hat_{t+1}, f_{t+1}) (beta = 1, mean over D).

    Entry t (token x_{t+1}, feature f_t) predicts f_{t+1}, the target's post-norm feature at
    t + 1; it counts under the same mask as its token loss (mask[:, t + 2], t + 2 < T).

    Args:
      pred_hidden: [B, T, D] the drafter's output f_hat at every entry.
      hidden: [B, T, D] the target's post-norm last hidden state.
      mask: [B, T].
    Returns:
      [] the masked mean over entries.
    """
    T = mask.shape[1]
    f_hat = pred_hidden[:, : max(T - 2, 0)].astype(jnp.float32)  # [B, T-2, D]
    f = jax.lax.stop_gradient(hidden[:, 1 : 1 + f_hat.shape[1]]).astype(jnp.float32)
    per_entry = jnp.mean(optax.huber_loss(f_hat, f, delta=1.0), -1)  # [B, T-2]
    return masked_mean(per_entry, mask[:, 2:].astype(jnp.float32))
