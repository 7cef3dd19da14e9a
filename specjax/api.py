"""The public entry points: paths are resolved here, once, and nowhere below.

`specjax.generate` / `specjax.generate_stream` take a model or a checkpoint directory, and a
`speculative_config` whose `model` may be a checkpoint directory too (a draft LM for
`draft_model`, draft heads for `medusa`, `eagle` and `eagle3`). They validate the config, load what is named by
path, and hand loaded objects to the engine (`specjax.decoding.engine`), which never reads a
file.
"""

from __future__ import annotations

import os

from specjax import parallel
from specjax.decoding import engine, spec_config
from specjax.io.drafts import load_draft
from specjax.io.hf import load_model
from specjax.models import as_model

# Methods whose `model` is a draft LM, and those whose `model` is a set of draft heads.
_DRAFT_LM_METHODS = ("draft_model",)


def _is_path(x) -> bool:
    return isinstance(x, (str, os.PathLike))


def _resolve(model, speculative_config, sampling, mesh=None):
    """(target Model, speculative_config with its `model` loaded)."""
    parallel.layout_of(mesh)  # a bad mesh is refused before anything is read
    target = load_model(model, mesh=mesh) if _is_path(model) else as_model(model)
    if not isinstance(speculative_config, dict) or not _is_path(speculative_config.get("model")):
        return target, speculative_config
    # Validate every key before anything is read from disk.
    temperature = 0.0 if sampling is None else getattr(sampling, "temperature", 0.0)
    cfg = spec_config.parse(speculative_config, temperature=temperature)
    path = speculative_config["model"]
    if cfg.method in _DRAFT_LM_METHODS:
        loaded = load_model(path, mesh=mesh)
    else:
        loaded = load_draft(path, target=target)
    return target, {**speculative_config, "model": loaded}


def generate(
    model,
    prompts,
    max_new_tokens: int,
    sampling=None,
    stop_token_ids=None,
    speculative_config=None,
    *,
    seeds=None,
    mesh=None,
) -> engine.GenerateOutput:
    """`specjax.decoding.engine.generate`, also taking checkpoint paths for the target and for
    `speculative_config["model"]` (loaded straight onto `mesh`'s shardings when one is given).
    See that function for every argument and the stats."""
    target, speculative_config = _resolve(model, speculative_config, sampling, mesh)
    return engine.generate(
        target,
        prompts,
        max_new_tokens,
        sampling,
        stop_token_ids,
        speculative_config,
        seeds=seeds,
        mesh=mesh,
    )


def generate_stream(
    model,
    prompts,
    max_new_tokens: int,
    sampling=None,
    stop_token_ids=None,
    speculative_config=None,
    *,
    seeds=None,
    mesh=None,
):
    """`specjax.decoding.engine.generate_stream`, also taking checkpoint paths."""
    target, speculative_config = _resolve(model, speculative_config, sampling, mesh)
    return engine.generate_stream(
        target,
        prompts,
        max_new_tokens,
        sampling,
        stop_token_ids,
        speculative_config,
        seeds=seeds,
        mesh=mesh,
    )


generate.__doc__ = (generate.__doc__ or "") + "\n\n" + (engine.generate.__doc__ or "")
