"""Decoding with the CPU kernel on (the default here) against the kernel off: same tokens.

Every method and tree kind runs greedy with packed weights and must equal autoregressive
decoding, itself run with packed weights; the same calls with `SPECJAX_CPU_KERNEL=0` (XLA's
dot on the standard layout) give the same tokens. The layout is made once per module and
the module itself never leaves the standard layout.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from specjax import kernels
from specjax.decoding import engine
from specjax.kernels import layout

VOCAB = 32
MAX_NEW = 20
DYNAMIC = {"dynamic": {"top_k": 3, "total_tokens": 8}}


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(11)
    return [rng.integers(0, VOCAB, n).tolist() for n in (6, 13, 3)]


@pytest.fixture(scope="module")
def tied(tiny_config):
    """A tied-embedding target (its table packed once for lookups and the LM head)."""
    return sj.Decoder(tiny_config.replace(tie_word_embeddings=True), seed=5)


@pytest.fixture(scope="module")
def configs(target, unrelated_draft):
    # One shared LM head (packed unbatched; tests/decoding's Medusa runs pack per-head ones).
    medusa = sj.MedusaHeads.for_target(target, num_heads=3, shared_lm_head=True)
    # Non-zero blocks, so the packed blocks' product is exercised, not only the identity.
    medusa.w[...] = 0.3 * jax.random.normal(jax.random.key(2), medusa.w[...].shape)
    eagle3 = sj.EagleHead.for_target(target, method="eagle3", seed=1)
    eagle1 = sj.EagleHead.for_target(target, method="eagle", seed=2)
    return {
        "draft_chain": {"method": "draft_model", "model": unrelated_draft, "num_speculative_tokens": 3},
        "draft_tree": {"method": "draft_model", "model": target, "num_speculative_tokens": 3,
                       "draft_tree": {"depth": 3, "width": 2}},
        "ngram": {"method": "ngram", "num_speculative_tokens": 3},
        "medusa_tree": {"method": "medusa", "model": medusa, "num_speculative_tokens": 3,
                        "draft_tree": "topk_3x2"},
        "eagle3_dynamic": {"method": "eagle3", "model": eagle3, "num_speculative_tokens": 4,
                           "draft_tree": DYNAMIC},
        "eagle_chain": {"method": "eagle", "model": eagle1, "num_speculative_tokens": 3},
        "lookahead": {"method": "lookahead", "lookahead_window": 3, "ngram_size": 3,
                      "max_candidates": 2},
    }  # fmt: skip


def _run(model, prompts, cfg=None):
    return sj.generate(model, prompts, MAX_NEW, stop_token_ids=[], speculative_config=cfg)


@pytest.mark.parametrize(
    "name",
    ["draft_chain", "draft_tree", "ngram", "medusa_tree", "eagle3_dynamic", "eagle_chain",
     "lookahead"],
)  # fmt: skip
def test_every_method_with_the_kernel_equals_autoregressive_and_the_fallback(
    target, prompts, configs, name, monkeypatch
):
    assert kernels.available()
    reference = _run(target, prompts)
    out = _run(target, prompts, configs[name])
    assert out.tokens == reference.tokens
    assert out.stats["accepted_tokens"] > 0 or name == "draft_chain"
    monkeypatch.setenv(kernels.ENV, "0")
    off = _run(target, prompts, configs[name])
    assert off.tokens == out.tokens
    assert off.stats["accepted_tokens"] == out.stats["accepted_tokens"]


def test_tied_target_logits_with_and_without_packing(tied, prompts, monkeypatch):
    graphdef, packed = kernels.split_for_decode(tied)
    _, plain = kernels.split_for_decode(tied, pack=False)
    table = packed["embed_tokens"]["embedding"][...]
    assert isinstance(table, kernels.PackedWeight) and table.table
    tokens = jnp.asarray([prompts[1]])
    positions = jnp.arange(len(prompts[1]))[None]

    def logits(state):
        model = nnx.merge(graphdef, state)
        c = tied.config
        cache = sj.KVCache.init(c.num_layers, 1, 32, c.num_kv_heads, c.head_dim)
        return model(tokens, positions, cache).logits

    np.testing.assert_allclose(
        jax.jit(logits)(packed), jax.jit(logits)(plain), rtol=1e-5, atol=1e-5
    )
    rows = tied.embed_tokens.embedding[...][tokens]
    np.testing.assert_array_equal(kernels.embed_lookup(table, tokens), rows)
    with_kernel = _run(tied, prompts).tokens
    monkeypatch.setenv(kernels.ENV, "0")
    assert _run(tied, prompts).tokens == with_kernel


def test_layout_made_once_and_remade_after_an_update(target):
    layout.clear_cache()
    g1, s1 = kernels.split_for_decode(target)
    g2, s2 = kernels.split_for_decode(target)
    assert s2 is s1
    kernel = s1["layers"][0]["mlp"]["up_proj"]["kernel"][...]
    assert isinstance(kernel, kernels.PackedWeight)
    # The module keeps the standard layout (what save_hf, checkpoints and training read).
    assert isinstance(target.layers[0].mlp.up_proj.kernel[...], jax.Array)
    copy = nnx.clone(target)
    _, s3 = kernels.split_for_decode(copy)
    assert s3 is not s1
    copy.layers[0].mlp.up_proj.kernel[...] = 2 * copy.layers[0].mlp.up_proj.kernel[...]
    _, s4 = kernels.split_for_decode(copy)
    np.testing.assert_array_equal(
        kernels.unpack(s4["layers"][0]["mlp"]["up_proj"]["kernel"][...]),
        copy.layers[0].mlp.up_proj.kernel[...],
    )
    back = kernels.standard_layout(s1)
    _, plain = nnx.split(target)
    for (pa, a), (pb, b) in zip(nnx.to_flat_state(back), nnx.to_flat_state(plain), strict=True):
        assert pa == pb
        np.testing.assert_array_equal(a[...], b[...])


def test_compiled_once_with_the_kernel(target, prompts, configs):
    cfg = configs["eagle3_dynamic"]
    _run(target, prompts, cfg)
    before = engine.trace_count()
    _run(target, prompts, cfg)
    _run(target, [p[::-1] for p in prompts], cfg)
    assert engine.trace_count() == before
