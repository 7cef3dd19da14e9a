"""The public entry points: paths are resolved here, once, and nowhere below.

`specjax.generate` / `specjax.generate_stream` take a model or a checkpoint directory, and a
`speculative_config` whose `model` may be a checkpoint directory too: a draft LM or draft
heads, as the method's declaration says (`Capabilities.model`). The config is parsed once,
into a `spec_config.Speculative`, before any file is read; what it names by path is loaded,
and the engine (`specjax.decoding.engine`), which never reads a file, takes it as is.
"""

from __future__ import annotations

import dataclasses
import os

from specjax import parallel
from specjax.decoding import engine, spec_config
from specjax.io.drafts import load_draft
from specjax.io.hf import load_model
from specjax.models import as_model

# How a draft named by path is read, by what the method's `model` holds.
_LOADERS = {
    "draft_lm": lambda path, target, mesh: load_model(path, mesh=mesh),
    "heads": lambda path, target, mesh: load_draft(path, target=target),
}


def _is_path(x) -> bool:
    return isinstance(x, (str, os.PathLike))


def _resolve(model, speculative_config, sampling, mesh=None):
    """(target Model, the parsed `spec_config.Speculative` with its draft loaded, or None)."""
    parallel.layout_of(mesh)  # a bad mesh is refused before anything is read
    spec = None
    if speculative_config is not None:
        # Every key is validated, once, before anything is read from disk.
        temperature = engine.sampling_params(sampling).temperature
        spec = spec_config.resolve(speculative_config, temperature=temperature)
    target = load_model(model, mesh=mesh) if _is_path(model) else as_model(model)
    if spec is not None and _is_path(spec.draft):
        kind = spec_config.capabilities(spec.config.method).model
        loaded = _LOADERS[kind](spec.draft, target, mesh)
        spec = dataclasses.replace(spec, draft=loaded)
    return target, spec


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
    weight_dtype=None,
) -> engine.GenerateOutput:
    """`specjax.decoding.engine.generate`, also taking checkpoint paths for the target and for
    `speculative_config["model"]` (loaded straight onto `mesh`'s shardings when one is given).
    See that function for every argument and the stats."""
    target, spec = _resolve(model, speculative_config, sampling, mesh)
    return engine.generate(
        target,
        prompts,
        max_new_tokens,
        sampling,
        stop_token_ids,
        spec,
        seeds=seeds,
        mesh=mesh,
        weight_dtype=weight_dtype,
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
    weight_dtype=None,
):
    """`specjax.decoding.engine.generate_stream`, also taking checkpoint paths."""
    target, spec = _resolve(model, speculative_config, sampling, mesh)
    return engine.generate_stream(
        target,
        prompts,
        max_new_tokens,
        sampling,
        stop_token_ids,
        spec,
        seeds=seeds,
        mesh=mesh,
        weight_dtype=weight_dtype,
    )


generate.__doc__ = (generate.__doc__ or "") + "\n\n" + (engine.generate.__doc__ or "")
