"""Host-side input checks for `generate`: prompts, budgets, positions and stop ids.

Everything here runs before anything is compiled, and every error names the argument,
the value and what is allowed.
"""

from __future__ import annotations

import numpy as np

from specjax.validate import check_int, is_int


def normalize_prompts(prompts, tokenizer, vocab_size: int) -> list[list[int]]:
    """A string, list of strings, list of ids or list of id lists -> list of id lists."""
    if isinstance(prompts, str):
        prompts = [prompts]
    elif isinstance(prompts, np.ndarray):
        prompts = prompts.tolist() if prompts.ndim == 2 else [prompts.tolist()]
    if not isinstance(prompts, (list, tuple)) or len(prompts) == 0:
        raise ValueError(f"prompts must be a non-empty string or list, got {prompts!r}")
    if all(is_int(t) for t in prompts):
        prompts = [list(prompts)]
    rows = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            if tokenizer is None:
                raise ValueError(
                    f"prompts[{i}] is a string but the model has no tokenizer; pass token ids"
                )
            ids = tokenizer.encode(p)
        elif isinstance(p, (list, tuple, np.ndarray)):
            ids = list(p.tolist() if isinstance(p, np.ndarray) else p)
            bad = [t for t in ids if not is_int(t) or not 0 <= int(t) < vocab_size]
            if bad:
                raise ValueError(
                    f"prompts[{i}] holds token id {bad[0]!r} outside [0, {vocab_size})"
                )
            ids = [int(t) for t in ids]
        else:
            raise ValueError(
                f"prompts[{i}] must be a string or a list of token ids, got {type(p).__name__}"
            )
        if not ids:
            raise ValueError(f"prompts[{i}] is empty: every prompt needs at least one token")
        rows.append(ids)
    return rows


def check_max_new_tokens(max_new_tokens) -> None:
    check_int("max_new_tokens", max_new_tokens, 1)


def check_positions(prompt_len: int, max_new_tokens: int, max_positions: int) -> None:
    if prompt_len > max_positions:
        raise ValueError(
            f"prompt length {prompt_len} exceeds the model's max_position_embeddings={max_positions}"
        )
    if prompt_len + max_new_tokens > max_positions:
        raise ValueError(
            f"prompt length {prompt_len} + max_new_tokens={max_new_tokens} = "
            f"{prompt_len + max_new_tokens} exceeds the model's max_position_embeddings={max_positions}"
        )


def resolve_stop_ids(stop_token_ids, model, capacity: int) -> np.ndarray:
    """None -> the model's EOS ids (config, then tokenizer); [] disables. Padded with -1."""
    config = model.config
    if stop_token_ids is None:
        ids = list(config.eos_token_ids)
        if not ids and model.tokenizer is not None:
            ids = list(model.tokenizer.eos_token_ids or [])
    elif is_int(stop_token_ids):
        ids = [int(stop_token_ids)]
    else:
        ids = list(stop_token_ids)
    for t in ids:
        if not is_int(t) or not 0 <= int(t) < config.vocab_size:
            raise ValueError(f"stop_token_ids holds {t!r}, outside [0, {config.vocab_size})")
    if len(ids) > capacity:
        raise ValueError(f"stop_token_ids has {len(ids)} ids; at most {capacity} are supported")
    out = np.full((capacity,), -1, np.int32)
    out[: len(ids)] = ids
    return out
