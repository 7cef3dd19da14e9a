"""Draft heads: small modules that read the target's own features (Medusa, EAGLE-1/3).

Every head set carries a config with a `method` (the speculative_config method it serves);
`specjax.io.drafts` reads and writes them in specjax's, FasterDecoding's and vLLM's layouts.
"""

from specjax.heads.eagle import EagleConfig, EagleHead
from specjax.heads.medusa import MedusaConfig, MedusaHeads
from specjax.models import as_model

HEAD_TYPES = {"medusa": MedusaHeads, "eagle": EagleHead, "eagle3": EagleHead}


def check_heads_fit(heads, target) -> None:
    """Refuse heads whose hidden size or vocabulary differs from `target`'s, naming both."""
    tc, hc = as_model(target).config, heads.config
    # Heads read the target's hidden states and (EAGLE) embed with its shared table, so both
    # widths must be the target's.
    for name in ("hidden_size", "target_hidden_size"):
        width = getattr(hc, name, None)
        if width is not None and width != tc.hidden_size:
            what = "is" if name == "hidden_size" else "hidden_size is"
            raise ValueError(
                f"draft heads have {name}={width}, the target's {what} {tc.hidden_size}"
            )
    if hc.vocab_size != tc.vocab_size:
        raise ValueError(
            f"draft heads have vocab_size={hc.vocab_size}, the target's is {tc.vocab_size}"
        )


__all__ = [
    "HEAD_TYPES",
    "EagleConfig",
    "EagleHead",
    "MedusaConfig",
    "MedusaHeads",
    "check_heads_fit",
]
