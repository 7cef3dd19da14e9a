"""Forward parity of every exported drafter with an independent torch transcription of the code
that serves or trains it.

Each drafter is written with `save_draft` in every external layout it has and read back into a
float64 torch module by that format's own tensor names and config fields, as the reading code
does; the same target features, token ids and positions go into both sides; hidden states and
logits must agree within 1e-5 of their scale and the greedy drafting chain must be the same
tokens. Every case has a negative control: the torch side with one documented detail changed
must differ by more than 1e-2, so the comparison can tell the details apart.

Sources transcribed (the math only):

- EAGLE-3, vllm-project/vllm `vllm/model_executor/models/llama_eagle3.py`: fc over the
  concatenated low/mid/high taps (no bias); one layer whose q/k/v input is
  cat(input_layernorm(embeds), hidden_norm(hidden)) (2H wide); residual = the hidden before
  hidden_norm unless `norm_before_residual`; post-attention add-norm, MLP, final add-norm giving
  (normed, hidden_prenorm); `lm_head` over `draft_vocab_size`; `d2t` (renamed
  draft_id_to_target_id, target id = i + d2t[i]) scatters the logits into the target vocabulary,
  -inf elsewhere; `midlayer.` read as `layers.0.`, `t2d` skipped. Speculators configs
  (`vllm/transformers_utils/configs/speculators/algos.py`): the layer under
  `transformer_layer_config`, `norm_before_residual` defaulting to true. Drafting steps
  (`vllm/v1/spec_decode/eagle.py`): fc applied to the target's taps only; each later step
  feeds back the argmax target id and `hidden_prenorm` at position + 1, attending to every
  earlier drafter entry.
- EAGLE-1, SafeAILab/EAGLE `eagle/model/cnets1.py` (`Model.forward`, `LlamaDecoderLayer` with
  index 0 having no input_layernorm, the fc bias per config `bias`, default true in
  `eagle/model/ea_model.py`) and vllm `vllm/model_executor/models/llama_eagle.py` (fc without
  bias, input_layernorm an Identity, output = hidden + residual, no final norm); the logits
  are the target's LM head; `topK_generate` with top_k = 1 is the same chain.
- Medusa, FasterDecoding/Medusa `medusa/model/medusa_model.py` (`ResBlock`: x + SiLU(Linear(x));
  each head `nn.Sequential(*([ResBlock] * L), Linear(D, V, bias=False))`, loaded with
  `load_state_dict` from `medusa_lm_head.safetensors`) and vllm
  `vllm/model_executor/models/medusa.py` (`ResidualBlock` of L Linear layers with bias per
  `medusa_fc_bias`, `lm_heads.{h}` or one `lm_head` under `original_lm_head`).

The target's embedding and LM head come from its own `save_hf` export (what vLLM shares with
the drafter); its taps are the residual stream entering the layers the head's config.json names.
"""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from safetensors.numpy import load_file, save_file

import specjax as sj
from specjax.cache import KVCache
from specjax.heads.eagle import EagleHead, draft_vocabulary

V, VD, D, L = 96, 40, 32, 4  # target vocab, EAGLE-3 draft vocab, hidden size, target layers
B, T, STEPS = 2, 7, 4  # rows, prompt entries, drafted tokens per chain
TOL, MARGIN = 1e-5, 1e-2  # parity bound; what a negative control must exceed
TARGET = sj.ModelConfig(
    model_type="llama",
    vocab_size=V,
    hidden_size=D,
    num_layers=L,
    num_heads=2,
    num_kv_heads=1,
    head_dim=16,
    intermediate_size=64,
    max_position_embeddings=64,
)
F64 = torch.float64


