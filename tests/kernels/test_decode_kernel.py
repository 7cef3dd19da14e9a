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
from specjax.decoding import engine, state
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


def test_layout_made_once_and_remade_after_an_update(target, monkeypatch):
    layout.clear_cache()
    g1, s1 = kernels.split_for_decode(target)
    walks = []
    split = nnx.split
    monkeypatch.setattr(layout.nnx, "split", lambda m: walks.append(m) or split(m))
    g2, s2 = kernels.split_for_decode(target)
    assert s2 is s1 and g2 is g1
    assert walks == []  # a hit does not walk the graph
    _, u1 = kernels.split_for_decode(target, pack=False)
    _, u2 = kernels.split_for_decode(target, pack=False)
    assert u2 is u1 and len(walks) == 1  # the standard layout is cached too
    assert isinstance(u1["layers"][0]["mlp"]["up_proj"]["kernel"][...], jax.Array)
    monkeypatch.setattr(layout.nnx, "split", split)
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
    copy.note_for_the_test = "a static attribute"  # same arrays, another structure
    g5, s5 = kernels.split_for_decode(copy)
    assert g5 == nnx.split(copy)[0] and g5 != nnx.split(target)[0] and s5 is not s4
    back = kernels.standard_layout(s1)
    _, plain = nnx.split(target)
    for (pa, a), (pb, b) in zip(nnx.to_flat_state(back), nnx.to_flat_state(plain), strict=True):
        assert pa == pb
        np.testing.assert_array_equal(a[...], b[...])


def test_static_hash_remembers_the_graphdef_hash_and_equals_a_fresh_one(target):
    g1, _ = nnx.split(target)
    g2, _ = nnx.split(target)  # an equal graphdef, another object
    assert g1 is not g2 and g1 == g2
    assert state.graphdef_hash(g1) == hash(g1) == state.graphdef_hash(g2)
    a = state.Static(g1, sj.SamplingParams(), 32, 16, 64)
    b = state.Static(g2, sj.SamplingParams(), 32, 16, 64)
    assert a == b and hash(a) == hash(b)
    c = state.Static(g1, sj.SamplingParams(), 48, 16, 64)
    assert c != a and hash(c) != hash(a)
    target.note_for_the_test = "a static attribute"
    try:
        g3, _ = nnx.split(target)
        assert state.graphdef_hash(g3) == hash(g3) != hash(g1)
    finally:
        del target.note_for_the_test


def test_compiled_once_with_the_kernel(target, prompts, configs):
    cfg = configs["eagle3_dynamic"]
    _run(target, prompts, cfg)
    before = engine.trace_count()
    _run(target, prompts, cfg)
    _run(target, [p[::-1] for p in prompts], cfg)
    assert engine.trace_count() == before


def _logits(graphdef, state, config, prompt):
    tokens = jnp.asarray([prompt])
    positions = jnp.arange(len(prompt))[None]

    def forward(state):
        cache = sj.KVCache.init(config.num_layers, 1, 32, config.num_kv_heads, config.head_dim)
        return nnx.merge(graphdef, state)(tokens, positions, cache).logits

    return np.asarray(jax.jit(forward)(state))


def _rounded(module):
    """A copy of `module` whose declared matmul weights are rounded to bfloat16 (float32)."""
    copy = nnx.clone(module)
    for path in layout.packed_paths(copy):
        node = copy
        for name in path[:-1]:
            node = node[name] if isinstance(name, int) else getattr(node, name)
        var = getattr(node, path[-1])
        var[...] = var[...].astype(jnp.bfloat16).astype(jnp.float32)
    return copy


