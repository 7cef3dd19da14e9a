"""Bad inputs fail early and say what is wrong: the key, the value, the file.

Generation arguments are checked on the host before anything compiles; checkpoints are checked
while loading (missing files, truncation, non-finite weights, pickles, unsupported configs).
"""

from __future__ import annotations

import json
import math
import pickle
import re
import shutil
from pathlib import Path

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import specjax as sj
from specjax.decoding import engine
from specjax.decoding.prompts import check_positions
from specjax.io.tokenizer import train_bpe
from specjax.models import config_from_hf

# ----------------------------------------------------------------------------- generate


def test_empty_prompts(target):
    with pytest.raises(ValueError, match=r"prompts\[0\] is empty"):
        sj.generate(target, [[]], max_new_tokens=4)
    with pytest.raises(ValueError, match=r"prompts\[1\] is empty"):
        sj.generate(target, [[1, 2], []], max_new_tokens=4)
    with pytest.raises(ValueError, match="prompts must be a non-empty"):
        sj.generate(target, [], max_new_tokens=4)


def test_token_ids_out_of_vocab(target):
    with pytest.raises(ValueError, match=r"prompts\[0\] holds token id 32 outside \[0, 32\)"):
        sj.generate(target, [[1, 32]], max_new_tokens=4)
    with pytest.raises(ValueError, match=r"stop_token_ids holds 40"):
        sj.generate(target, [[1]], max_new_tokens=4, stop_token_ids=[3, 40])


def test_string_prompt_without_tokenizer(target):
    with pytest.raises(
        ValueError, match=r"prompts\[0\] is a string but the model has no tokenizer"
    ):
        sj.generate(target, "hello", max_new_tokens=4)


def test_prompt_beyond_max_positions(target):
    with pytest.raises(
        ValueError, match=r"prompt length 129 exceeds .*max_position_embeddings=128"
    ):
        sj.generate(target, [[1] * 129], max_new_tokens=1)
    with pytest.raises(
        ValueError,
        match=r"prompt length 100 \+ max_new_tokens=40 = 140 exceeds .*max_position_embeddings=128",
    ):
        sj.generate(target, [[1] * 5, [2] * 100], max_new_tokens=40)
    check_positions(100, 28, 128)  # an exact fit passes


@pytest.mark.parametrize("value", [0, -3, 2.5, None, True])
def test_max_new_tokens(target, value):
    with pytest.raises(
        ValueError, match=re.escape(f"max_new_tokens={value!r} ") + ".*must be.*>= 1"
    ):
        sj.generate(target, [[1]], max_new_tokens=value)


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", -0.5),
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_p", math.nan),
        ("top_k", -1),
        ("top_k", 2.0),
        ("min_p", -0.1),
        ("min_p", 1.01),
        ("seed", -1),
    ],
)
def test_sampling_params(field, value):
    with pytest.raises(ValueError, match=re.escape(f"SamplingParams.{field}={value!r}")):
        sj.SamplingParams(**{field: value})


def test_top_k_beyond_vocab(target):
    sampling = sj.SamplingParams(temperature=1.0, top_k=33)
    with pytest.raises(ValueError, match=r"top_k=33 is out of range: must be <= 32 \(vocab_size\)"):
        sj.generate(target, [[1]], max_new_tokens=4, sampling=sampling)


@pytest.mark.parametrize("value", ["float16", "float32", jnp.bfloat16])
def test_weight_dtype(target, value):
    before = engine.trace_count()
    with pytest.raises(ValueError, match=r"weight_dtype=.* is not one of \(None, 'bfloat16'\)"):
        sj.generate(target, [[1, 2]], max_new_tokens=4, weight_dtype=value)
    assert engine.trace_count() == before


def test_seeds_length(target):
    with pytest.raises(ValueError, match="seeds"):
        sj.generate(target, [[1], [2]], max_new_tokens=4, seeds=[1, 2, 3])
    with pytest.raises(ValueError, match="seeds"):
        sj.generate(target, [[1], [2], [3]], max_new_tokens=4, seeds=[1])


# ----------------------------------------------------------------------------- checkpoints


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory, target):
    """A valid HF directory: config.json, model.safetensors, tokenizer.json."""
    tok = train_bpe(["abc abd abe " * 10], vocab_size=260, min_frequency=1)
    out = tmp_path_factory.mktemp("good")
    sj.save_hf(sj.Model(target, tok), out)
    assert sj.load_model(out).config.num_layers == 2
    return out


@pytest.fixture
def ckpt(good_dir, tmp_path) -> Path:
    """A fresh copy of the valid directory, for one test to break."""
    return Path(shutil.copytree(good_dir, tmp_path / "ckpt"))


