"""EAGLE drafters on disk: exact round trips in the specjax, vLLM and speculators layouts, the
exact names, shapes, dtypes and config fields vLLM reads, the reference's (SafeAILab/EAGLE)
layout on import, and a refusal naming field/tensor and both values for every bad input.

Layouts checked against vLLM 0.32's `model_executor/models/llama_eagle.py` (EAGLE-1: fc without
bias, `layers.0.*` without input_layernorm), `llama_eagle3.py` (`midlayer.` -> `layers.0.`,
d2t -> draft_id_to_target_id, t2d skipped), `transformers_utils/configs/speculators/algos.py`
(norm_before_residual defaults to true) and SafeAILab/EAGLE's `eagle/model/cnets{,1}.py`.
"""

import json

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

import specjax as sj
from specjax.heads.eagle import EagleHead, draft_vocabulary
from specjax.io import drafts
from specjax.io.drafts.eagle import checkpoint_names, variables_by_path
from specjax.models import config_to_hf

H, V, VD, L = 32, 48, 20, 6
TARGET = sj.ModelConfig(
    model_type="llama",
    vocab_size=V,
    hidden_size=H,
    num_layers=L,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_position_embeddings=128,
)
TAPS = (1, 3, 4)  # default_tap_layers(6): vLLM's (2, 3, 3) collides


def _randomised(head, seed=0):
    """Non-zero, distinct values everywhere and a scattered draft vocabulary, so a round trip
    that swaps, transposes or drops anything shows. `head` may be abstract (nnx.eval_shape)."""
    rng = np.random.default_rng(seed)
    c = head.config
    d2t, t2d = np.zeros(c.draft_vocab_size, np.int32), np.arange(c.vocab_size) < c.draft_vocab_size
    if c.method == "eagle3" and c.draft_vocab_size < c.vocab_size:
        d2t, t2d = draft_vocabulary(rng.integers(0, 1000, c.vocab_size), c.draft_vocab_size)
    for name, var in variables_by_path(head).items():
        value = var.get_value()
        if name in ("d2t", "t2d"):
            var.set_value(jnp.asarray(d2t if name == "d2t" else t2d, value.dtype))
        else:
            var.set_value(jnp.asarray(rng.normal(0, 0.3, value.shape), value.dtype))
    return head


def _abstract(config):
    """A target without initialising its weights (its config is all a head or a check reads)."""
    return nnx.eval_shape(lambda: sj.Decoder(config, seed=0))


@pytest.fixture(scope="module")
def target():
    return sj.Decoder(TARGET, seed=0)


def _head(target, method, seed=0, **options):
    if method == "eagle3":
        options = {"draft_vocab_size": VD, **options}
    options.setdefault("base_model", "org/tiny-target")
    return _randomised(
        nnx.eval_shape(lambda: EagleHead.for_target(target, method, **options)), seed
    )


@pytest.fixture(scope="module")
def eagle(target):
    return _head(target, "eagle")


@pytest.fixture(scope="module")
def eagle3(target):
    return _head(target, "eagle3", seed=1)


def _same(a, b):
    assert a.config == b.config
    x, y = drafts.eagle_arrays(a), drafts.eagle_arrays(b)
    assert x.keys() == y.keys()
    for name in x:
        assert x[name].dtype == y[name].dtype and x[name].shape == y[name].shape, name
        assert x[name].tobytes() == y[name].tobytes(), f"{name} differs"  # bitwise