def _rel(got, want) -> float:
    """max |got - want| over the finite entries, relative to max |want|; the -inf entries
    (ids outside a draft vocabulary) must be the same."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    got, want = got[finite], want[finite]
    return float(np.abs(got - want).max() / np.abs(want).max())


def _random(make, seed):
    """The module `make()` builds (abstractly: no initialisation runs) holding distinct,
    O(1)-activation values in every float array (kernels ~ 1/sqrt(fan-in), norms near 1, an
    embedding of unit scale), so a swapped, transposed or dropped tensor shows in the outputs.
    Integer and boolean arrays (EAGLE-3's d2t, t2d) are left for the caller to set."""
    module = nnx.eval_shape(make)
    rng = np.random.default_rng(seed)
    for path, var in nnx.to_flat_state(nnx.state(module)):
        value = var.get_value()  # abstract: shape and dtype
        if not jnp.issubdtype(value.dtype, jnp.floating):
            continue
        name = str(path[-1])
        if name == "weight":  # RMSNorm
            new = 1.0 + rng.normal(0, 0.2, value.shape)
        elif name in ("bias", "b"):
            new = rng.normal(0, 0.3, value.shape)
        elif name == "embedding":
            new = rng.normal(0, 1.0, value.shape)
        else:  # a kernel [.., in, out]
            new = rng.normal(0, value.shape[-2] ** -0.5, value.shape)
        var.set_value(jnp.asarray(np.asarray(new, value.dtype)))  # no on-device cast
    return module


# --------------------------------------------------------------------- target and its features


@pytest.fixture(scope="module")
def target():
    return _random(lambda: sj.Decoder(TARGET, seed=0), seed=0)


@pytest.fixture(scope="module")
def target_tensors(target, tmp_path_factory):
    """The target's HF export as torch float64 tensors (the embedding and LM head vLLM shares)."""
    out = sj.save_hf(target, tmp_path_factory.mktemp("target"))
    tensors = load_file(str(out / "model.safetensors"))
    return {name: torch.from_numpy(value).to(F64) for name, value in tensors.items()}


@pytest.fixture(scope="module")
def features(target):
    """One target forward over x_0..x_{T-1}: the drafter's inputs.

    tokens [B, T]: x_1..x_T (x_T the target's greedy next token), entry t's token;
    last_hidden [B, T, D] post-norm; streams: the residual stream entering each layer.
    """
    prompt = np.random.default_rng(1).integers(0, V, (B, T)).astype(np.int32)
    graphdef, state = nnx.split(target)

    @jax.jit  # one program instead of many eager ones
    def forward(state, tokens):
        positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        cache = KVCache.for_model(TARGET, B, T)
        out = nnx.merge(graphdef, state)(tokens, positions, cache, tap_layers=tuple(range(L)))
        return jnp.argmax(out.logits[:, -1], axis=-1), out.last_hidden, out.taps

    root, last_hidden, streams = forward(state, jnp.asarray(prompt))
    return {
        "tokens": np.concatenate([prompt[:, 1:], np.asarray(root, np.int32)[:, None]], axis=1),
        "last_hidden": np.array(last_hidden),
        "streams": [np.array(s) for s in streams],
    }


# ------------------------------------------------------------------ specjax's side of a chain


def _chain_steps(head: EagleHead, target, tokens, last_hidden, streams) -> dict:
    taps = tuple(streams[i] for i in head.config.tap_layers)
    feature = head.target_feature(last_hidden, taps)  # [B, T, H]
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
    cache = head.init_cache(B, T + STEPS)
    h, logits, cache = head(target, tokens, feature, positions, cache, causal)
    cache = cache.replace(lengths=jnp.full((B,), T, jnp.int32))
    out = {"h": [], "draft": [], "full": [], "chain": []}
    for k in range(STEPS):
        out["h"].append(h)  # [B, T or 1, H]
        out["draft"].append(head.draft_logits(target, h))  # [B, T or 1, Vd]
        out["full"].append(logits)  # [B, T or 1, V]
        tok = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)  # [B] target ids
        out["chain"].append(tok)
        if k == STEPS - 1:
            break
        pos = jnp.full((B, 1), T + k, jnp.int32)
        h, logits, cache = head(target, tok[:, None], h[:, -1:], pos, cache,
                                jnp.ones((B, 1, 1), bool))  # fmt: skip
        cache = cache.advance(jnp.ones((B,), jnp.int32))
    out["chain"] = jnp.stack(out["chain"], axis=1)  # [B, STEPS]
    return out


