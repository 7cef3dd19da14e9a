"""Draft heads: small modules that read the target's own features (Medusa; EAGLE next).

Every head set carries a config with a `method` (the speculative_config method it serves);
`specjax.io.drafts` reads and writes them in specjax's, FasterDecoding's and vLLM's layouts.
"""

from specjax.heads.medusa import MedusaConfig, MedusaHeads
from specjax.models import as_model

HEAD_TYPES = {"medusa": MedusaHeads}


def check_heads_fit(heads, target) -> None:
    """Refuse heads whose hidden size or vocabulary differs from `target`'s, naming both."""
    tc, hc = as_model(target).config, heads.config
    if hc.hidden_size != tc.hidden_size:
        raise ValueError(
            f"draft heads have hidden_size={hc.hidden_size}, the target's is {tc.hidden_size}"
        )
    if hc.vocab_size != tc.vocab_size:
        raise ValueError(
            f"draft heads have vocab_size={hc.vocab_size}, the target's is {tc.vocab_size}"
        )


__all__ = ["HEAD_TYPES", "MedusaConfig", "MedusaHeads", "check_heads_fit"]
