"""Parity with transformers (PyTorch, float32) for every supported family.

One tiny random model per family is built once (module-scoped fixture) with every parameter
randomised, norms and biases included, so a transposed, swapped or dropped tensor changes the
logits by O(1) rather than hiding behind HF's ones/zeros initialisation. Checked per family:
full-sequence and cached step-by-step logits (1e-4), greedy `sj.generate` token for token against
`generate`, `sj.save_hf` -> `from_pretrained`, `sj.load_model` of `save_pretrained` output (with a
tokenizer), bfloat16 checkpoints, and sharded checkpoints.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

import specjax as sj
from specjax.io.hf import export_state, load_state
from specjax.io.tokenizer import train_bpe
from specjax.models import config_from_hf

V = 300  # >= 257 so a byte-level BPE fits the vocabulary
SEQ = 12
COMMON = dict(
    vocab_size=V,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    bos_token_id=None,
    eos_token_id=None,
)
LLAMA3_ROPE = dict(
    rope_type="llama3",
    factor=8.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=16,
)
FAMILIES = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "llama3_tied": lambda: transformers.LlamaConfig(
        **COMMON, tie_word_embeddings=True, rope_scaling=LLAMA3_ROPE
    ),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),
    # head_dim * heads (64) != hidden_size (32): head_dim is read, not derived. attention_bias
    # puts a bias on o_proj too (unlike Qwen2, whose q/k/v always have one and o_proj never).
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=16, attention_bias=True),
    "mistral_window": lambda: transformers.MistralConfig(**COMMON, sliding_window=5),
    "gpt2": lambda: transformers.GPT2Config(
        vocab_size=V,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        bos_token_id=None,
        eos_token_id=None,
    ),
}


@dataclasses.dataclass
class Family:
    name: str
    ref: torch.nn.Module  # the transformers model, float32, eval mode
    decoder: sj.Decoder  # the same weights in specjax
    tokens: np.ndarray  # [B, SEQ] int32 test input
    ref_logits: np.ndarray  # [B, SEQ, V] transformers' logits on `tokens`


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random: norm scales around 1, biases and matrices O(1/sqrt(D))."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            is_scale = p.ndim == 1 and name.endswith(".weight")  # a norm's scale
            p.copy_(1.0 + 0.2 * noise if is_scale else 0.2 * noise)


def _torch_state(model) -> dict[str, np.ndarray]:
    return {k: v.detach().float().numpy() for k, v in model.state_dict().items()}


@functools.partial(jax.jit, static_argnames="graphdef")
def _forward(params, tokens, positions, cache, *, graphdef):
    out = nnx.merge(graphdef, params)(tokens, positions, cache)
    return out.logits, out.cache


def sj_forward(decoder, tokens, positions, cache):
    """One jitted forward (graphdef static): each (config, shape) compiles once."""
    graphdef, params = nnx.split(decoder)
    return _forward(params, tokens, positions, cache, graphdef=graphdef)


def full_logits(decoder, tokens) -> np.ndarray:
    """Uncached forward over the whole [B, T] sequence -> [B, T, V]."""
    B, T = tokens.shape
    cache = sj.KVCache.for_model(decoder.config, B, 32)
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    logits, _ = sj_forward(decoder, jnp.asarray(tokens, jnp.int32), positions, cache)
    return np.asarray(logits)


def ref_logits(model, tokens) -> np.ndarray:
    with torch.no_grad():
        return model(torch.as_tensor(tokens, dtype=torch.long)).logits.float().numpy()


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request) -> Family:
    torch.manual_seed(0)
    hf_config = FAMILIES[request.param]()
    ref = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    _randomize(ref, seed=1)
    decoder = sj.Decoder(config_from_hf(hf_config.to_dict()), seed=0)
    load_state(decoder, _torch_state(ref))
    tokens = np.random.default_rng(0).integers(0, V, (2, SEQ)).astype(np.int32)
    return Family(request.param, ref, decoder, tokens, ref_logits(ref, tokens))


@pytest.fixture(scope="module")
def tokenizer():
    text = "the quick brown fox jumps over the lazy dog; pack my box with five dozen jugs. "
    return train_bpe([text * 20, "hello world, hello there. " * 20], vocab_size=V)


def test_logits_are_not_trivial(family):
    """Guard: the logits vary by O(1) across the vocabulary, so 1e-4 is a real tolerance."""
    assert family.ref_logits.std(axis=-1).min() > 0.1


def test_num_params(family):
    assert family.decoder.config.num_params() == sum(p.numel() for p in family.ref.parameters())


def test_full_sequence_logits(family):
    got = full_logits(family.decoder, family.tokens)
    np.testing.assert_allclose(got, family.ref_logits, atol=1e-4, rtol=0)


def test_cached_step_by_step_logits(family):
    """A 5-token prefill then one token at a time through the cache."""
    dec, tokens = family.decoder, family.tokens
    B = tokens.shape[0]
    cache = sj.KVCache.for_model(dec.config, B, 32)
    prefix = 5
    positions = jnp.broadcast_to(jnp.arange(prefix, dtype=jnp.int32), (B, prefix))
    logits, cache = sj_forward(dec, jnp.asarray(tokens[:, :prefix]), positions, cache)
    cache = cache.advance(jnp.full((B,), prefix))
    got = [np.asarray(logits)]
    for t in range(prefix, SEQ):
        positions = jnp.full((B, 1), t, jnp.int32)
        logits, cache = sj_forward(dec, jnp.asarray(tokens[:, t : t + 1]), positions, cache)
        cache = cache.advance(jnp.ones((B,), jnp.int32))
        got.append(np.asarray(logits))
    np.testing.assert_array_equal(np.asarray(cache.lengths), [SEQ, SEQ])
    np.testing.assert_allclose(np.concatenate(got, 1), family.ref_logits, atol=1e-4, rtol=0)


def test_sliding_window_is_active():
    """Mistral's window (5 < 12 tokens) matters: ignoring it gives different logits."""
    torch.manual_seed(0)
    hf_config = FAMILIES["mistral_window"]()
    ref = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    _randomize(ref, seed=1)
    no_window = sj.Decoder(config_from_hf(hf_config.to_dict()).replace(sliding_window=None))
    load_state(no_window, _torch_state(ref))
    tokens = np.random.default_rng(0).integers(0, V, (2, SEQ)).astype(np.int32)
    diff = np.abs(full_logits(no_window, tokens) - ref_logits(ref, tokens))
    assert diff[:, :5].max() < 1e-4  # inside the window nothing changes
    assert diff[:, 5:].max() > 1e-2


