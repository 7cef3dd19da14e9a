"""Draft heads: small modules that read the target's own features (Medusa, EAGLE-1/3).

Every head set carries a config with a `method` (the speculative_config method it serves);
`specjax.io.drafts` reads and writes them in specjax's, FasterDecoding's and vLLM's layouts;
`check_heads_fit` is the one check that a set fits its target.
"""

import numpy as np

from specjax.heads.eagle import EagleConfig, EagleHead
from specjax.heads.medusa import MedusaConfig, MedusaHeads
from specjax.models import as_model

HEAD_TYPES = {"medusa": MedusaHeads, "eagle": EagleHead, "eagle3": EagleHead}


def check_heads_fit(heads, target, where=None, embedding: np.ndarray | None = None) -> None:
    """Refuse draft heads that do not fit `target`, naming the field, both values and the
    target's field. The one fit check: `load_draft` (naming the file), the proposers and the
    bench call it.

    Args:
      heads: MedusaHeads or an EagleHead, or their config (a loader checks before it builds).
      target: the Model/Decoder they draft for, or None (then only `embedding` is checked).
      where: the file or directory to name first, if any.
      embedding: the head's own `embed_tokens.weight` [V, D], if its checkpoint carries one:
        it loads only when equal to the target's table (vLLM then shares the target's, as
        specjax's drafter always does), so it needs `target`.
    Raises:
      ValueError for a hidden size (an EAGLE-3 head's target_hidden_size too), vocabulary,
      EAGLE-3 tap layer or own embedding that differs from or lies outside the target's.
    """
    config = heads if isinstance(heads, MedusaConfig | EagleConfig) else heads.config
    at = "" if where is None else f"{where}: "
    if embedding is not None:
        _check_embedding(embedding, target, at)
    if target is None:
        return
    tc = as_model(target).config
    eagle = isinstance(config, EagleConfig)
    draft = "the EAGLE head has" if eagle else "draft heads have"
    # Heads read the target's hidden states and (EAGLE) embed with its shared table, so both
    # widths must be the target's.
    rows = [("hidden_size", config.hidden_size, "hidden_size")]
    if eagle and config.method == "eagle3":
        rows.append(("target_hidden_size", config.target_hidden_size, "hidden_size"))
    rows.append(("vocab_size", config.vocab_size, "vocab_size"))
    for field, ours, theirs_field in rows:
        theirs = getattr(tc, theirs_field)
        if ours != theirs:
            raise ValueError(f"{at}{draft} {field}={ours}, the target's {theirs_field} is {theirs}")
    taps = config.tap_layers if eagle else ()
    bad = [i for i in taps if not 0 <= i < tc.num_layers]
    if bad:
        raise ValueError(
            f"{at}the EAGLE-3 head's tap_layers={list(taps)} include {bad}, outside the "
            f"target's num_layers={tc.num_layers} (layer ids 0..{tc.num_layers - 1})"
        )


def _check_embedding(table: np.ndarray, target, at: str) -> None:
    if target is None:
        raise ValueError(
            f"{at}holds its own embedding 'embed_tokens.weight' {list(table.shape)}; "
            "specjax's drafter shares the target's (as vLLM does when they are equal): pass "
            "target= to load_draft so the two can be compared"
        )
    ours = np.asarray(as_model(target).module.embedder.embedding[...], np.float32)
    if ours.shape != table.shape or not np.array_equal(ours, table):
        diff = (
            "shape" if ours.shape != table.shape else f"max |diff| {np.abs(ours - table).max():.3g}"
        )
        raise ValueError(
            f"{at}tensor 'embed_tokens.weight' {list(table.shape)} differs from the "
            f"target's embedding {list(ours.shape)} ({diff}): vLLM would draft with its own "
            "table, specjax's drafter shares the target's"
        )


__all__ = [
    "HEAD_TYPES",
    "EagleConfig",
    "EagleHead",
    "MedusaConfig",
    "MedusaHeads",
    "check_heads_fit",
]
