"""Draft models made from the target itself, for benchmarks without a trained pair.

`truncated_draft(target, k)` keeps the target's embeddings, its first k layers, its final
norm and LM head: an early-exit self-draft (as in LayerSkip / draft-and-verify, without
their training). It shares the tokenizer, so it always passes the vocabulary check, and its
cost relative to the target is about k / L. With a *trained* target the first layers agree
with the full model often enough to accept drafts; with a random target the numbers only
exercise the machinery, and any report built on them must say so.
"""

from __future__ import annotations

import dataclasses

from flax import nnx

from specjax.io.hf import export_state, load_state
from specjax.models import Decoder, Model, as_model, hf_param_names
from specjax.validate import check_int


def truncated_draft(target, num_layers: int) -> Model:
    """A draft = the target's first `num_layers` layers with its embeddings, norm and head.

    Args:
      target: a specjax Model (or Decoder).
      num_layers: layers to keep, 1 <= num_layers <= the target's.
    Returns:
      A new Model (weights copied) with the target's tokenizer.
    """
    target = as_model(target)
    total = target.config.num_layers
    num_layers = check_int("num_layers", num_layers, 1, total)
    config = dataclasses.replace(target.config, num_layers=num_layers)
    module = nnx.eval_shape(lambda: Decoder(config, nnx.Rngs(0)))
    tensors = export_state(target.module)
    load_state(module, {name: tensors[name] for name in hf_param_names(config)})
    source = f"{target.source or 'target'}[:{num_layers} layers]"
    return Model(module, target.tokenizer, source)