def _edit_config(path: Path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_directory_does_not_exist(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=re.escape(f"{missing} does not exist")):
        sj.load_model(missing)
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        sj.load_model(tmp_path / "file")


def test_missing_config(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        sj.load_model(ckpt)


def test_config_not_json(ckpt):
    (ckpt / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config.json is not valid JSON"):
        sj.load_model(ckpt)


def test_missing_weights(ckpt):
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"no weights in .*model.safetensors"):
        sj.load_model(ckpt)


def test_missing_tokenizer(ckpt):
    (ckpt / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.json is missing"):
        sj.load_model(ckpt)
    assert sj.load_model(ckpt, load_tokenizer=False).tokenizer is None


def test_missing_shard(ckpt):
    weights = load_file(ckpt / "model.safetensors")
    names = sorted(weights)
    half = len(names) // 2
    save_file({n: weights[n] for n in names[:half]}, ckpt / "part-1.safetensors")
    (ckpt / "model.safetensors").unlink()
    weight_map = {
        n: "part-1.safetensors" if i < half else "part-2.safetensors" for i, n in enumerate(names)
    }
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(FileNotFoundError, match="shard part-2.safetensors .* is missing"):
        sj.load_model(ckpt)


@pytest.mark.parametrize("keep", [0.5, 0.999, 20])
def test_truncated_safetensors(ckpt, keep):
    """Cut in the data, at the very end, or inside the header."""
    path = ckpt / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep) if keep < 1 else keep])
    with pytest.raises(ValueError, match=re.escape(str(path))):
        sj.load_model(ckpt)


def test_unknown_model_type(ckpt):
    _edit_config(ckpt, model_type="bert")
    with pytest.raises(NotImplementedError, match="model_type='bert' is not supported"):
        sj.load_model(ckpt)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_non_finite_weights_name_the_tensor(ckpt, bad, dtype):
    path = ckpt / "model.safetensors"
    weights = {n: w.astype(dtype) for n, w in load_file(path).items()}
    name = "model.layers.1.mlp.up_proj.weight"
    weights[name][3, 5] = bad
    save_file(weights, path)
    with pytest.raises(ValueError, match=re.escape(f"tensor '{name}' holds 1 non-finite")):
        sj.load_model(ckpt)


def test_tensor_names_and_shapes(ckpt):
    path = ckpt / "model.safetensors"
    weights = load_file(path)
    missing = weights.pop("model.layers.0.self_attn.k_proj.weight")
    weights["model.layers.0.self_attn.k_bias"] = missing[0]
    save_file(weights, path)
    with pytest.raises(ValueError) as err:
        sj.load_model(ckpt)
    assert "- missing: model.layers.0.self_attn.k_proj.weight" in str(err.value)
    assert "+ unexpected: model.layers.0.self_attn.k_bias" in str(err.value)
    del weights["model.layers.0.self_attn.k_bias"]
    weights["model.layers.0.self_attn.k_proj.weight"] = missing[:, :-1]
    save_file(weights, path)
    with pytest.raises(ValueError, match=r"'model.layers.0.self_attn.k_proj.weight' has shape"):
        sj.load_model(ckpt)


class _Tripwire:
    """Unpickling this creates a marker file: proof that a loader ran pickle."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_bin_only_checkpoint_is_never_unpickled(ckpt, tmp_path):
    marker = tmp_path / "unpickled"
    (ckpt / "model.safetensors").unlink()
    (ckpt / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _Tripwire(marker)}))
    with pytest.raises(ValueError, match=r"pytorch_model.bin.*never unpickles.*safetensors"):
        sj.load_model(ckpt)
    assert not marker.exists()


@pytest.mark.parametrize(
    "changes, named",
    [
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "rope_type='yarn'"),
        (dict(rope_scaling={"type": "linear", "factor": 2.0}), "rope_type='linear'"),
        (dict(mlp_bias=True), "mlp_bias=True"),
        (dict(pretraining_tp=2), "pretraining_tp=2"),
        (dict(attn_logit_softcapping=50.0), "attn_logit_softcapping=50.0"),
        (dict(quantization_config={"quant_method": "gptq"}), "quantization_config="),
    ],
)
def test_unsupported_llama_fields(ckpt, changes, named):
    _edit_config(ckpt, **changes)
    with pytest.raises(NotImplementedError, match=re.escape(named)):
        sj.load_model(ckpt)


def test_unknown_fields_that_are_off_are_accepted(good_dir):
    config = json.loads((good_dir / "config.json").read_text())
    config.update(attn_logit_softcapping=None, num_experts=0, _commit_hash="abc")
    assert config_from_hf(config).num_layers == 2


@pytest.mark.parametrize(
    "config, named",
    [
        (dict(model_type="gpt2", activation_function="relu"), "activation_function='relu'"),
        (dict(model_type="gpt2", scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse"),
        (dict(model_type="gpt2", scale_attn_weights=False), "scale_attn_weights=False"),
        (
            dict(model_type="qwen2", use_sliding_window=True, sliding_window=64),
            "use_sliding_window=True",
        ),
    ],
)
def test_unsupported_fields_other_families(config, named):
    base = {
        "gpt2": dict(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32),
        "qwen2": dict(
            vocab_size=64,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
        ),
    }[config["model_type"]]
    with pytest.raises(NotImplementedError, match=re.escape(named)):
        config_from_hf({**base, **config})
    # The same base without the bad field is fine.
    config_from_hf({**base, "model_type": config["model_type"]})
