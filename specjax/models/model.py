"""The runtime model type: a decoder with its tokenizer, what every public function takes.

`Model` lives with the models, not with checkpoint I/O, so decoding never imports a loader:
`specjax.io.hf.load_model` builds one from a directory, tests build one from a bare config.
"""

from __future__ import annotations

import dataclasses

from specjax.models.config import ModelConfig
from specjax.models.decoder import Decoder


@dataclasses.dataclass
class Model:
    """A decoder with its tokenizer (None for a model built from a bare config)."""

    module: Decoder
    tokenizer: object | None = None
    source: str = ""

    @property
    def config(self) -> ModelConfig:
        return self.module.config

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Model({c.model_type}, layers={c.num_layers}, D={c.hidden_size}, V={c.vocab_size}, "
            f"params={c.num_params() / 1e6:.1f}M, source={self.source!r})"
        )


def as_model(model) -> Model:
    """Accept a Model or a bare Decoder; TypeError naming the type otherwise."""
    if isinstance(model, Model):
        return model
    if isinstance(model, Decoder):
        return Model(model)
    raise TypeError(f"expected a specjax Model or Decoder, got {type(model).__name__}")


def check_same_vocabulary(target: Model, draft: Model) -> None:
    """Draft and target must share the vocabulary: same size, token strings and specials.

    Raises:
      ValueError naming the first id where they differ (or the differing specials).
    """
    tv, dv = target.config.vocab_size, draft.config.vocab_size
    if tv != dv:
        raise ValueError(f"draft vocab_size={dv} differs from the target's vocab_size={tv}")
    if target.tokenizer is None or draft.tokenizer is None:
        return
    t, d = target.tokenizer.vocab_strings(), draft.tokenizer.vocab_strings()
    for i in range(max(len(t.tokens), len(d.tokens))):
        a = t.tokens[i] if i < len(t.tokens) else None
        b = d.tokens[i] if i < len(d.tokens) else None
        if a != b:
            raise ValueError(
                f"draft and target vocabularies differ first at id {i}: target {a!r} vs draft {b!r}"
            )
    if t.special != d.special:
        diff = sorted(set(t.special) ^ set(d.special))
        raise ValueError(f"draft and target special tokens differ: {diff[:5]}")
