"""generate under a device mesh gives the single-device tokens, for every method.

Every mesh of 8 emulated devices, (8, 1), (4, 2), (2, 4) and (1, 8), runs the same one-jit loop
with sharded parameters (tensor parallelism over `model`) and rows over `data`; at T=0 the
tokens and the acceptance counts must equal the single-device run's exactly, and one forward's
logits must agree within 1e-5 (float32, highest matmul precision: only the order of the
sharded reductions differs). A batch of 3 rows is padded to a multiple of the data axis.

At T>0 with fixed per-row seeds, a chain with sampled drafts (draft_model, probabilistic
verification) and a dynamic tree (EAGLE-3, one-hot verification) give the single-device tokens
and acceptance counts on every mesh too: a row's randomness is its own key's, wherever the row
and the vocabulary are placed.

The fast set (the README's command) covers autoregressive decoding and one speculative method
per family on every mesh shape that matters for it, and the T>0 dynamic tree on (2, 4); `-m slow`
covers every family on every mesh, every method on (2, 4) and both T>0 methods on every mesh.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

import specjax as sj
from specjax import parallel
from specjax.cache import KVCache
from specjax.decoding import engine

from .conftest import MESH_SHAPES, MESH_TINY

MAX_NEW = 20
# Ragged, 3 rows (not a multiple of 2, 4 or 8): the second repeats itself so that ngram and
# lookahead find matches, the others are random.
PROMPTS = [
    [5, 17, 3, 42, 9, 11, 60, 2],
    [7, 8, 9, 10, 7, 8, 9, 10, 7, 8, 9, 10, 7, 8],
    [33, 1, 58, 21, 40],
]


@pytest.fixture(scope="module")
def drafts(mesh_target):
    return {
        "medusa": sj.MedusaHeads.for_target(mesh_target, num_heads=3),
        "eagle": sj.EagleHead.for_target(mesh_target, method="eagle", seed=1),
        "eagle3": sj.EagleHead.for_target(mesh_target, method="eagle3", seed=2),
        # The target's own first layer plus its head: a draft that agrees often, not always.
        "draft": sj.Decoder(MESH_TINY.replace(num_layers=1), seed=0),
    }


def method_config(name: str, drafts) -> dict | None:
    dyn = {"dynamic": {"top_k": 2, "total_tokens": 6}}
    return {
        "autoregressive": None,
        "draft_model": {"method": "draft_model", "model": drafts["draft"],
                        "num_speculative_tokens": 3},
        "draft_model_tree": {"method": "draft_model", "model": drafts["draft"],
                             "num_speculative_tokens": 2, "draft_tree": "topk_2x2"},
        "ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3},
        "medusa": {"method": "medusa", "model": drafts["medusa"], "num_speculative_tokens": 3,
                   "draft_tree": "topk_3x2"},
        "eagle1": {"method": "eagle", "model": drafts["eagle"], "num_speculative_tokens": 3,
                   "draft_tree": "topk_3x2"},
        "eagle2": {"method": "eagle", "model": drafts["eagle"], "num_speculative_tokens": 3,
                   "draft_tree": dyn},
        "eagle3": {"method": "eagle3", "model": drafts["eagle3"], "num_speculative_tokens": 3,
                   "draft_tree": dyn},
        "lookahead": {"method": "lookahead", "lookahead_window": 3, "ngram_size": 3,
                      "max_candidates": 2},
    }[name]  # fmt: skip


METHODS = [
    "autoregressive",
    "draft_model",
    "draft_model_tree",
    "ngram",
    "medusa",
    "eagle1",
    "eagle2",
    "eagle3",
    "lookahead",
]
# The fast set: one method of each family on the (2, 4) mesh (both axes > 1, KV heads
# replicated), the autoregressive loop on all four; `-m slow` adds every family on every mesh
# and every method on (2, 4). (Every method on every mesh was measured token-identical once,
# BENCHMARKS "Scale-out"; the variants within a family share their sharded code.)
FAMILIES = ("draft_model", "ngram", "medusa", "eagle3", "lookahead")
FAST = {(m, (2, 4)) for m in FAMILIES} | {("autoregressive", s) for s in MESH_SHAPES}
RUN = FAST | {(m, s) for m in FAMILIES for s in MESH_SHAPES} | {(m, (2, 4)) for m in METHODS}
STAT_KEYS = ("generated_tokens", "row_steps", "row_draft_tokens", "row_accepted_tokens")

# T>0: top-p sorts the whole vocabulary, which the (x, 4) and (1, 8) meshes shard. (At T=1
# without top-k the random EAGLE-3 drafter has drafts accepted in every row; at T=0.8 with
# top-k 20 it had one accepted token in all.)
SAMPLED = sj.SamplingParams(temperature=1.0, top_p=0.9)
SEEDS = [11, 22, 33]
SAMPLED_METHODS = ("draft_model", "eagle3")  # a chain with sampled drafts, a dynamic tree
# One T>0 case in the fast set (each costs a single-device and a mesh compile): the dynamic tree,
# whose per-row topology, top-p over the sharded vocabulary and one-hot walk are the most
# mesh-specific.
SAMPLED_FAST = ("eagle3", (2, 4))

_single: dict = {}


def _reference(target, name, drafts, sampling=None):
    if (name, sampling) not in _single:
        cfg = method_config(name, drafts)
        _single[name, sampling] = sj.generate(
            target, PROMPTS, MAX_NEW, sampling, [], speculative_config=cfg,
            seeds=None if sampling is None else SEEDS,
        )  # fmt: skip
    return _single[name, sampling]


CASES = [
    pytest.param(m, s, id=f"{m}-{s[0]}x{s[1]}", marks=() if (m, s) in FAST else pytest.mark.slow)
    for m in METHODS
    for s in MESH_SHAPES
    if (m, s) in RUN
]


@pytest.mark.parametrize(("name", "shape"), CASES)
def test_tokens_equal_single_device(mesh_target, drafts, name, shape):
    ref = _reference(mesh_target, name, drafts)
    mesh = parallel.make_mesh(*shape)
    cfg = method_config(name, drafts)
    out = sj.generate(
        mesh_target, PROMPTS, MAX_NEW, stop_token_ids=[], speculative_config=cfg, mesh=mesh
    )
    assert out.tokens == ref.tokens
    for key in STAT_KEYS:
        assert out.stats[key] == ref.stats[key], key
    if name != "autoregressive":
        assert ref.stats["accepted_tokens"] > 0  # the comparison covers accepted paths


@pytest.mark.parametrize(
    ("name", "shape"),
    [pytest.param(m, s, id=f"{m}-{s[0]}x{s[1]}",
                  marks=() if (m, s) == SAMPLED_FAST else pytest.mark.slow)
     for m in SAMPLED_METHODS for s in MESH_SHAPES],
)  # fmt: skip
def test_sampled_tokens_equal_single_device(mesh_target, drafts, name, shape):
    ref = _reference(mesh_target, name, drafts, SAMPLED)
    out = sj.generate(mesh_target, PROMPTS, MAX_NEW, SAMPLED, [], seeds=SEEDS,
                      speculative_config=method_config(name, drafts),
                      mesh=parallel.make_mesh(*shape))  # fmt: skip
    assert out.tokens == ref.tokens
    for key in STAT_KEYS:
        assert out.stats[key] == ref.stats[key], key
    assert ref.stats["accepted_tokens"] > 0  # the comparison covers accepted paths


def test_forward_logits_within_tolerance(mesh_target, mesh):
    """One forward of a 3-row block on the mesh against one device: within 1e-5."""
    graphdef, state = nnx.split(mesh_target)
    layout = parallel.layout_of(mesh)
    tokens = jnp.asarray(np.arange(24).reshape(3, 8) % MESH_TINY.vocab_size, jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(8, dtype=jnp.int32), (3, 8))

    @jax.jit
    def forward(state, tokens, positions):
        model = nnx.merge(graphdef, state)
        cache = KVCache.for_model(MESH_TINY, tokens.shape[0], 16)
        return model(tokens, positions, cache).logits

    ref = np.asarray(forward(state, tokens, positions))
    # 3 rows do not divide over data: the rows stay replicated, the weights are sharded.
    got = forward(parallel.shard_params(state, layout, head_dim=8), tokens, positions)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=0, atol=1e-5)
    assert np.abs(ref).max() > 0.1  # real logits, not zeros


def test_parameters_and_cache_are_sharded():
    """The rules put q_proj's heads over `model`, replicate the 4 KV heads on a model axis of
    8 and shard them on 2, and the KV cache carries rows over `data`."""
    target = sj.Decoder(MESH_TINY, seed=0)
    _, state = nnx.split(target)
    layout = parallel.layout_of(parallel.make_mesh(1, 8))
    wide = parallel.shard_params(state, layout, head_dim=MESH_TINY.head_dim)
    attn = wide["layers"][0]["self_attn"]
    assert attn["q_proj"]["kernel"][...].sharding.spec == P(None, "model")
    assert attn["k_proj"]["kernel"][...].sharding.spec == P(None, None)  # 4 heads over 8
    assert wide["embed_tokens"]["embedding"][...].sharding.spec == P("model", None)
    assert wide["layers"][0]["mlp"]["down_proj"]["kernel"][...].sharding.spec == P("model", None)
    q = attn["q_proj"]["kernel"][...]
    assert q.addressable_shards[0].data.shape == (64, 8)  # 64 query columns over 8 devices

    mesh = parallel.make_mesh(4, 2)
    model, rows, static, params, args = engine._setup(
        target, PROMPTS, MAX_NEW, None, [], None, None, mesh
    )
    assert static.layout.data == 4 and args[0].shape[0] == 4  # 3 rows padded to 4
    assert params[0]["layers"][0]["self_attn"]["k_proj"]["kernel"][...].sharding.spec == P(
        None, "model"
    )
    state = engine._generate_jit(static, params, *args)
    spec = tuple(state.cache.k.sharding.spec)
    assert spec + (None,) * (5 - len(spec)) == (None, "data", "model", None, None)
    assert state.out.sharding.spec[0] == "data"


def test_bad_meshes_refused_by_name(mesh_target):
    before = engine.trace_count()
    devices = np.asarray(jax.devices()[:2]).reshape(2, 1)
    wrong = jax.sharding.Mesh(devices, ("batch", "tensor"))
    with pytest.raises(ValueError, match=r"mesh axes must be named \('data', 'model'\)"):
        sj.generate(mesh_target, PROMPTS, 4, mesh=wrong)
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        sj.generate(mesh_target, PROMPTS, 4, mesh="2x4")
    with pytest.raises(ValueError, match="needs 16 devices, 8 exist"):
        parallel.make_mesh(4, 4)
    with pytest.raises(ValueError, match="mesh axis 'model' must be a positive int"):
        parallel.make_mesh(2, 0)
    # An MLP of 100 cannot be split over a model axis of 8 (tensor parallelism would not split).
    odd = sj.Decoder(MESH_TINY.replace(intermediate_size=100), seed=0)
    with pytest.raises(ValueError, match=r"'mlp' axis \(size 100\) does not divide over the "):
        sj.generate(odd, PROMPTS, 4, mesh=parallel.make_mesh(1, 8))
    assert engine.trace_count() == before  # refused before anything compiled


def test_stream_under_mesh_matches_generate(mesh_target):
    mesh = parallel.make_mesh(2, 4)
    chunks = list(sj.generate_stream(mesh_target, PROMPTS, 8, stop_token_ids=[], mesh=mesh))
    joined = [sum((c[b] for c in chunks), []) for b in range(len(PROMPTS))]
    assert joined == sj.generate(mesh_target, PROMPTS, 8, stop_token_ids=[]).tokens


def test_load_model_onto_a_mesh(mesh_target, drafts, tmp_path):
    """sj.load_model(path, mesh=...) places each weight on its sharding as it loads; the
    path-taking sj.generate gives the single-device tokens."""
    path = sj.save_hf(mesh_target, tmp_path / "target")
    mesh = parallel.make_mesh(2, 4)
    model = sj.load_model(path, mesh=mesh, load_tokenizer=False)
    q = model.module.layers[1].self_attn.q_proj.kernel[...]
    assert q.sharding.spec == P(None, "model") and q.addressable_shards[0].data.shape == (64, 16)
    lm = model.module.lm_head.kernel[...]
    assert lm.sharding.spec == P(None, "model")  # vocabulary 64 over 4
    ref = _reference(mesh_target, "autoregressive", drafts)
    out = sj.generate(model, PROMPTS, MAX_NEW, stop_token_ids=[], mesh=mesh)
    assert out.tokens == ref.tokens
    with pytest.raises(ValueError, match="mesh axes must be named"):
        sj.load_model(path, mesh=jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("x",)))


@pytest.mark.parametrize("shape", [(8, 1), (2, 4)])
@pytest.mark.parametrize("name", FAMILIES)
def test_a_mesh_built_as_jax_documents_it_serves(mesh_target, drafts, name, shape):
    """`jax.make_mesh` gives `Explicit` axes by default (it failed inside the jitted loop with
    a ShardingTypeError for every method): generate takes it as its Auto twin, with the
    single-device tokens."""
    mesh = jax.make_mesh(shape, parallel.MESH_AXES)
    assert all(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types)
    ref = _reference(mesh_target, name, drafts)
    out = sj.generate(mesh_target, PROMPTS, MAX_NEW, stop_token_ids=[],
                      speculative_config=method_config(name, drafts), mesh=mesh)  # fmt: skip
    assert out.tokens == ref.tokens