def _edit_json(path, **changes):
    config = json.loads(path.read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del config[key]
    path.write_text(json.dumps(config))


def _rewrite(path, edit):
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize(
    "method, layout",
    [
        ("eagle", "specjax"),
        ("eagle", "vllm"),
        ("eagle3", "specjax"),
        ("eagle3", "vllm"),
        ("eagle3", "speculators"),
    ],
)
def test_round_trip_is_exact(tmp_path, target, eagle, eagle3, method, layout):
    head = eagle if method == "eagle" else eagle3
    out = sj.save_draft(head, tmp_path / layout, layout=layout)
    assert drafts.detect_layout(out) == layout
    back = sj.load_draft(out, target=target)
    assert isinstance(back, EagleHead) and back.config.method == method
    _same(head, back)
    _same(head, sj.load_draft(out))  # the taps are in the file: no target needed


def test_round_trips_of_other_options(tmp_path, target):
    # A biased fc and attention biases (specjax layout); a full draft vocabulary, bf16 and
    # llama3 RoPE scaling (vLLM layout: d2t/t2d omitted, as vLLM has no d2t parameter then).
    biased = _head(target, "eagle", fc_bias=True, layer={"attention_bias": True})
    _same(biased, sj.load_draft(sj.save_draft(biased, tmp_path / "b"), target=target))
    rope = (("factor", 8.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
            ("original_max_position_embeddings", 64), ("rope_type", "llama3"))  # fmt: skip
    full = _head(target, "eagle3", draft_vocab_size=V,
                 layer={"dtype": "bfloat16", "rope_scaling": rope, "eos_token_ids": (1, 2)})  # fmt: skip
    out = sj.save_draft(full, tmp_path / "full", layout="vllm")
    assert "d2t" not in load_file(str(out / "model.safetensors"))
    _same(full, sj.load_draft(out, target=target))
    _same(full, sj.load_draft(sj.save_draft(full, tmp_path / "s"), target=target))


def test_load_draft_finds_a_workdirs_heads(tmp_path, eagle3):
    sj.save_draft(eagle3, tmp_path / drafts.HEADS_DIR)
    _same(eagle3, sj.load_draft(tmp_path))


# --------------------------------------------------------------------------- vLLM's names


def _layer_fields(config, n_layers=1):
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == n_layers
    assert config["hidden_size"] == H and config["vocab_size"] == V
    assert config["num_attention_heads"] == 4 and config["num_key_value_heads"] == 2
    assert config["head_dim"] == 8 and config["intermediate_size"] == 64
    assert config["rms_norm_eps"] == TARGET.norm_eps and config["hidden_act"] == "silu"
    assert config["attention_bias"] is False


def test_vllm_eagle1_exact_names(tmp_path, eagle):
    out = sj.save_draft(eagle, tmp_path, layout="vllm")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["EagleLlamaForCausalLM"]
    _layer_fields(config)
    assert config["base_model_name_or_path"] == "org/tiny-target"
    for key in ("draft_vocab_size", "eagle_aux_hidden_state_layer_ids", "bias"):
        assert key not in config
    t = load_file(str(out / "model.safetensors"))
    p = "layers.0."
    want = {
        "fc.weight": (H, 2 * H),
        f"{p}self_attn.q_proj.weight": (32, H),
        f"{p}self_attn.k_proj.weight": (16, H),
        f"{p}self_attn.v_proj.weight": (16, H),
        f"{p}self_attn.o_proj.weight": (H, 32),
        f"{p}mlp.gate_proj.weight": (64, H),
        f"{p}mlp.up_proj.weight": (64, H),
        f"{p}mlp.down_proj.weight": (H, 64),
        f"{p}post_attention_layernorm.weight": (H,),
    }
    assert {k: v.shape for k, v in t.items()} == want  # no input_layernorm, embed, lm_head
    assert all(v.dtype == np.float32 for v in t.values())
    np.testing.assert_array_equal(t["fc.weight"], np.asarray(eagle.fc.kernel[...]).T)
    np.testing.assert_array_equal(
        t[f"{p}mlp.down_proj.weight"], np.asarray(eagle.mlp.down_proj.kernel[...]).T
    )


def test_vllm_eagle3_exact_names(tmp_path, eagle3):
    out = sj.save_draft(eagle3, tmp_path, layout="vllm")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    _layer_fields(config)
    assert config["draft_vocab_size"] == VD
    assert config["eagle_aux_hidden_state_layer_ids"] == list(TAPS)
    assert config["norm_before_residual"] is False
    assert "target_hidden_size" not in config  # equal to hidden_size
    t = load_file(str(out / "model.safetensors"))
    p = "midlayer."
    want = {
        "fc.weight": (H, 3 * H),
        f"{p}self_attn.q_proj.weight": (32, 2 * H),
        f"{p}self_attn.k_proj.weight": (16, 2 * H),
        f"{p}self_attn.v_proj.weight": (16, 2 * H),
        f"{p}self_attn.o_proj.weight": (H, 32),
        f"{p}mlp.gate_proj.weight": (64, H),
        f"{p}mlp.up_proj.weight": (64, H),
        f"{p}mlp.down_proj.weight": (H, 64),
        f"{p}input_layernorm.weight": (H,),
        f"{p}hidden_norm.weight": (H,),
        f"{p}post_attention_layernorm.weight": (H,),
        "norm.weight": (H,),
        "lm_head.weight": (VD, H),
        "d2t": (VD,),
        "t2d": (V,),
    }
    assert {k: v.shape for k, v in t.items()} == want
    assert t["d2t"].dtype == np.int64 and t["t2d"].dtype == np.bool_
    assert all(v.dtype == np.float32 for k, v in t.items() if k not in ("d2t", "t2d"))
    np.testing.assert_array_equal(t["lm_head.weight"], np.asarray(eagle3.lm_head.kernel[...]).T)
    ids = np.arange(VD) + t["d2t"]  # vLLM: draft id i is target id i + d2t[i]
    assert np.array_equal(np.flatnonzero(t["t2d"]), ids)
    np.testing.assert_array_equal(np.asarray(eagle3.draft_to_target_ids()), ids)


def test_speculators_config(tmp_path, target, eagle3):
    out = sj.save_draft(eagle3, tmp_path, layout="speculators", speculative_tokens=5)
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["architectures"] == ["Eagle3Speculator"]
    spec = config["speculators_config"]
    assert spec["algorithm"] == "eagle3"
    assert spec["proposal_methods"][0]["speculative_tokens"] == 5
    assert spec["verifier"]["name_or_path"] == "org/tiny-target"
    layer = config["transformer_layer_config"]
    _layer_fields(layer)
    assert "architectures" not in layer  # vLLM sets Eagle3LlamaForCausalLM from model_type
    assert config["draft_vocab_size"] == VD
    assert config["eagle_aux_hidden_state_layer_ids"] == list(TAPS)
    assert config["norm_before_residual"] is False  # vLLM's speculators default is true
    assert config["norm_before_fc"] is False and config["target_hidden_size"] is None
    t = load_file(str(out / "model.safetensors"))
    assert "layers.0.hidden_norm.weight" in t and not any(k.startswith("midlayer.") for k in t)
    # vLLM's reader: the verifier comes from the head's config alone
    sj.save_hf(target, tmp_path / "hf")
    head = _head(target, "eagle3", base_model=str(tmp_path / "hf"))
    out = sj.save_draft(head, tmp_path / "s2", layout="speculators")
    verifier = json.loads((out / "config.json").read_text())["speculators_config"]["verifier"]
    assert verifier == {"name_or_path": str(tmp_path / "hf"), "architectures": ["LlamaForCausalLM"]}
    assert (
        json.loads((out / "config.json").read_text())["speculators_config"]["proposal_methods"][0][
            "speculative_tokens"
        ]
        == drafts.SPECULATORS_TOKENS
    )


# ---------------------------------------------------------------------- reference layout


def test_reference_eagle1_with_bias_and_embedding(tmp_path, target):
    """SafeAILab/EAGLE's EAGLE-1: architectures LlamaForCausalLM, `bias` (the fc's), its own
    copy of the target's embedding; imported with target= (the copy must equal the target's)."""
    head = _head(target, "eagle", fc_bias=True)
    arrays = drafts.eagle_arrays(head)
    tensors = {name: np.ascontiguousarray(arrays[path].T if tr else arrays[path])
               for path, name, tr in checkpoint_names(head.config, "layers.0.")}  # fmt: skip
    tensors["embed_tokens.weight"] = np.asarray(target.embed_tokens.embedding[...])
    ref = tmp_path / "eagle1"
    ref.mkdir()
    save_file(tensors, str(ref / "model.safetensors"))
    config = config_to_hf(head.config.layer)
    config.update(architectures=["LlamaForCausalLM"], bias=True)
    (ref / "config.json").write_text(json.dumps(config))
    assert drafts.detect_layout(ref) == "vllm"
    back = sj.load_draft(ref, target=target)
    assert back.config.fc_bias and back.config.method == "eagle"
    for name, array in drafts.eagle_arrays(back).items():
        assert array.tobytes() == arrays[name].tobytes(), name
    with pytest.raises(
        ValueError, match=r"own embedding 'embed_tokens\.weight' \[48, 32\].*pass target="
    ):
        sj.load_draft(ref)
    other = sj.Decoder(TARGET, seed=5)
    with pytest.raises(
        ValueError, match=r"'embed_tokens\.weight' \[48, 32\] differs from the target's"
    ):
        sj.load_draft(ref, target=other)
    _edit_json(ref / "config.json", bias=False)
    with pytest.raises(
        ValueError,
        match=r"field 'bias'=False \(the reference's fc bias\) but model\.safetensors holds 'fc\.bias'",
    ):
        sj.load_draft(ref, target=target)
    # declared as vLLM's: vLLM would drop the bias
    _edit_json(ref / "config.json", bias=None, architectures=["EagleLlamaForCausalLM"])
    with pytest.raises(
        ValueError, match=r"holds 'fc\.bias' but vLLM's eagle loader \(llama_eagle\.py\)"
    ):
        sj.load_draft(ref, target=target)


def test_reference_eagle3_takes_vllms_default_taps_from_the_target(tmp_path):
    deep = _abstract(TARGET.replace(num_layers=8))
    head = _head(deep, "eagle3", tap_layers=(2, 4, 5))  # vLLM's default for L = 8
    out = sj.save_draft(head, tmp_path / "ref", layout="vllm")
    _edit_json(out / "config.json", architectures=["LlamaForCausalLM"],
               eagle_aux_hidden_state_layer_ids=None, norm_before_residual=None)  # fmt: skip
    assert drafts.detect_layout(out) == "vllm"
    _same(head, sj.load_draft(out, target=deep))
    with pytest.raises(
        ValueError, match=r"'eagle_aux_hidden_state_layer_ids' is missing: .*pass target="
    ):
        sj.load_draft(out)
    with pytest.raises(ValueError, match=r"names 2 distinct layers"):  # L = 6: (2, 3, 3)
        sj.load_draft(out, target=_abstract(TARGET))


def test_pickles_are_refused_by_name(tmp_path, eagle3):
    out = sj.save_draft(eagle3, tmp_path, layout="vllm")
    (out / "model.safetensors").rename(out / "pytorch_model.bin")
    _edit_json(out / "config.json", architectures=["LlamaForCausalLM"])
    with pytest.raises(
        FileNotFoundError, match=r"only PyTorch pickles \['pytorch_model\.bin'\].*convert"
    ):
        sj.load_draft(out)


# ------------------------------------------------------------------------------- refusals


def test_heads_for_another_target_are_refused(tmp_path, target, eagle3):
    wide = _head(_abstract(TARGET.replace(hidden_size=48)), "eagle3")
    out = sj.save_draft(wide, tmp_path / "wide", layout="vllm")
    with pytest.raises(
        ValueError, match=r"the EAGLE head has hidden_size=48, the target's hidden_size is 32"
    ):
        sj.load_draft(out, target=target)
    vocab = _head(_abstract(TARGET.replace(vocab_size=40)), "eagle")
    out = sj.save_draft(vocab, tmp_path / "vocab", layout="vllm")
    with pytest.raises(
        ValueError, match=r"the EAGLE head has vocab_size=40, the target's vocab_size is 48"
    ):
        sj.load_draft(out, target=target)
    out = sj.save_draft(eagle3, tmp_path / "taps", layout="speculators")
    shallow = _abstract(TARGET.replace(num_layers=4))
    with pytest.raises(
        ValueError, match=r"tap_layers=\[1, 3, 4\] include \[4\], outside the target's num_layers=4"
    ):
        sj.load_draft(out, target=shallow)
    out = sj.save_draft(eagle3, tmp_path / "taps_specjax")
    with pytest.raises(ValueError, match=r"include \[4\], outside the target's num_layers=4"):
        sj.load_draft(out, target=shallow)


def _nan(t):
    t["midlayer.mlp.up_proj.weight"][3, 5] = np.nan


BAD_VLLM_EAGLE3 = {
    "missing tensor": (
        dict(edit=lambda t: t.pop("midlayer.hidden_norm.weight")),
        r"model\.safetensors: tensor 'midlayer\.hidden_norm\.weight' is missing \(config\.json: "
        r"method='eagle3', hidden_size=32",
    ),
    "non-finite": (
        dict(edit=_nan),
        r"tensor 'midlayer\.mlp\.up_proj\.weight' holds 1 non-finite values \(NaN/inf\) of 2048",
    ),
    "extra tensor": (
        dict(edit=lambda t: t.update({"midlayer.extra.weight": np.zeros(3, np.float32)})),
        r"unexpected tensors \['midlayer\.extra\.weight'\] .*vLLM would refuse or ignore them",
    ),
    "fc bias": (
        dict(edit=lambda t: t.update({"fc.bias": np.zeros(H, np.float32)})),
        r"holds 'fc\.bias' but vLLM's eagle3 loader \(llama_eagle3\.py\) builds fc without a bias",
    ),
    "wrong shape": (
        dict(edit=lambda t: t.update({"fc.weight": np.zeros((H, 2 * H), np.float32)})),
        r"tensor 'fc\.weight' has shape \(32, 64\), expected \(32, 96\) .*taps=\[1, 3, 4\], fc input 96",
    ),
    "lm head vs draft vocab": (
        dict(draft_vocab_size=24),
        r"tensor 'lm_head\.weight' has shape \(20, 32\), expected \(24, 32\)",
    ),
    "d2t out of range": (
        dict(edit=lambda t: t["d2t"].__setitem__(VD - 1, V)),
        r"tensor 'd2t' maps draft ids to target ids outside \[0, 48\)",
    ),
    "t2d disagrees": (
        dict(edit=lambda t: t["t2d"].__setitem__(np.flatnonzero(~t["t2d"])[0], True)),
        r"tensor 't2d' marks 21 target ids, not the 20 that d2t maps to",
    ),
    "d2t missing": (
        dict(edit=lambda t: t.pop("d2t")),
        r"tensor 'd2t' is missing, but draft_vocab_size=20 < vocab_size=48",
    ),
    "both layer names": (
        dict(edit=lambda t: t.update({"layers.0.hidden_norm.weight": np.ones(H, np.float32)})),
        r"both 'midlayer\.\*' and 'layers\.0\.\*' tensors",
    ),
    "norm before residual": (
        dict(norm_before_residual=True),
        r"field 'norm_before_residual'=True \(hidden_norm\(g_t\) would be the residual\)",
    ),
    "norm before fc": (dict(norm_before_fc=True), r"field 'norm_before_fc'=True"),
    "logit scale": (dict(logit_scale=2.0), r"field 'logit_scale'=2\.0 \(vLLM scales"),
    "taps": (
        dict(eagle_aux_hidden_state_layer_ids=[1, 3, 3]),
        r"'eagle_aux_hidden_state_layer_ids'=\[1, 3, 3\] names 2 distinct layers",
    ),
    "family": (dict(model_type="qwen3"), r"field 'model_type'='qwen3': specjax's EAGLE drafter"),
    "layers": (dict(num_hidden_layers=2), r"field 'num_hidden_layers'=2: an EAGLE drafter has one"),
    "architecture": (
        dict(architectures=["Eagle3Qwen3ForCausalLM"]),
        r"'architectures'=\['Eagle3Qwen3ForCausalLM'\]: specjax reads vLLM's Llama EAGLE",
    ),
    "unknown field": (
        dict(sliding_window_pattern=4),
        r"config\.json: NotImplementedError: config field\(s\) not supported .*sliding_window_pattern=4",
    ),
}


@pytest.mark.parametrize("case", list(BAD_VLLM_EAGLE3))
def test_bad_vllm_eagle3_directory_is_refused(tmp_path, target, eagle3, case):
    kwargs, match = BAD_VLLM_EAGLE3[case]
    out = sj.save_draft(eagle3, tmp_path / "bad", layout="vllm")
    if "edit" in kwargs:
        _rewrite(out / "model.safetensors", kwargs.pop("edit"))
    if kwargs:
        _edit_json(out / "config.json", **kwargs)
    with pytest.raises(ValueError, match=match):
        sj.load_draft(out, target=target)


def test_bad_eagle1_and_speculators_directories_are_refused(tmp_path, target, eagle, eagle3):
    out = sj.save_draft(eagle, tmp_path / "e1", layout="vllm")
    _rewrite(out / "model.safetensors",
             lambda t: t.update({"layers.0.input_layernorm.weight": np.ones(H, np.float32)}))  # fmt: skip
    with pytest.raises(
        ValueError, match=r"unexpected tensors \['layers\.0\.input_layernorm\.weight'\]"
    ):
        sj.load_draft(out)
    out = sj.save_draft(eagle3, tmp_path / "spec", layout="speculators")
    _edit_json(out / "config.json", norm_before_residual=None)  # vLLM's default: true
    with pytest.raises(ValueError, match=r"field 'norm_before_residual'=True"):
        sj.load_draft(out)
    _edit_json(out / "config.json", norm_before_residual=False, speculators_model_type="eagle")
    with pytest.raises(
        ValueError, match=r"'speculators_model_type'='eagle': specjax reads speculators EAGLE-3"
    ):
        sj.load_draft(out)
    _edit_json(out / "config.json", speculators_model_type="eagle3", speculators_config={})
    with pytest.raises(ValueError, match=r"'speculators_config' needs proposal_methods\[0\]"):
        sj.load_draft(out)


def test_bad_specjax_files_are_refused(tmp_path, eagle3):
    out = sj.save_draft(eagle3, tmp_path / "s")
    _rewrite(out / "draft.safetensors", lambda t: t["q_proj.kernel"].__setitem__((0, 0), np.inf))
    with pytest.raises(
        ValueError, match=r"draft\.safetensors: tensor 'q_proj\.kernel' holds 1 non-finite"
    ):
        sj.load_draft(out)
    out = sj.save_draft(eagle3, tmp_path / "x")
    _rewrite(out / "draft.safetensors", lambda t: t.update({"extra": np.zeros(2, np.float32)}))
    with pytest.raises(
        ValueError, match=r"unexpected tensors \['extra'\] \(specjax_draft\.json: method='eagle3'"
    ):
        sj.load_draft(out)
    full = _head(_abstract(TARGET), "eagle3", draft_vocab_size=V)
    out = sj.save_draft(full, tmp_path / "p")
    roll = (np.arange(V) + 1) % V - np.arange(V)  # a permutation specjax and vLLM would ignore
    _rewrite(out / "draft.safetensors", lambda t: t.update({"d2t": roll.astype(np.int32)}))
    with pytest.raises(
        ValueError, match=r"'d2t' is not all zeros, but draft_vocab_size = vocab_size = 48"
    ):
        sj.load_draft(out)
    out = sj.save_draft(eagle3, tmp_path / "c")
    meta = json.loads((out / "specjax_draft.json").read_text())
    meta["config"]["tap_layers"] = [1, 2]
    (out / "specjax_draft.json").write_text(json.dumps(meta))
    with pytest.raises(
        ValueError, match=r"specjax_draft\.json: bad EAGLE config .*tap_layers=\(1, 2\)"
    ):
        sj.load_draft(out)


def test_missing_files_are_refused(tmp_path, eagle, eagle3):
    for layout, head, name in (("vllm", eagle, "model.safetensors"),
                               ("speculators", eagle3, "model.safetensors"),
                               ("specjax", eagle3, "draft.safetensors")):  # fmt: skip
        out = sj.save_draft(head, tmp_path / layout, layout=layout)
        (out / name).unlink()
        with pytest.raises(FileNotFoundError, match=rf"{layout}/{name} is missing"):
            sj.load_draft(out)
    (tmp_path / "vllm" / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"no draft heads in .*vllm: expected"):
        sj.load_draft(tmp_path / "vllm")


def test_export_refusals(tmp_path, target, eagle, eagle3):
    biased = _head(target, "eagle", fc_bias=True)
    with pytest.raises(
        ValueError,
        match=r"EagleConfig\.fc_bias=True: vLLM's `eagle` loader \(llama_eagle\.py\) builds fc without a bias",
    ):
        sj.save_draft(biased, tmp_path / "b", layout="vllm")
    with pytest.raises(
        ValueError, match=r"layout='fasterdecoding' holds Medusa heads; EAGLE heads export to"
    ):
        sj.save_draft(eagle3, tmp_path / "f", layout="fasterdecoding")
    with pytest.raises(
        ValueError, match=r"layout='speculators' holds EAGLE-3 heads .*got method='eagle'"
    ):
        sj.save_draft(eagle, tmp_path / "s", layout="speculators")
    medusa = sj.MedusaHeads.for_target(target, num_heads=2, num_layers=1)
    with pytest.raises(ValueError, match=r"layout='speculators' holds EAGLE-3 heads; Medusa heads"):
        sj.save_draft(medusa, tmp_path / "m", layout="speculators")
    anonymous = _head(target, "eagle3", base_model="")
    with pytest.raises(ValueError, match=r"EagleConfig\.base_model is empty"):
        sj.save_draft(anonymous, tmp_path / "a", layout="speculators")
    unsorted = _head(target, "eagle3", tap_layers=(4, 1, 3))
    with pytest.raises(
        ValueError, match=r"tap_layers=\(4, 1, 3\): vLLM collects the taps as sorted"
    ):
        sj.save_draft(unsorted, tmp_path / "u", layout="vllm")
    sj.save_draft(unsorted, tmp_path / "u")  # specjax keeps any order
    with pytest.raises(ValueError, match=r"speculative_tokens=4 is a layout='speculators' option"):
        sj.save_draft(eagle3, tmp_path / "t", layout="vllm", speculative_tokens=4)
    nan = _head(target, "eagle3")
    nan.norm.weight.set_value(nan.norm.weight[...].at[0].set(jnp.nan))
    with pytest.raises(ValueError, match=r"heads parameter 'norm\.weight' holds 1 non-finite"):
        sj.save_draft(nan, tmp_path / "n")
    sj.save_hf(target, tmp_path / "hf")
    with pytest.raises(ValueError, match=r"describes a model \(model_type='llama'\)"):
        sj.save_draft(eagle, tmp_path / "hf", layout="vllm")
    out = sj.save_draft(eagle3, tmp_path / "again", layout="vllm")
    sj.save_draft(eagle3, out, layout="speculators")  # an EAGLE head directory is overwritten
    assert drafts.detect_layout(out) == "speculators"
