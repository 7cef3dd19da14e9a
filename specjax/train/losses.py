"""Training losses of the draft heads (Medusa now; EAGLE's next), as pure functions.

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


def topk_hit(logits, labels, k: int):
    """[...] float32: 1 where the label is among the k largest logits (ties: lower id first)."""
    _, top = jax.lax.top_k(logits, k)  # [..., k]
    return jnp.any(top == labels[..., None], axis=-1).astype(jnp.float32)


def medusa_loss(head_logits, tokens, mask, decay: float = 0.8, ranks: int = 0):
    """Medusa-1's loss: sum_k decay^k CE(head_k at t, token at t + k + 2).

    Args:
      head_logits: [B, T, K, V] the heads' logits at every position.
      tokens, mask: [B, T].
      decay: lambda_k = decay^k (Medusa: 0.8).
      ranks: R > 0 adds "head_<k>/rank_<r>" for r < R: how often exactly the rank-r token is
        right (what `trees.sparse_tree` builds a tree from).
    Returns:
      (loss [], metrics {"head_<k>/ce", "head_<k>/top1", "head_<k>/top5", ...} of [] each).
    """
    K = head_logits.shape[2]
    loss, metrics = jnp.zeros((), jnp.float32), {}
    for k in range(K):
        lg, labels, w = _shifted(head_logits[:, :, k], tokens, mask, k + 2)  # [B, T-k-2, V]
        ce = masked_mean(optax.softmax_cross_entropy_with_integer_labels(lg, labels), w)
        loss = loss + decay**k * ce
        metrics[f"head_{k}/ce"] = ce
        metrics[f"head_{k}/top1"] = masked_mean(topk_hit(lg, labels, 1), w)
        metrics[f"head_{k}/top5"] = masked_mean(topk_hit(lg, labels, min(5, lg.shape[-1])), w)
        if ranks:
            _, top = jax.lax.top_k(lg, min(ranks, lg.shape[-1]))  # [B, T', R]
            hits = (top == labels[..., None]).astype(jnp.float32)  # [B, T', R]
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