def test_greedy_generate_matches_transformers(family):
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, V, n).tolist() for n in (5, 9, 3, 12)]
    out = sj.generate(family.decoder, prompts, max_new_tokens=20, stop_token_ids=[])
    for prompt, got in zip(prompts, out.tokens, strict=True):
        ids = torch.tensor([prompt])
        with torch.no_grad():
            ref = family.ref.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=20,
                do_sample=False,
                pad_token_id=0,
            )
        assert got == ref[0, len(prompt) :].tolist()


def test_save_hf_loads_in_transformers(family, tmp_path):
    sj.save_hf(family.decoder, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == family.ref.config.model_type
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(family.ref)
    np.testing.assert_allclose(
        ref_logits(loaded, family.tokens), family.ref_logits, atol=1e-5, rtol=0
    )
    # And back: specjax reads its own export with the same config and weights.
    again = sj.load_model(tmp_path, load_tokenizer=False)
    assert again.config == family.decoder.config
    state = export_state(again.module)
    for name, array in export_state(family.decoder).items():
        np.testing.assert_array_equal(state[name], array, err_msg=name)


def test_load_model_from_save_pretrained(family, tokenizer, tmp_path):
    family.ref.save_pretrained(tmp_path)
    tokenizer.save(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    model = sj.load_model(tmp_path)
    assert model.tokenizer is not None and model.tokenizer.vocab_size == tokenizer.vocab_size
    assert model.config.replace(eos_token_ids=()) == family.decoder.config
    got = full_logits(model.module, family.tokens)
    np.testing.assert_allclose(got, family.ref_logits, atol=1e-4, rtol=0)


def test_bfloat16_checkpoint(family, tmp_path):
    """A bf16 checkpoint loads (as float32 by default) exactly as its rounded weights."""
    copy.deepcopy(family.ref).to(torch.bfloat16).save_pretrained(tmp_path)
    rounded = copy.deepcopy(family.ref)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    model = sj.load_model(tmp_path, load_tokenizer=False)
    state = export_state(model.module)
    for name, array in _torch_state(rounded).items():
        if name in state:
            assert state[name].dtype == np.float32
            np.testing.assert_array_equal(state[name], array, err_msg=name)
    got = full_logits(model.module, family.tokens)
    np.testing.assert_allclose(got, ref_logits(rounded, family.tokens), atol=1e-4, rtol=0)
    # The rounding is real: the full-precision model differs by more than the tolerance.
    assert np.abs(got - family.ref_logits).max() > 1e-4


def test_sharded_checkpoint(family, tmp_path):
    family.ref.save_pretrained(tmp_path, max_shard_size="40KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1 and not (tmp_path / "model.safetensors").exists()
    model = sj.load_model(tmp_path, load_tokenizer=False)
    got = full_logits(model.module, family.tokens)
    np.testing.assert_allclose(got, family.ref_logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    "hf_config",
    [
        # transformers ignores attention_bias for these two: Qwen2 always has q/k/v biases,
        # Mistral never has any. The imported config must build the tensors transformers has.
        lambda: transformers.Qwen2Config(**COMMON, attention_bias=False),
        lambda: transformers.MistralConfig(**COMMON, attention_bias=True),
        lambda: transformers.LlamaConfig(**COMMON, attention_bias=True),
    ],
    ids=["qwen2_bias_false", "mistral_bias_true", "llama_bias_true"],
)
def test_ignored_attention_bias_builds_transformers_tensors(hf_config):
    hf_config = hf_config()
    ref = transformers.AutoModelForCausalLM.from_config(hf_config)
    config = config_from_hf(hf_config.to_dict())
    assert set(sj.models.hf_param_names(config)) == set(ref.state_dict())
    assert config.num_params() == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("model_type,bias", [("qwen2", False), ("mistral", True)])
def test_impossible_attention_bias_is_refused(model_type, bias):
    with pytest.raises(ValueError, match=f"attention_bias={bias}.*{model_type}"):
        sj.ModelConfig(model_type=model_type, attention_bias=bias)
    assert sj.ModelConfig(model_type=model_type).attention_bias is (not bias)


def test_feature_taps_and_last_hidden_match_transformers(family):
    """What draft heads read: the residual stream entering layer i is transformers'
    `hidden_states[i]`, and `last_hidden` (after the final norm, the LM head's input) is its
    `last_hidden_state` (EAGLE-1 and Medusa read it; EAGLE-3 reads taps)."""
    dec, tokens = family.decoder, family.tokens
    L = dec.config.num_layers
    taps = tuple(sorted({0, L // 2, L - 1}))
    B, T = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    out = dec(jnp.asarray(tokens), positions, sj.KVCache.for_model(dec.config, B, 32),
              tap_layers=taps)  # fmt: skip
    with torch.no_grad():
        ref = family.ref(torch.as_tensor(tokens, dtype=torch.long), output_hidden_states=True)
    hidden = [h.float().numpy() for h in ref.hidden_states]  # L + 1: embeddings .. final norm
    for i, tap in zip(taps, out.taps, strict=True):
        np.testing.assert_allclose(np.asarray(tap), hidden[i], atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.asarray(out.last_hidden), hidden[-1], atol=1e-4, rtol=0)
    base = family.ref.transformer if dec.config.model_type == "gpt2" else family.ref.model
    with torch.no_grad():
        last = base(torch.as_tensor(tokens, dtype=torch.long)).last_hidden_state.float().numpy()
    np.testing.assert_allclose(np.asarray(out.last_hidden), last, atol=1e-4, rtol=0)