def _specjax_chain(head: EagleHead, target, features) -> dict:
    """Drafter entries 0..T-1 (x_{t+1} with the target's feature of t, position t), then
    STEPS - 1 entries, each the previous argmax with the previous output h at position T+k-1,
    through `EagleHead.__call__` and its one-layer KVCache, as the eagle proposer drives it.

    Returns per call: h (pre-norm), draft-vocabulary logits, target-vocabulary logits; and the
    chain [B, STEPS] of target ids.
    """
    (head_def, head_state), (target_def, target_state) = nnx.split(head), nnx.split(target)

    @jax.jit  # one program instead of many eager ones
    def run(head_state, target_state, tokens, last_hidden, streams):
        merged = nnx.merge(head_def, head_state), nnx.merge(target_def, target_state)
        return _chain_steps(*merged, tokens, last_hidden, streams)

    out = run(head_state, target_state, features["tokens"], features["last_hidden"],
              features["streams"])  # fmt: skip
    return jax.tree.map(np.asarray, out)


# ------------------------------------------------------------ torch reference: EAGLE-1 and -3


def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, positions, theta):
    """Neox-style (rotate-half) RoPE, HF Llama's. x [B, T, N, Hd]; positions [B, T]."""
    hd = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=F64) / hd)  # [Hd/2]
    freqs = positions.to(F64)[..., None] * inv  # [B, T, Hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)[:, :, None]  # [B, T, 1, Hd]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


