"""Draft-heads I/O: exact round trips in the specjax, vLLM and FasterDecoding layouts, the exact
names vLLM and FasterDecoding read, a refusal naming field/tensor and both values for every bad
input, and `generate` loading heads from a path.

The layouts are checked against vLLM 0.32's `vllm/model_executor/models/medusa.py` and
`vllm/transformers_utils/configs/medusa.py`, and FasterDecoding/Medusa's
`medusa/model/medusa_model.py` (`[ResBlock] * L` + Linear; `state_dict()` keys).
"""

import dataclasses
import json
import re

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import specjax as sj
from specjax.decoding import engine
from specjax.heads.medusa import target_lm_head
from specjax.io import drafts

K, L = 3, 2


def _randomised(heads, seed=0):
    """Non-zero blocks, biases and LM heads, so a round trip that swaps or drops one shows."""
    rng = np.random.default_rng(seed)
    for p in (heads.w, heads.b, heads.lm_head):
        if p is not None:
            p.set_value(jnp.asarray(rng.normal(0, 0.3, p[...].shape), p[...].dtype))
    return heads


def _heads(target, seed=0, **options):
    options = {"num_heads": K, "num_layers": L, **options}
    return _randomised(sj.MedusaHeads.for_target(target, **options), seed)


@pytest.fixture(scope="module")
def heads(target):
    """Independent blocks (L=2), biases."""
    return _heads(target)


@pytest.fixture(scope="module")
def shared(target):
    """FasterDecoding's form: one block per head applied L times."""
    return _heads(target, seed=1, shared_blocks=True, base_model="org/tiny-target")


def _same(a, b):
    assert a.config == b.config
    for name in ("w", "b", "lm_head", "token_map"):
        pa, pb = getattr(a, name, None), getattr(b, name, None)
        assert (pa is None) == (pb is None), name
        if pa is not None:
            x, y = np.asarray(pa[...]), np.asarray(pb[...])
            assert x.dtype == y.dtype and x.shape == y.shape, name
            assert x.tobytes() == y.tobytes(), f"{name} differs"  # bitwise


def _rewrite(path, edit):
    """Load a safetensors file, let `edit(dict)` change it, write it back."""
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))


