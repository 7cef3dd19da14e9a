"""Helpers shared by the speculative-decoding experiments: tiny model pairs, exact laws, logging.

Models here are random (no training), edited through NNX state: `scale_head` makes the
target's distributions peaked (a random init with std 0.02 gives near-uniform ones, where
every draft is accepted), `perturb_layer` makes a partly agreeing draft, `interpolate`
slides a draft's weights from the target to an unrelated model.

Results go to experiments/results/<name>.{json,png}; `log_entry` appends a dated entry to
experiments/LOG.md.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import platform
import shlex
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from scipy import stats

import specjax as sj
from specjax.cache import KVCache

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
LOG = HERE / "LOG.md"

# The distribution experiments' model: V=32 so exact laws over two tokens are 1,024 cells.
TINY = sj.ModelConfig(
    vocab_size=32,
    hidden_size=16,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    head_dim=8,
    intermediate_size=32,
    max_position_embeddings=64,
)


# ---------------------------------------------------------------------------- model edits


def edited(model: sj.Decoder, fn) -> sj.Decoder:
    """A copy of `model` changed in place by fn(copy)."""
    copy = nnx.clone(model)
    fn(copy)
    return copy


def scale_head(model: sj.Decoder, factor: float = 20.0) -> None:
    """Multiply the LM head: a random init's near-uniform laws become peaked ones."""
    model.lm_head.kernel[...] = model.lm_head.kernel[...] * factor


def perturb_layer(model: sj.Decoder, scale: float, layer: int = 1, seed: int = 1) -> None:
    """Add N(0, scale^2) noise to every kernel of one layer."""
    key = jax.random.key(seed)
    block = model.layers[layer]
    owners = [block.self_attn] * 4 + [block.mlp] * 3
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    for owner, name in zip(owners, names, strict=True):
        kernel = getattr(owner, name).kernel
        key, sub = jax.random.split(key)
        kernel[...] = kernel[...] + scale * jax.random.normal(sub, kernel[...].shape)


def interpolate(a: sj.Decoder, b: sj.Decoder, lam: float) -> sj.Decoder:
    """(1 - lam) * a + lam * b, parameter by parameter (same architecture)."""
    graphdef, sa = nnx.split(a)
    _, sb = nnx.split(b)
    return nnx.merge(graphdef, jax.tree.map(lambda x, y: (1 - lam) * x + lam * y, sa, sb))


def distribution_pair(head: float = 20.0, noise: float = 0.04):
    """(target, draft): the peaked tiny target and its layer-1-perturbed copy."""
    target = edited(sj.Decoder(TINY, seed=0), lambda m: scale_head(m, head))
    return target, edited(target, lambda m: perturb_layer(m, noise))


# ---------------------------------------------------------------------------- exact laws


@functools.partial(jax.jit, static_argnums=0)
def _all_logits(graphdef, state, contexts):
    model = nnx.merge(graphdef, state)
    c, t = contexts.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (c, t))  # [C, T]
    return model(contexts, positions, KVCache.for_model(model.config, c, t)).logits  # [C, T, V]


def all_logits(model: sj.Decoder, contexts) -> jax.Array:
    """Logits after every position of each context (one causal forward): [C, T] -> [C, T, V]."""
    graphdef, state = nnx.split(model)
    return _all_logits(graphdef, state, jnp.asarray(contexts, jnp.int32))


def last_logits(model: sj.Decoder, contexts) -> jax.Array:
    """[C, T] -> [C, V]: logits after each whole context."""
    return all_logits(model, contexts)[:, -1]


def chi2_pvalue(counts: np.ndarray, law: np.ndarray) -> float:
    """Goodness of fit to an exact law; cells expected below 5 pooled into one."""
    counts, law = counts.ravel().astype(np.float64), law.ravel() / law.sum()
    if np.any(counts[law == 0] > 0):
        return 0.0
    expected = law * counts.sum()
    big = expected >= 5
    obs, exp = list(counts[big]), list(expected[big])
    if expected[~big].sum() > 0:
        obs.append(counts[~big].sum())
        exp.append(expected[~big].sum())
    return float(stats.chisquare(obs, exp).pvalue)


def two_sample_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square test that two count vectors come from one law (cells < 5 total pooled)."""
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    big = (a + b) >= 10
    table = [list(a[big]) + [a[~big].sum()], list(b[big]) + [b[~big].sum()]]
    table = np.asarray(table)
    table = table[:, table.sum(0) > 0]
    return float(stats.chi2_contingency(table).pvalue)


# ------------------------------------------------------------------------------- records


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.machine()} {os.cpu_count()} CPU(s), load {load:.1f} at start, "
        f"jax {jax.__version__} ({jax.default_backend()})"
    )


def command() -> str:
    return "python " + " ".join(shlex.quote(a) for a in sys.argv)


def save_json(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    return path


def log_entry(title: str, body: str) -> None:
    """Append a dated entry (title, command, machine, body) to experiments/LOG.md."""
    if not LOG.exists():
        LOG.write_text(
            "# Experiment log\n\nDated entries, newest last. Each gives the command, the numbers "
            "and the conclusion; negative results stay.\n"
        )
    today = datetime.date.today().isoformat()
    entry = (
        f"\n## {today} — {title}\n\n"
        f"Command: `{command()}`  \nMachine: {machine()}\n\n{body.strip()}\n"
    )
    with LOG.open("a") as f:
        f.write(entry)