class TorchEagle:
    """An EAGLE drafter directory read and run as vLLM (and, for EAGLE-1, the reference) do.

    Controls (each one documented detail changed, for the negative controls):
      swap_halves: EAGLE-3 q/k/v input cat(hidden_norm(h), input_norm(e)); EAGLE-1 fc input
        cat(h, e).
      norm_before_residual: override the config's (EAGLE-3).
      feed_normed: feed the normed output back instead of hidden_prenorm (EAGLE-3).
      input_norm: EAGLE-1 layer with a standard (unit-weight) input_layernorm.
      drop_fc_bias: EAGLE-1 read as vLLM's loader would read a reference head (fc.bias skipped).
    """

    def __init__(self, directory, method, target_tensors, *, swap_halves=False,
                 norm_before_residual=None, feed_normed=False, input_norm=False,
                 drop_fc_bias=False):  # fmt: skip
        config = json.loads((directory / "config.json").read_text())
        layer = config.get("transformer_layer_config", config)  # speculators nest the layer
        assert layer["hidden_act"] == "silu" and layer.get("rope_scaling") is None
        assert not layer.get("attention_bias", False) and not config.get("norm_before_fc")
        self.method, self.V = method, layer["vocab_size"]
        self.N, self.K = layer["num_attention_heads"], layer["num_key_value_heads"]
        self.Hd = layer.get("head_dim") or layer["hidden_size"] // self.N
        self.eps, self.theta = layer["rms_norm_eps"], layer.get("rope_theta", 10000.0)
        self.embed = target_tensors["model.embed_tokens.weight"]  # shared with the target
        self.swap, self.feed_normed, self.input_norm = swap_halves, feed_normed, input_norm
        tensors = load_file(str(directory / "model.safetensors"))
        if method == "eagle3":
            if config.get("speculators_model_type") == "eagle3":
                default_nbr = True  # algos.py: config_dict.get("norm_before_residual", True)
            else:
                default_nbr = False  # llama_eagle3.py: getattr(config, ..., False)
            self.nbr = config.get("norm_before_residual", default_nbr)
            if norm_before_residual is not None:
                self.nbr = norm_before_residual
            self.Vd = config.get("draft_vocab_size") or self.V
            self.taps = sorted(set(config["eagle_aux_hidden_state_layer_ids"]))
            renamed = {}
            for name, value in tensors.items():
                if name == "t2d":
                    continue
                name = "draft_id_to_target_id" if name == "d2t" else name
                renamed[name.replace("midlayer.", "layers.0.")] = value
            tensors = renamed
            tensors.setdefault("draft_id_to_target_id", np.zeros(self.Vd, np.int64))
        else:
            self.lm_head = target_tensors["lm_head.weight"]  # the target's head, shared
            tensors.pop("embed_tokens.weight", None)  # a reference head's copy: the target's
            # the reference (architectures LlamaForCausalLM) reads `bias`, default true;
            # vLLM's fc has none
            reference = config["architectures"] == ["LlamaForCausalLM"]
            self.fc_bias = reference and config.get("bias", True) and not drop_fc_bias
            if drop_fc_bias:
                tensors.pop("fc.bias")
        parts = [f"self_attn.{p}_proj" for p in "qkvo"]
        parts += [f"mlp.{p}_proj" for p in ("gate", "up", "down")] + ["post_attention_layernorm"]
        want = {"fc.weight", *(f"layers.0.{n}.weight" for n in parts)}
        if method == "eagle3":
            want |= {"layers.0.input_layernorm.weight", "layers.0.hidden_norm.weight",
                     "norm.weight", "lm_head.weight", "draft_id_to_target_id"}  # fmt: skip
        elif self.fc_bias:
            want.add("fc.bias")
        assert set(tensors) == want, sorted(set(tensors) ^ want)  # every tensor read, none left
        self.w = {k: torch.from_numpy(np.asarray(v)) for k, v in tensors.items()}
        self.w = {k: v if k == "draft_id_to_target_id" else v.to(F64) for k, v in self.w.items()}

    def p(self, name):
        return self.w[f"layers.0.{name}.weight"]

    def combine(self, aux):
        """EAGLE-3's fc over the target's taps (in sorted layer order); EAGLE-1: identity."""
        return aux[-1] if self.method == "eagle" else torch.cat(aux, dim=-1) @ self.w["fc.weight"].T

    def forward(self, ids, positions, hidden, kv):
        """One drafter call over T entries; kv holds (k, v) of every earlier entry.

        Returns (normed output for the LM head, hidden fed to the next step, kv).
        """
        e = self.embed[ids]  # [B, T, H]
        if self.method == "eagle3":
            emb = _rms(e, self.p("input_layernorm"), self.eps)
            normed = _rms(hidden, self.p("hidden_norm"), self.eps)
            residual = normed if self.nbr else hidden
            x = torch.cat([normed, emb] if self.swap else [emb, normed], dim=-1)  # [B, T, 2H]
        else:
            pair = [hidden, e] if self.swap else [e, hidden]
            x = torch.cat(pair, dim=-1) @ self.w["fc.weight"].T  # [B, T, H]
            if self.fc_bias:
                x = x + self.w["fc.bias"]
            residual = x
            if self.input_norm:
                x = _rms(x, torch.ones(x.shape[-1], dtype=F64), self.eps)
        attn, kv = self._attention(x, positions, kv)
        h = residual + attn
        h = h + self._mlp(_rms(h, self.p("post_attention_layernorm"), self.eps))
        if self.method == "eagle":
            return h, h, kv
        normed = _rms(h, self.w["norm.weight"], self.eps)
        return normed, normed if self.feed_normed else h, kv

    def _attention(self, x, positions, kv):
        Bx, Tx, _ = x.shape
        q = (x @ self.p("self_attn.q_proj").T).view(Bx, Tx, self.N, self.Hd)
        k = (x @ self.p("self_attn.k_proj").T).view(Bx, Tx, self.K, self.Hd)
        v = (x @ self.p("self_attn.v_proj").T).view(Bx, Tx, self.K, self.Hd)
        q, k = _rope(q, positions, self.theta), _rope(k, positions, self.theta)
        if kv is not None:
            k, v = torch.cat([kv[0], k], dim=1), torch.cat([kv[1], v], dim=1)  # [B, S, K, Hd]
        S = k.shape[1]
        visible = torch.arange(S)[None, :] <= (S - Tx) + torch.arange(Tx)[:, None]  # [T, S]
        kr = k.repeat_interleave(self.N // self.K, dim=2)  # [B, S, N, Hd]
        vr = v.repeat_interleave(self.N // self.K, dim=2)
        scores = torch.einsum("btnh,bsnh->bnts", q, kr) / self.Hd**0.5
        probs = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
        out = torch.einsum("bnts,bsnh->btnh", probs, vr).reshape(Bx, Tx, self.N * self.Hd)
        return out @ self.p("self_attn.o_proj").T, (k, v)

    def _mlp(self, x):
        gate, up = x @ self.p("mlp.gate_proj").T, x @ self.p("mlp.up_proj").T
        return (torch.nn.functional.silu(gate) * up) @ self.p("mlp.down_proj").T

    def logits(self, normed):
        """(draft-vocabulary logits, target-vocabulary logits: -inf outside the draft ids)."""
        if self.method == "eagle":
            out = normed @ self.lm_head.T
            return out, out
        draft = normed @ self.w["lm_head.weight"].T  # [.., Vd]
        ids = torch.arange(self.Vd) + self.w["draft_id_to_target_id"]
        full = torch.full((*draft.shape[:-1], self.V), float("-inf"), dtype=F64)
        full[..., ids] = draft
        return draft, full

    def chain(self, features):
        """vLLM's propose loop (top-1 chain) over the same inputs as `_specjax_chain`."""
        if self.method == "eagle":
            aux = [torch.from_numpy(features["last_hidden"]).to(F64)]
        else:
            aux = [torch.from_numpy(features["streams"][i]).to(F64) for i in self.taps]
        hidden = self.combine(aux)  # [B, T, H]
        ids = torch.from_numpy(features["tokens"]).long()
        positions = torch.arange(T)[None].expand(B, T)
        normed, hidden, kv = self.forward(ids, positions, hidden, None)
        out = {"h": [], "draft": [], "full": [], "chain": []}
        for k in range(STEPS):
            draft, full = self.logits(normed)
            out["h"].append(hidden.numpy())
            out["draft"].append(draft.numpy())
            out["full"].append(full.numpy())
            tok = full[:, -1].argmax(dim=-1)  # [B] target ids
            out["chain"].append(tok.numpy())
            if k == STEPS - 1:
                break
            pos = torch.full((B, 1), T + k)
            normed, hidden, kv = self.forward(tok[:, None], pos, hidden[:, -1:], kv)
        out["chain"] = np.stack(out["chain"], axis=1)
        return out


def _chain_diff(got, want) -> dict:
    """Worst relative difference over the steps, per output."""
    pairs = {key: zip(got[key], want[key], strict=True) for key in ("h", "draft", "full")}
    return {key: max(_rel(g, w) for g, w in pair) for key, pair in pairs.items()}


def _assert_parity(spec, ref):
    diff = _chain_diff(spec, ref)
    assert max(diff.values()) < TOL, diff
    np.testing.assert_array_equal(spec["chain"], ref["chain"])
    # Each argmax wins by far more than the two sides differ: the chain's equality is no luck
    # of rounding.
    for got, want in zip(spec["full"], ref["full"], strict=True):
        last = np.where(np.isfinite(want[:, -1]), want[:, -1], -1e9)  # [B, V]
        top2 = np.sort(last, axis=-1)[:, -2:]
        finite = np.isfinite(want)
        err = np.abs(got[finite] - want[finite]).max()
        assert (top2[:, 1] - top2[:, 0]).min() > 100 * err
    return diff


# ------------------------------------------------------------------------------- EAGLE heads


def _eagle_head(target, method, seed, **options):
    make = lambda: EagleHead.for_target(target, method, base_model="org/tiny-target", **options)
    head = _random(make, seed)
    if method == "eagle3":
        counts = np.random.default_rng(seed).integers(0, 1000, V)
        d2t, t2d = draft_vocabulary(counts, VD)  # a scattered draft vocabulary
        head.d2t.set_value(jnp.asarray(d2t, head.d2t.get_value().dtype))
        head.t2d.set_value(jnp.asarray(t2d))
    return head


@pytest.fixture(scope="module")
def eagle3(target, features):
    head = _eagle_head(target, "eagle3", seed=5, draft_vocab_size=VD)
    assert head.config.tap_layers == (1, 2, 3)
    return head, _specjax_chain(head, target, features)


@pytest.fixture(scope="module")
def eagle1(target, features):
    head = _eagle_head(target, "eagle", seed=4)
    return head, _specjax_chain(head, target, features)


@pytest.fixture(scope="module")
def eagle3_dirs(eagle3, tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle3")
    return {layout: sj.save_draft(eagle3[0], root / layout, layout=layout)
            for layout in ("vllm", "speculators")}  # fmt: skip


@pytest.fixture(scope="module")
def eagle1_dir(eagle1, tmp_path_factory):
    return sj.save_draft(eagle1[0], tmp_path_factory.mktemp("eagle1") / "vllm", layout="vllm")


@pytest.mark.parametrize("layout", ["vllm", "speculators"])
def test_eagle3_matches_vllm(eagle3, eagle3_dirs, target_tensors, features, layout):
    _, spec = eagle3
    ref = TorchEagle(eagle3_dirs[layout], "eagle3", target_tensors)
    assert ref.taps == [1, 2, 3] and ref.Vd == VD and ref.nbr is False
    _assert_parity(spec, ref.chain(features))
    assert len(set(spec["chain"].ravel().tolist())) > 1  # a chain that moves


EAGLE3_CONTROLS = {
    "attention input halves swapped": dict(swap_halves=True),
    "norm_before_residual flipped": dict(norm_before_residual=True),
    "post-norm hidden fed back": dict(feed_normed=True),
}


@pytest.mark.parametrize("control", list(EAGLE3_CONTROLS))
def test_eagle3_negative_controls(eagle3, eagle3_dirs, target_tensors, features, control):
    _, spec = eagle3
    ref = TorchEagle(eagle3_dirs["vllm"], "eagle3", target_tensors, **EAGLE3_CONTROLS[control])
    out = ref.chain(features)
    diff = _chain_diff(spec, out)
    if control == "post-norm hidden fed back":  # the same first call, then apart
        assert _rel(spec["draft"][0], out["draft"][0]) < TOL
    assert diff["draft"] > MARGIN and diff["h"] > MARGIN, diff


def test_speculators_norm_before_residual_default_differs(
    eagle3, eagle3_dirs, tmp_path, target_tensors, features
):
    # The field is written because vLLM's speculators reader defaults it to true.
    out = tmp_path / "spec"
    shutil.copytree(eagle3_dirs["speculators"], out)
    config = json.loads((out / "config.json").read_text())
    del config["norm_before_residual"]
    (out / "config.json").write_text(json.dumps(config))
    ref = TorchEagle(out, "eagle3", target_tensors)
    assert ref.nbr is True
    assert _chain_diff(eagle3[1], ref.chain(features))["h"] > MARGIN


def test_eagle1_matches_vllm(eagle1, eagle1_dir, target_tensors, features):
    _, spec = eagle1
    ref = TorchEagle(eagle1_dir, "eagle", target_tensors)
    assert not ref.fc_bias
    _assert_parity(spec, ref.chain(features))
    assert len(set(spec["chain"].ravel().tolist())) > 1


@pytest.fixture(scope="module")
def eagle1_reference_dir(eagle1_dir, target_tensors, tmp_path_factory):
    """SafeAILab/EAGLE's own EAGLE-1 layout: architectures LlamaForCausalLM, `bias` true with
    a trained fc.bias, the head's copy of the target's embedding."""
    out = tmp_path_factory.mktemp("eagle1_ref") / "ref"
    shutil.copytree(eagle1_dir, out)
    tensors = load_file(str(out / "model.safetensors"))
    tensors["fc.bias"] = np.random.default_rng(5).normal(0, 0.5, D).astype(np.float32)
    tensors["embed_tokens.weight"] = target_tensors["model.embed_tokens.weight"].float().numpy()
    save_file(tensors, str(out / "model.safetensors"))
    config = json.loads((out / "config.json").read_text())
    config.update(architectures=["LlamaForCausalLM"], bias=True)
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_eagle1_reference_layout_imports_with_its_bias(
    eagle1_reference_dir, target, target_tensors, features
):
    head = sj.load_draft(eagle1_reference_dir, target=target)
    assert head.config.fc_bias
    ref = TorchEagle(eagle1_reference_dir, "eagle", target_tensors)
    assert ref.fc_bias
    spec = _specjax_chain(head, target, features)
    _assert_parity(spec, ref.chain(features))
    # control: the bias dropped, as vLLM's eagle loader would drop it
    dropped = TorchEagle(eagle1_reference_dir, "eagle", target_tensors, drop_fc_bias=True)
    assert _chain_diff(spec, dropped.chain(features))["h"] > MARGIN


EAGLE1_CONTROLS = {
    "fc input order swapped": dict(swap_halves=True),
    "input_layernorm applied": dict(input_norm=True),
}


@pytest.mark.parametrize("control", list(EAGLE1_CONTROLS))
def test_eagle1_negative_controls(eagle1, eagle1_dir, target_tensors, features, control):
    ref = TorchEagle(eagle1_dir, "eagle", target_tensors, **EAGLE1_CONTROLS[control])
    diff = _chain_diff(eagle1[1], ref.chain(features))
    assert diff["h"] > MARGIN and diff["full"] > MARGIN, diff


# ------------------------------------------------------------------------------- Medusa heads

K_HEADS, L_BLOCKS = 3, 2


class ResBlock(torch.nn.Module):
    """FasterDecoding's block: x + SiLU(Linear(x)) (bias always)."""

    def __init__(self, hidden, residual=True):
        super().__init__()
        self.linear = torch.nn.Linear(hidden, hidden, dtype=F64)
        self.residual = residual

    def forward(self, x):
        y = torch.nn.functional.silu(self.linear(x))
        return x + y if self.residual else y


def _fasterdecoding(directory, residual=True):
    """`medusa_head` as MedusaModel builds it (`[ResBlock] * L`: one block per head, shared),
    loaded by `load_state_dict` from the safetensors file."""
    config = json.loads((directory / "config.json").read_text())
    n, layers = config["medusa_num_heads"], config["medusa_num_layers"]
    heads = torch.nn.ModuleList(
        torch.nn.Sequential(
            *([ResBlock(D, residual)] * layers), torch.nn.Linear(D, V, bias=False, dtype=F64)
        )
        for _ in range(n)
    )
    tensors = load_file(str(directory / "medusa_lm_head.safetensors"))
    heads.load_state_dict({k: torch.from_numpy(v).to(F64) for k, v in tensors.items()}, strict=True)
    return lambda h: torch.stack([head(h) for head in heads], dim=-2)  # [.., K, V]


class VllmMedusa(torch.nn.Module):
    """vLLM's Medusa: `blocks.{h}.layers.{l}` (bias per medusa_fc_bias), `lm_heads.{h}` or one
    `lm_head` (original_lm_head)."""

    def __init__(self, config, residual=True, fc_bias=None):
        super().__init__()
        bias = config.get("medusa_fc_bias", False) if fc_bias is None else fc_bias
        n, layers = config["num_heads"], config["num_hidden_layers"]
        self.blocks = torch.nn.ModuleList(torch.nn.Module() for _ in range(n))
        for block in self.blocks:
            block.layers = torch.nn.ModuleList(
                torch.nn.Linear(D, D, bias=bias, dtype=F64) for _ in range(layers)
            )
        self.shared = config.get("original_lm_head", False)
        if self.shared:
            self.lm_head = torch.nn.Linear(D, V, bias=False, dtype=F64)
        else:
            self.lm_heads = torch.nn.ModuleList(
                torch.nn.Linear(D, V, bias=False, dtype=F64) for _ in range(n)
            )
        self.residual = residual

    def forward(self, h):
        out = []
        for i, block in enumerate(self.blocks):
            x = h
            for layer in block.layers:
                y = torch.nn.functional.silu(layer(x))
                x = x + y if self.residual else y
            out.append((self.lm_head if self.shared else self.lm_heads[i])(x))
        return torch.stack(out, dim=-2)  # [.., K, V]


def _vllm_medusa(directory, residual=True, fc_bias=None):
    """Loaded as vLLM's load_weights does: names it has a parameter for (medusa_heads.
    stripped; lm_heads.0 as lm_head under original_lm_head); the rest would be dropped, so here
    they must not exist."""
    config = json.loads((directory / "config.json").read_text())
    model = VllmMedusa(config, residual, fc_bias)
    params = dict(model.named_parameters())
    loaded = {}
    for name, value in load_file(str(directory / "model.safetensors")).items():
        name = name.replace("medusa_heads.", "")
        if config.get("original_lm_head") and name == "lm_heads.0.weight":
            name = "lm_head.weight"
        if name in params:
            loaded[name] = torch.from_numpy(value).to(F64)
        else:
            assert fc_bias is False and name.endswith(".bias"), f"vLLM would drop {name!r}"
    model.load_state_dict(loaded, strict=True)
    return model


MEDUSA_HEADS = {  # MedusaConfig options -> the layouts they export to
    "independent blocks": (dict(), ("vllm",)),
    "shared lm_head, no bias": (dict(bias=False, shared_lm_head=True), ("vllm",)),
    "shared blocks": (dict(shared_blocks=True), ("vllm", "fasterdecoding")),
}
MEDUSA_CASES = [
    f"{kind}, {layout}" for kind, (_, layouts) in MEDUSA_HEADS.items() for layout in layouts
]


@pytest.fixture(scope="module")
def medusa(target, features, tmp_path_factory):
    """Per case: (heads' directory, layout, specjax's logits [B, T, K, V])."""
    h = jnp.asarray(features["last_hidden"])
    out = {}
    for i, (kind, (options, layouts)) in enumerate(MEDUSA_HEADS.items()):
        make = lambda options=options: sj.MedusaHeads.for_target(
            target, num_heads=K_HEADS, num_layers=L_BLOCKS, base_model="org/tiny-target",
            **options)  # fmt: skip
        heads = _random(make, seed=10 + i)
        graphdef, state = nnx.split(heads)
        logits = jax.jit(lambda state, h, g=graphdef: nnx.merge(g, state)(h))(state, h)
        for layout in layouts:
            directory = tmp_path_factory.mktemp("medusa") / layout
            sj.save_draft(heads, directory, layout=layout)
            out[f"{kind}, {layout}"] = (directory, layout, np.asarray(logits))  # [B, T, K, V]
    return out


def _medusa_ref(directory, layout, **controls):
    read = _fasterdecoding if layout == "fasterdecoding" else _vllm_medusa
    return read(directory, **controls)


@pytest.mark.parametrize("case", MEDUSA_CASES)
def test_medusa_matches_reference(medusa, features, case):
    directory, layout, spec = medusa[case]
    with torch.no_grad():
        ref = _medusa_ref(directory, layout)(torch.from_numpy(features["last_hidden"]).to(F64))
    assert _rel(spec, ref.numpy()) < TOL
    # vLLM drafts each head's top-1 (Medusa's tree starts from the same ranking)
    np.testing.assert_array_equal(spec.argmax(-1), ref.numpy().argmax(-1))


MEDUSA_CONTROLS = {
    "residual dropped, fasterdecoding": ("shared blocks, fasterdecoding", dict(residual=False)),
    "residual dropped, vllm": ("independent blocks, vllm", dict(residual=False)),
    # vLLM builds the biases only under medusa_fc_bias (which the export writes)
    "medusa_fc_bias ignored, vllm": ("independent blocks, vllm", dict(fc_bias=False)),
}


@pytest.mark.parametrize("control", list(MEDUSA_CONTROLS))
def test_medusa_negative_controls(medusa, features, control):
    case, controls = MEDUSA_CONTROLS[control]
    directory, layout, spec = medusa[case]
    with torch.no_grad():
        ref = _medusa_ref(directory, layout, **controls)(
            torch.from_numpy(features["last_hidden"]).to(F64)
        )
    assert _rel(spec, ref.numpy()) > MARGIN