def _edit_json(path, **changes):
    config = json.loads(path.read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del config[key]
    path.write_text(json.dumps(config))


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize(
    "layout, which",
    [("specjax", "heads"), ("specjax", "shared"), ("vllm", "heads"), ("fasterdecoding", "shared")],
)
def test_round_trip_is_exact(tmp_path, target, heads, shared, layout, which):
    original = heads if which == "heads" else shared
    out = sj.save_draft(original, tmp_path / layout, layout=layout)
    assert drafts.detect_layout(out) == layout
    loaded = sj.load_draft(out, target=target)
    _same(original, loaded)
    h = jnp.asarray(np.random.default_rng(2).normal(size=(4, original.config.hidden_size)))
    np.testing.assert_array_equal(np.asarray(original(h)), np.asarray(loaded(h)))


def test_vllm_round_trip_of_shared_blocks_and_no_bias(tmp_path, target, shared):
    # vLLM's blocks are independent: shared blocks come back as L equal copies (the same
    # function); no bias writes medusa_fc_bias false and comes back without one.
    back = sj.load_draft(sj.save_draft(shared, tmp_path / "a", layout="vllm"))
    assert not back.config.shared_blocks and back.config.base_model == "org/tiny-target"
    w = np.asarray(back.w[...])
    assert (w[:, 0] == w[:, 1]).all() and (w[:, 0] == np.asarray(shared.w[...])[:, 0]).all()
    h = jnp.asarray(np.random.default_rng(3).normal(size=(4, 32)))
    np.testing.assert_array_equal(np.asarray(shared(h)), np.asarray(back(h)))

    plain = _heads(target, bias=False)
    out = sj.save_draft(plain, tmp_path / "b", layout="vllm")
    assert json.loads((out / "config.json").read_text())["medusa_fc_bias"] is False
    _same(plain, sj.load_draft(out))


def test_a_shared_lm_head_is_written_once_and_reads_back(tmp_path, target):
    # One frozen [D, V] head for all: vLLM's original_lm_head with one lm_head.weight, the
    # specjax file with one [D, V] copy; FasterDecoding has no such field and gets K copies.
    heads = _heads(target, seed=4, shared_lm_head=True)
    assert isinstance(heads.lm_head, sj.heads.medusa.TargetWeight)
    D, V = heads.config.hidden_size, heads.config.vocab_size
    out = sj.save_draft(heads, tmp_path / "vllm", layout="vllm")
    assert json.loads((out / "config.json").read_text())["original_lm_head"] is True
    tensors = load_file(str(out / drafts.VLLM_WEIGHTS))
    assert [n for n in tensors if "lm_head" in n] == ["lm_head.weight"]
    assert tensors["lm_head.weight"].shape == (V, D)
    h = jnp.asarray(np.random.default_rng(5).normal(size=(4, D)))
    for layout in ("vllm", "specjax"):
        back = sj.load_draft(sj.save_draft(heads, tmp_path / layout, layout=layout))
        if layout == "specjax":
            _same(heads, back)
        assert back.config.shared_lm_head
        np.testing.assert_array_equal(np.asarray(heads(h)), np.asarray(back(h)))
    fd_src = _heads(target, seed=4, shared_lm_head=True, shared_blocks=True)
    fd = sj.load_draft(sj.save_draft(fd_src, tmp_path / "fd", layout="fasterdecoding"))
    assert not fd.config.shared_lm_head
    assert np.asarray(fd.lm_head[...]).shape == (K, D, V)
    assert (np.asarray(fd.lm_head[...]) == np.asarray(fd_src.lm_head[...])).all()
    # K copies of the head go through the per-head product, the shared one through a single
    # matmul: the same sums in another order (bit-equal on some CPUs, not on others).
    np.testing.assert_allclose(np.asarray(fd_src(h)), np.asarray(fd(h)), rtol=1e-5, atol=1e-6)
    # The shared head is the per-head form's function with K equal copies.
    plain = _heads(target, seed=4)
    plain.w.set_value(heads.w[...])
    plain.b.set_value(heads.b[...])
    plain.lm_head.set_value(jnp.broadcast_to(heads.lm_head[...], (K, D, V)))
    np.testing.assert_allclose(np.asarray(heads(h)), np.asarray(plain(h)), rtol=1e-6, atol=1e-6)


TOKEN_MAP = np.array([0, 3, 4, 9, 10, 17, 25, 31])  # a draft vocabulary of 8 of the 32 ids


@pytest.mark.parametrize("shared_lm_head", [False, True])
def test_a_draft_vocabulary_round_trips_and_drafts_only_its_ids(tmp_path, target, shared_lm_head):
    """Heads over a draft vocabulary (vLLM's truncated_vocab_size + token_map): LM heads of Vd
    columns cut from the target's at the map, logits -inf outside it; exact round trips in
    the specjax layout and, with one shared LM head (the only form vLLM 0.32 builds), the vLLM
    layout, with vLLM's names and shapes; a vLLM file whose head keeps all V rows is cut to
    the map on import (vLLM's load_weights does the same); per-head LM heads are refused for
    vLLM both ways, and FasterDecoding, which has no map, is refused by name."""
    heads = sj.MedusaHeads.for_target(
        target, num_heads=K, num_layers=L, token_map=TOKEN_MAP, shared_lm_head=shared_lm_head
    )
    c = heads.config
    assert c.draft_vocab_size == 8 and c.truncated and c.vocab_size == 32
    lm = np.asarray(heads.lm_head[...])
    full = np.asarray(target_lm_head(target))
    np.testing.assert_array_equal(lm if shared_lm_head else lm[1], full[:, TOKEN_MAP])
    _randomised(heads)
    h = jnp.asarray(np.random.default_rng(6).normal(size=(4, 32)))
    logits, draft = np.asarray(heads(h)), np.asarray(heads.draft_logits(h))  # [4, K, V], [4, K, 8]
    outside = np.setdiff1d(np.arange(32), TOKEN_MAP)
    assert np.isneginf(logits[..., outside]).all() and np.isfinite(logits[..., TOKEN_MAP]).all()
    np.testing.assert_array_equal(logits[..., TOKEN_MAP], draft)
    for layout in ("specjax", "vllm") if shared_lm_head else ("specjax",):
        back = sj.load_draft(sj.save_draft(heads, tmp_path / layout, layout=layout), target=target)
        _same(heads, back)
        np.testing.assert_array_equal(np.asarray(back(h)), logits)
    with pytest.raises(ValueError, match=r"layout='fasterdecoding' has no draft vocabulary, but "
                       r"these heads draft from 8 of 32 ids"):  # fmt: skip
        sj.save_draft(heads, tmp_path / "fd", layout="fasterdecoding")
    if not shared_lm_head:
        with pytest.raises(ValueError, match=r"vLLM builds per-head LM heads over the whole "
                           r"vocabulary .*shared_lm_head=True"):  # fmt: skip
            sj.save_draft(heads, tmp_path / "vllm", layout="vllm")
        return
    out = tmp_path / "vllm"
    config = json.loads((out / "config.json").read_text())
    assert (config["vocab_size"], config["truncated_vocab_size"]) == (32, 8)
    tensors = load_file(str(out / drafts.VLLM_WEIGHTS))
    assert tensors["token_map"].dtype == np.int64 and (tensors["token_map"] == TOKEN_MAP).all()
    assert tensors["lm_head.weight"].shape == (8, 32)  # [Vd, D]

    def widen(t):  # heads of all V rows: the map's rows hold the trained ones
        for n in [n for n in t if n.startswith("lm_head")]:
            wide = np.zeros((32, 32), np.float32)
            wide[TOKEN_MAP] = t[n]
            t[n] = wide

    _rewrite(out / drafts.VLLM_WEIGHTS, widen)
    _same(heads, sj.load_draft(out))
    _edit_json(out / "config.json", original_lm_head=False)
    with pytest.raises(ValueError, match=r"truncated_vocab_size=8 < vocab_size=32 without "
                       r"original_lm_head: true"):  # fmt: skip
        sj.load_draft(out)
    for bad, match in [(TOKEN_MAP[::-1], "increasing order"), (np.arange(8) + 30, r"max 37"),
                       (TOKEN_MAP[:5], r"shape \(5,\)")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            sj.MedusaHeads.for_target(target, num_heads=K, token_map=bad,
                                      draft_vocab_size=8)  # fmt: skip


def test_load_draft_finds_a_workdirs_heads(tmp_path, heads):
    sj.save_draft(heads, tmp_path / drafts.HEADS_DIR, layout="specjax")
    (tmp_path / "results.json").write_text("{}")
    _same(heads, sj.load_draft(tmp_path))


# ------------------------------------------------------------------------ exact layouts


def test_vllm_layout_exact_names(tmp_path, target, tiny_config):
    D, V = tiny_config.hidden_size, tiny_config.vocab_size
    h = _heads(target, base_model="org/tiny-target")
    out = sj.save_draft(h, tmp_path, layout="vllm")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((out / "config.json").read_text()) == {
        "model_type": "medusa",
        "architectures": ["MedusaModel"],
        "hidden_size": D,
        "vocab_size": V,
        "num_heads": K,
        "num_hidden_layers": L,
        "truncated_vocab_size": V,
        "medusa_fc_bias": True,  # vLLM builds (and loads) the biases only when told
        "original_lm_head": False,
        "torch_dtype": "float32",
        "base_model_name_or_path": "org/tiny-target",
    }
    tensors = load_file(str(out / "model.safetensors"))
    expected = {f"lm_heads.{k}.weight": (V, D) for k in range(K)}
    for k in range(K):
        for layer in range(L):
            expected[f"blocks.{k}.layers.{layer}.weight"] = (D, D)
            expected[f"blocks.{k}.layers.{layer}.bias"] = (D,)
    assert {n: t.shape for n, t in tensors.items()} == expected
    # torch's nn.Linear layout: weight [out, in], y = x W^T + b
    w, b, lm = (np.asarray(p[...]) for p in (h.w, h.b, h.lm_head))
    assert (tensors["blocks.1.layers.1.weight"] == w[1, 1].T).all()
    assert (tensors["blocks.2.layers.0.bias"] == b[2, 0]).all()
    assert (tensors["lm_heads.2.weight"] == lm[2].T).all()


def test_fasterdecoding_layout_exact_names(tmp_path, tiny_config, shared):
    D, V = tiny_config.hidden_size, tiny_config.vocab_size
    out = sj.save_draft(shared, tmp_path, layout="fasterdecoding")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "medusa_lm_head.safetensors"]
    assert json.loads((out / "config.json").read_text()) == {
        "medusa_num_heads": K,
        "medusa_num_layers": L,
        "base_model_name_or_path": "org/tiny-target",
        # read by vLLM when it loads this directory, ignored by FasterDecoding
        "hidden_size": D,
        "vocab_size": V,
        "medusa_fc_bias": True,
    }
    tensors = load_file(str(out / "medusa_lm_head.safetensors"))
    # nn.Sequential(*([ResBlock] * L), Linear).state_dict(): the shared block at every index
    expected = {f"{k}.{L}.weight": (V, D) for k in range(K)}
    for k in range(K):
        for layer in range(L):
            expected[f"{k}.{layer}.linear.weight"] = (D, D)
            expected[f"{k}.{layer}.linear.bias"] = (D,)
    assert {n: t.shape for n, t in tensors.items()} == expected
    assert (tensors["1.0.linear.weight"] == tensors["1.1.linear.weight"]).all()


def test_fasterdecoding_block_listed_once_and_version_2(tmp_path, target, shared):
    out = sj.save_draft(shared, tmp_path, layout="fasterdecoding")
    wfile = out / drafts.FD_WEIGHTS
    # safetensors' save_model keeps a shared tensor under its first name only.
    _rewrite(
        wfile, lambda t: [t.pop(f"{k}.1.linear.{p}") for k in range(K) for p in ("weight", "bias")]
    )
    _same(shared, sj.load_draft(out))
    # Medusa "version 2": no LM-head tensors, every head projects with the base model's.
    _rewrite(wfile, lambda t: [t.pop(f"{k}.{L}.weight") for k in range(K)])
    _edit_json(out / "config.json", version="2", vocab_size=None)
    with pytest.raises(ValueError, match=r"no LM-head tensors \{h\}\.2\.weight .*pass target="):
        sj.load_draft(out)
    v2 = sj.load_draft(out, target=target)
    lm = np.asarray(target_lm_head(target))  # [D, V]
    assert v2.config.shared_lm_head and (np.asarray(v2.lm_head[...]) == lm).all()


def test_vllm_reads_names_like_vllm(tmp_path, heads):
    """`medusa_heads.` prefixes, FasterDecoding names, any num*heads / num*layers key,
    original_lm_head (one LM head for all) and logit_scale (folded), as vLLM's loader does."""
    out = sj.save_draft(heads, tmp_path, layout="vllm")
    wfile = out / drafts.VLLM_WEIGHTS

    def rename(t):
        for name in list(t):
            t["medusa_heads." + name] = t.pop(name)
        t["0.0.linear.weight"] = t.pop("medusa_heads.blocks.0.layers.0.weight")

    _rewrite(wfile, rename)
    _edit_json(out / "config.json", num_heads=None, num_hidden_layers=None,
               medusa_num_heads=K, medusa_num_layers=L)  # fmt: skip
    _same(heads, sj.load_draft(out))

    def one_head(t):
        for k in range(1, K):
            t.pop(f"medusa_heads.lm_heads.{k}.weight")

    _rewrite(wfile, one_head)
    _edit_json(out / "config.json", original_lm_head=True, logit_scale=0.5)
    loaded = sj.load_draft(out)
    lm0 = np.asarray(heads.lm_head[...])[0]
    assert loaded.config.shared_lm_head and (np.asarray(loaded.lm_head[...]) == lm0 * 0.5).all()


# ------------------------------------------------------------------------------ refusals


def _bad_vllm(tmp_path, heads, edit=None, **config):
    out = sj.save_draft(heads, tmp_path / "bad", layout="vllm")
    if edit is not None:
        _rewrite(out / drafts.VLLM_WEIGHTS, edit)
    if config:
        _edit_json(out / "config.json", **config)
    return out


def _nan(t):
    t["blocks.1.layers.0.weight"][2, 3] = np.nan


def _extra(t):
    t["blocks.3.layers.0.weight"] = np.zeros((32, 32), np.float32)


def _misshapen(t):
    t["lm_heads.1.weight"] = np.zeros((32, 33), np.float32)


BAD_VLLM = {
    "missing tensor": (
        dict(edit=lambda t: t.pop("lm_heads.2.weight")),
        r"model\.safetensors: tensor 'lm_heads\.2\.weight' is missing \(config\.json: num_heads=3",
    ),
    "missing bias": (
        dict(edit=lambda t: t.pop("blocks.0.layers.1.bias")),
        r"'blocks\.0\.layers\.1\.bias' is missing .*medusa_fc_bias=True",
    ),
    "unexpected tensor": (
        dict(edit=_extra),
        r"unexpected tensors \['blocks\.3\.layers\.0\.weight'\] \(config\.json: num_heads=3, "
        r"num_hidden_layers=2.*vLLM would ignore them",
    ),
    "non-finite": (
        dict(edit=_nan),
        r"tensor 'blocks\.1\.layers\.0\.weight' holds 1 non-finite values \(NaN/inf\) of 1024",
    ),
    "wrong shape": (
        dict(edit=_misshapen),
        r"tensor 'lm_heads\.1\.weight' has shape \(32, 33\), expected \(32, 32\)",
    ),
    "biases vLLM would drop": (
        dict(medusa_fc_bias=False),
        r"holds block biases \(blocks\.0\.layers\.0\.bias, \.\.\.\) but config\.json has "
        r"medusa_fc_bias=False, not true: vLLM would drop them",
    ),
    "truncated vocabulary without a map": (
        dict(truncated_vocab_size=16),
        r"truncated_vocab_size=16 < vocab_size=32 needs a 'token_map' tensor",
    ),
    "a map vLLM would ignore": (
        dict(edit=lambda t: t.update(token_map=np.arange(32, dtype=np.int64))),
        r"a 'token_map' tensor but truncated_vocab_size=32 equals vocab_size",
    ),
    "bad field": (dict(num_heads=0), r"field 'num_heads'=0 is out of range: must be >= 1"),
    "string bool": (
        dict(medusa_fc_bias="true"),
        r"field 'medusa_fc_bias'='true' must be true or false",
    ),
    "architecture": (
        dict(architectures=["LlamaForCausalLM"]),
        r"'architectures'=\['LlamaForCausalLM'\], vLLM's Medusa is \['MedusaModel'\]",
    ),
}


@pytest.mark.parametrize("case", list(BAD_VLLM))
def test_bad_vllm_directory_is_refused(tmp_path, heads, case):
    kwargs, match = BAD_VLLM[case]
    out = _bad_vllm(tmp_path, heads, **kwargs)
    with pytest.raises(ValueError, match=match):
        sj.load_draft(out)


@pytest.mark.parametrize("field", ["hidden_size", "vocab_size"])
def test_heads_for_another_target_are_refused(tmp_path, target, tiny_config, field):
    other = sj.Decoder(tiny_config.replace(**{field: 48}), seed=0)
    out = sj.save_draft(_heads(other), tmp_path, layout="vllm")
    with pytest.raises(ValueError, match=rf"heads have {field}=48, the target's {field} is 32"):
        sj.load_draft(out, target=target)
    sj.load_draft(out)  # fine without a target to check against


def test_missing_files_are_refused(tmp_path, heads, shared):
    with pytest.raises(FileNotFoundError, match=r"draft directory .*nowhere does not exist"):
        sj.load_draft(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        FileNotFoundError, match=r"no draft heads in .*empty: expected specjax_draft"
    ):
        sj.load_draft(tmp_path / "empty")
    out = sj.save_draft(heads, tmp_path / "v", layout="vllm")
    (out / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"v/model\.safetensors is missing"):
        sj.load_draft(out)
    out = sj.save_draft(shared, tmp_path / "fd", layout="fasterdecoding")
    (out / drafts.FD_WEIGHTS).rename(out / drafts.FD_PICKLE)
    with pytest.raises(FileNotFoundError, match=r"medusa_lm_head\.safetensors is missing; "
                       r"medusa_lm_head\.pt is a PyTorch pickle"):  # fmt: skip
        sj.load_draft(out)
    out = sj.save_draft(heads, tmp_path / "s", layout="specjax")
    (out / drafts.SPECJAX_WEIGHTS).unlink()
    with pytest.raises(FileNotFoundError, match=r"s/draft\.safetensors is missing"):
        sj.load_draft(out)


def test_bad_specjax_and_fasterdecoding_files_are_refused(tmp_path, target, heads, shared):
    out = sj.save_draft(heads, tmp_path / "s", layout="specjax")
    _rewrite(out / drafts.SPECJAX_WEIGHTS, lambda t: t.update(b=t["b"][:, :1]))
    with pytest.raises(
        ValueError, match=r"tensor 'b' has shape \(3, 1, 32\), expected \(3, 2, 32\)"
    ):
        sj.load_draft(out)
    _edit_json(
        out / drafts.SPECJAX_CONFIG, config={**dataclasses.asdict(heads.config), "num_heads": 0}
    )
    with pytest.raises(
        ValueError, match=r"specjax_draft\.json: bad config \(MedusaConfig\.num_heads=0"
    ):
        sj.load_draft(out)
    out = sj.save_draft(shared, tmp_path / "fd", layout="fasterdecoding")

    def differ(t):
        t["2.1.linear.bias"] = t["2.1.linear.bias"] + 1

    _rewrite(out / drafts.FD_WEIGHTS, differ)
    with pytest.raises(ValueError, match=r"tensor '2\.1\.linear\.bias' differs from "
                       r"2\.0\.linear\.bias.*\[ResBlock\] \* 2 shares one block"):  # fmt: skip
        sj.load_draft(out)
    sj.save_hf(target, tmp_path / "hf")
    with pytest.raises(ValueError, match=r"describes no draft heads \(model_type='llama'\)"):
        sj.load_draft(tmp_path / "hf")


def test_export_refusals(tmp_path, target, heads):
    with pytest.raises(ValueError, match=r"num_layers=2 layers of a head \(\[ResBlock\] \* L\), "
                       r"but these heads have 2 independent blocks \(shared_blocks=False\)"):  # fmt: skip
        sj.save_draft(heads, tmp_path / "fd", layout="fasterdecoding")
    with pytest.raises(ValueError, match=r"layout='onnx' is not one of"):
        sj.save_draft(heads, tmp_path / "x", layout="onnx")
    with pytest.raises(ValueError, match=r"needs draft heads .*got Decoder"):
        sj.save_draft(target, tmp_path / "x")
    sj.save_hf(target, tmp_path / "hf")
    with pytest.raises(ValueError, match=r"describes a model \(model_type='llama'\); "
                       r"layout='vllm' would overwrite it"):  # fmt: skip
        sj.save_draft(heads, tmp_path / "hf", layout="vllm")
    bad = _heads(target)
    w = np.asarray(bad.w[...]).copy()
    w[0, 0, 0, 0] = np.inf
    bad.w.set_value(jnp.asarray(w))
    with pytest.raises(ValueError, match=r"heads parameter 'w' holds 1 non-finite"):
        sj.save_draft(bad, tmp_path / "inf", layout="specjax")


def test_no_bias_heads_export_to_fasterdecoding_as_zero_biases(tmp_path, target):
    plain = _heads(target, bias=False, shared_blocks=True)
    back = sj.load_draft(sj.save_draft(plain, tmp_path, layout="fasterdecoding"))
    assert back.config.bias and not np.asarray(back.b[...]).any()
    h = jnp.asarray(np.random.default_rng(4).normal(size=(4, 32)))
    np.testing.assert_array_equal(np.asarray(plain(h)), np.asarray(back(h)))


# ---------------------------------------------------------------------------- generate


def test_generate_loads_heads_from_a_path(tmp_path, target, heads):
    out = sj.save_draft(heads, tmp_path, layout="vllm")
    prompts = [[1, 2, 3, 4, 5], [7, 8]]
    spec = {"method": "medusa", "num_speculative_tokens": K}
    a = sj.generate(target, prompts, 12, speculative_config={**spec, "model": heads})
    b = sj.generate(target, prompts, 12, speculative_config={**spec, "model": str(out)})
    ar = sj.generate(target, prompts, 12)
    assert a.tokens == b.tokens == ar.tokens
    assert a.stats["accepted_by_position"] == b.stats["accepted_by_position"]


@pytest.mark.parametrize(
    "method, which, match",
    [
        ("draft_model", "heads", r"must be a specjax Model, Decoder or checkpoint directory "
                                 r"for method='draft_model', got MedusaHeads"),
        ("medusa", "decoder", r"must be Medusa heads .* for method='medusa', got Decoder"),
    ],
)  # fmt: skip
def test_wrong_model_kind_is_refused_before_compiling(target, heads, method, which, match):
    model = heads if which == "heads" else target
    before = engine.trace_count()
    with pytest.raises(ValueError, match=match):
        sj.generate(target, [[1, 2, 3]], 4, speculative_config={
            "method": method, "model": model, "num_speculative_tokens": K})  # fmt: skip
    assert engine.trace_count() == before, "a refused config reached the compiler"


def test_messages_name_the_file(tmp_path, heads):
    out = _bad_vllm(tmp_path, heads, edit=_nan)
    with pytest.raises(ValueError) as err:
        sj.load_draft(out)
    assert re.search(re.escape(str(out / "model.safetensors")), str(err.value))