def test_bfloat16_weights_decode_as_the_rounded_model_on_both_paths(target, prompts, monkeypatch):
    """weight_dtype="bfloat16": the kernel reads bfloat16 panels (half the bytes), and the
    tokens are those of the same model with its weights rounded to bfloat16, on XLA's path too;
    the module keeps its float32 weights and the float32 layout stays cached beside it."""
    _, f32 = kernels.split_for_decode(target)
    _, bf16 = kernels.split_for_decode(target, weight_dtype="bfloat16")
    assert kernels.split_for_decode(target, weight_dtype="bfloat16")[1] is bf16
    assert kernels.split_for_decode(target)[1] is f32
    up = bf16["layers"][0]["mlp"]["up_proj"]["kernel"][...]
    assert isinstance(up, kernels.PackedWeight) and up.dtype == jnp.bfloat16
    assert f32["layers"][0]["mlp"]["up_proj"]["kernel"][...].dtype == jnp.float32
    assert bf16["norm"]["weight"][...].dtype == jnp.float32  # norms are not matmul weights
    assert target.layers[0].mlp.up_proj.kernel[...].dtype == jnp.float32
    rounded = _rounded(target)
    graphdef, _ = nnx.split(target)
    _, exact = kernels.split_for_decode(rounded)
    got, want, unrounded = (
        _logits(graphdef, s, target.config, prompts[1]) for s in (bf16, exact, f32)
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(got - unrounded).max() > 1e-4  # the rounding shows in the logits
    expected = _run(rounded, prompts).tokens
    out = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[], weight_dtype="bfloat16")
    assert out.tokens == expected
    monkeypatch.setenv(kernels.ENV, "0")
    _, plain = kernels.split_for_decode(target, weight_dtype="bfloat16")
    np.testing.assert_array_equal(
        plain["layers"][0]["mlp"]["up_proj"]["kernel"][...],
        rounded.layers[0].mlp.up_proj.kernel[...],
    )
    off = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[], weight_dtype="bfloat16")
    assert off.tokens == expected


def test_tied_table_in_bfloat16_panels_serves_lookups_and_the_lm_head(tied, prompts):
    _, bf16 = kernels.split_for_decode(tied, weight_dtype="bfloat16")
    table = bf16["embed_tokens"]["embedding"][...]
    assert table.table and table.dtype == jnp.bfloat16
    expected = _run(_rounded(tied), prompts).tokens
    out = sj.generate(tied, prompts, MAX_NEW, stop_token_ids=[], weight_dtype="bfloat16")
    assert out.tokens == expected


@pytest.mark.parametrize("name", ["draft_chain", "medusa_tree", "eagle3_dynamic"])
def test_drafts_read_in_bfloat16_stay_lossless(target, prompts, configs, name):
    """draft_weight_dtype="bfloat16": the draft's panels in bfloat16, the target's untouched,
    and greedy decoding still equals the float32 target's autoregressive tokens."""
    cfg = {**configs[name], "draft_weight_dtype": "bfloat16"}
    out = _run(target, prompts, cfg)
    assert out.tokens == _run(target, prompts).tokens
    assert out.stats["accepted_tokens"] > 0 or name == "draft_chain"
    draft = cfg["model"]
    _, state = kernels.split_for_decode(getattr(draft, "module", draft), weight_dtype="bfloat16")
    packed = [x for x in jax.tree.leaves(state, is_leaf=_is_packed) if _is_packed(x)]
    assert packed and all(_dtypes(x) == {jnp.dtype(jnp.bfloat16)} for x in packed)


def _is_packed(x):
    return isinstance(x, kernels.PackedWeight | kernels.PackedLayers)


def _dtypes(x):
    if isinstance(x, kernels.PackedLayers):
        return {w.dtype for w in x.layers}
    return {x.dtype}


@pytest.mark.parametrize("shared_lm_head", [True, False])
def test_packed_medusa_heads_compute_only_the_heads_asked_for(target, shared_lm_head):
    # With packed weights the first n heads are computed alone (the kernel reads their
    # matrices in place); their logits equal those of all heads, sliced.
    heads = sj.MedusaHeads.for_target(target, num_heads=4, shared_lm_head=shared_lm_head)
    heads.w[...] = 0.3 * jax.random.normal(jax.random.key(4), heads.w[...].shape)
    graphdef, params = layout.split_for_decode(heads)
    packed = nnx.merge(graphdef, params)
    assert isinstance(packed.w[...], kernels.PackedLayers)
    h = jax.random.normal(jax.random.key(5), (3, target.config.hidden_size))
    every = np.asarray(jax.jit(lambda h: packed(h))(h))  # [3, 4, V]
    jaxpr = str(jax.make_jaxpr(lambda h: packed.draft_logits(h, 2))(h))
    assert "f32[2,3," in jaxpr and "f32[4,3," not in jaxpr  # two groups of rows, not four
    for n in (1, 2, 4):
        first = np.asarray(jax.jit(lambda h, n=n: packed(h, n))(h))
        np.testing.assert_allclose(first, every[:, :n], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(every, np.asarray(heads(h)), rtol=1e-4, atol=1e-4)
