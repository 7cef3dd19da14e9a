"""The head trainer: heads learn, a SIGKILLed run resumes exactly, self-distillation rows are
the target's own generations, precomputed features equal on-the-fly ones, Medusa-2 writes a
target and heads that both load, and bad configs are refused by name.

The corpus is synthetic and learnable in seconds: lines of the alphabet in cyclic order from
a random letter ("q r s t ..."), so the token at t + 2 and t + 3 is a function of the token
at t. A tiny LM is trained on it once per module (~20 s); head runs take seconds each.
"""

import json
import shutil
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from flax import nnx

import specjax as sj
from configs import train_lm as train_lm_configs
from configs import train_medusa
from specjax.heads.medusa import target_lm_head
from specjax.io.drafts import medusa_arrays
from specjax.train import heads as th
from specjax.train import lm
from specjax.train.metrics import read_jsonl
from specjax.train.rows import token_counts

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(0)
    letters = string.ascii_lowercase
    lines = []
    for _ in range(400):
        s = int(rng.integers(26))
        lines.append(" ".join(letters[(s + j) % 26] for j in range(40)))
    path = tmp_path_factory.mktemp("corpus") / "cycles.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def target_dir(corpus, tmp_path_factory):
    config = train_lm_configs.get_config("tiny")
    config.data.update(source=str(corpus), sample_by="line", max_chars=None, eval_fraction=0.1)
    config.tokenizer.vocab_size = 300
    config.train.update(num_steps=60, learning_rate=1e-2, progress=False)
    workdir = tmp_path_factory.mktemp("target")
    lm.train_lm(config, workdir)
    return workdir


def heads_config(corpus, target_dir, **train):
    config = train_medusa.get_config("tiny")
    config.target = str(target_dir)
    config.data.update(kind="corpus", source=str(corpus), sample_by="line", eval_fraction=0.1,
                       seq_len=32)  # fmt: skip
    config.train.update(num_steps=60, learning_rate=1e-2, eval_every=30, checkpoint_every=30,
                        progress=False)  # fmt: skip
    config.train.update(train)
    return config


def arrays(workdir):
    return [a for a in medusa_arrays(sj.load_draft(workdir)) if a is not None]


@pytest.fixture(scope="module")
def reference(corpus, target_dir, tmp_path_factory):
    """An uninterrupted corpus-mode run: (config, workdir, summary)."""
    config = heads_config(corpus, target_dir)
    workdir = tmp_path_factory.mktemp("heads")
    return config, workdir, th.train_heads(config, workdir)


def test_heads_learn_the_tokens_two_and_three_ahead(reference, target_dir):
    config, workdir, summary = reference
    target = sj.load_model(target_dir)
    rows = th.prepare_rows(config, target, workdir)[1]
    graphdef, state, _ = th.make_state(config, target)  # untrained: identity + the LM head
    _, eval_step = th.make_steps(config, graphdef, target)
    untrained = th.evaluate(eval_step, state, rows, config.train.batch_size, 8)
    assert summary["eval_loss"] < 0.5 * untrained["eval/loss"], (summary, untrained)
    # 26 letters follow each other in order: chance is ~1/26 for head 1 (token t + 3).
    assert summary["top1"][1] > 0.6 and untrained["eval/head_1/top1"] < 0.2, summary["top1"]
    logged = [r["train/loss"] for r in read_jsonl(workdir / "metrics.jsonl") if "train/loss" in r]
    assert logged[-1] < 0.5 * logged[0]
    heads = sj.load_draft(workdir, target=target)
    assert heads.config.num_heads == 2 and heads.config.base_model == str(target_dir)


@pytest.mark.parametrize("kind,temperature,shared", [("tv", 1.0, False), ("kl", 2.0, True)])
def test_soft_label_losses_train_the_heads(corpus, target_dir, tmp_path, kind, temperature, shared):
    """Heads trained on the target's law (KL, or the acceptance loss 1 - sum min(p, q)) from
    the stored features learn the tokens ahead, as the hard labels do. The KL run shares the
    target's LM head, frozen: it has no optimizer moments and comes back bit for bit."""
    config = heads_config(corpus, target_dir)
    config.loss.update(kind=kind, temperature=temperature)
    config.heads.shared_lm_head = shared
    config.features.precompute = True
    target = sj.load_model(target_dir)
    _, state, _ = th.make_state(config, target)
    moments = [path for path, _ in nnx.to_flat_state(state[1]) if "lm_head" in path]
    assert bool(moments) is not shared, moments  # the optimizer's state for the LM heads
    summary = th.train_heads(config, tmp_path)
    # chance is ~1/26; the hard-label run reaches ~0.6-0.8 in the same steps
    assert min(summary["top1"]) > 0.45, summary["top1"]
    logged = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "train/loss" in r]
    assert "train/head_0/law" in logged[-1]
    assert logged[-1]["train/loss"] < 0.5 * logged[0]["train/loss"]
    heads = sj.load_draft(tmp_path)
    lm = np.asarray(target_lm_head(target.module))
    if shared:
        assert heads.config.shared_lm_head
        np.testing.assert_array_equal(np.asarray(heads.lm_head[...]), lm)
    else:
        assert not (np.asarray(heads.lm_head[...]) == lm).all()  # trained away from the target's


def test_a_draft_vocabulary_is_the_rows_most_frequent_labels(corpus, target_dir, tmp_path):
    """`heads.draft_vocab_size`: the heads draft from the most frequent target ids among the
    train rows' labels (increasing order), still learn the tokens ahead with soft labels on
    the shared frozen LM head (cut to those ids), log how many labels the map covers,
    and export the map where vLLM reads it."""
    config = heads_config(corpus, target_dir)
    config.heads.update(draft_vocab_size=24, shared_lm_head=True)
    config.loss.update(kind="kl", temperature=2.0)
    config.features.precompute = True
    config.export.layouts = ("vllm",)
    summary = th.train_heads(config, tmp_path)
    target = sj.load_model(target_dir)
    heads = sj.load_draft(tmp_path, target=target)
    train_rows, eval_rows = th.prepare_rows(config, target, tmp_path)
    counts = token_counts(train_rows, target.config.vocab_size)
    token_map = np.asarray(heads.token_map[...])
    assert summary["draft_vocab_size"] == 24 and token_map.shape == (24,)
    assert (np.diff(token_map) > 0).all()
    assert counts[token_map].min() >= np.delete(counts, token_map).max()  # the 24 most frequent
    np.testing.assert_array_equal(
        np.asarray(heads.lm_head[...]), np.asarray(target_lm_head(target.module))[:, token_map]
    )
    assert min(summary["top1"]) > 0.45, summary["top1"]  # chance is ~1/26
    logged = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "eval/loss" in r]
    labels = np.asarray(eval_rows["tokens"])[:, 2:][np.asarray(eval_rows["mask"])[:, 2:] > 0]
    covered = np.isin(labels, token_map).mean()  # head 0's labels inside the map
    assert 0.8 < covered < 1
    np.testing.assert_allclose(logged[-1]["eval/head_0/coverage"], covered, atol=0.05)
    vllm = json.loads((tmp_path / "export" / "vllm" / "config.json").read_text())
    assert vllm["truncated_vocab_size"] == 24 and vllm["vocab_size"] == target.config.vocab_size


def test_chat_instructions_at_two_temperatures(corpus, target_dir, tmp_path):
    """prompt_style="instruction": chat-templated instructions of several lengths, split
    between T=0 and T=1; each row is its prompt, the target's continuation, then masked pads."""
    config = heads_config(corpus, target_dir)
    config.data.update(kind="self_distill", num_prompts=4, eval_prompts=1, prompt_tokens=6,
                       new_tokens=5, generate_batch_size=2, prompt_style="instruction",
                       temperatures=(0.0, 1.0))  # fmt: skip
    target = sj.load_model(target_dir)
    target.tokenizer.chat_template = "[{{ messages[-1]['content'] }}]"
    rows, _ = th.prepare_rows(config, target, tmp_path)
    lengths = (rows["mask"] == 0).argmin(1)  # where each response starts
    assert len(set(lengths.tolist())) > 1  # ragged prompts, right-padded
    assert rows["mask"].sum(1).tolist() == [5] * 4
    for i in range(4):
        text = target.tokenizer.decode(rows["tokens"][i, : lengths[i]].tolist())
        assert text.startswith("[") and text.endswith("]"), text
    greedy = [rows["tokens"][i, : lengths[i]].tolist() for i in (0, 1)]  # the T=0 share
    out = sj.generate(target, greedy, 5, stop_token_ids=[])
    for i in (0, 1):
        assert rows["tokens"][i, lengths[i] : lengths[i] + 5].tolist() == out.tokens[i]
    sampled = [rows["tokens"][i, lengths[i] : lengths[i] + 5].tolist() for i in (2, 3)]
    again = sj.generate(target, [rows["tokens"][i, : lengths[i]].tolist() for i in (2, 3)], 5,
                        stop_token_ids=[]).tokens  # fmt: skip
    assert sampled != again  # the second share was sampled (T=1), not greedy


def test_magpie_prompts_are_user_turns_the_target_wrote(corpus, target_dir, tmp_path):
    """prompt_style="magpie": the target continues its template's text before a user message
    (here "["), sampled with a seed per prompt; what it wrote up to an end id is the user turn."""
    config = heads_config(corpus, target_dir)
    config.data.update(kind="self_distill", num_prompts=3, eval_prompts=1, prompt_tokens=6,
                       new_tokens=4, generate_batch_size=2, prompt_style="magpie")  # fmt: skip
    target = sj.load_model(target_dir)
    with pytest.raises(ValueError, match="prompt_style='magpie' needs a target with a chat"):
        th.prepare_rows(config, target, tmp_path)
    tok = target.tokenizer
    tok.chat_template = "[{{ messages[-1]['content'] }}]"
    rows, eval_rows = th.prepare_rows(config, target, tmp_path)
    assert len(rows["tokens"]) == 3 and len(eval_rows["tokens"]) == 1
    assert rows["mask"].sum(1).tolist() == [4] * 3
    sampling = sj.SamplingParams(temperature=1.0, seed=0)
    drawn = sj.generate(target, [tok.encode("[")] * 7, 6, sampling, stop_token_ids=[],
                        seeds=list(range(7))).tokens  # fmt: skip
    ends, texts = set(tok.eos_token_ids), []
    for user in drawn:
        cut = next((j for j, t in enumerate(user) if t in ends), len(user))
        texts.append(tok.decode(user[:cut]).strip())
    # An empty turn (this target ends some at once) is replaced by a further draw: the first
    # three non-empty ones, in order.
    lengths = (rows["mask"] == 0).argmin(1)  # where each answer starts
    for i, text in enumerate([t for t in texts if t][:3]):
        assert tok.decode(rows["tokens"][i, : lengths[i]].tolist()) == f"[{text}]"
    assert len({tuple(r) for r in rows["tokens"].tolist()}) == 3


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_uninterrupted_parameters(
    corpus, target_dir, tmp_path, child_env
):
    overrides = {"train.num_steps": 400, "train.checkpoint_every": 50, "train.eval_every": 200}
    ref_dir = tmp_path / "ref"
    config = heads_config(corpus, target_dir, **{k.split(".")[1]: v for k, v in overrides.items()})
    th.train_heads(config, ref_dir)
    workdir = tmp_path / "killed"
    argv = [sys.executable, "-m", "launch.main", "--config=configs/train_medusa.py:tiny",
            f"--workdir={workdir}", f"--config.target={target_dir}"]  # fmt: skip
    flat = {"data.kind": "corpus", "data.source": str(corpus), "data.sample_by": "line",
            "data.eval_fraction": 0.1, "data.seq_len": 32, "train.learning_rate": 0.01,
            "train.progress": False, **overrides}  # fmt: skip
    argv += [f"--config.{k}={v}" for k, v in flat.items()]
    log_path = tmp_path / "stderr.txt"
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=log, env=child_env)
        deadline = time.monotonic() + 240
        ckpts = workdir / th.CHECKPOINTS
        while proc.poll() is None and time.monotonic() < deadline:
            if ckpts.is_dir() and any(p.name.isdigit() for p in ckpts.iterdir()):
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, log_path.read_text()[-3000:]
    assert not (workdir / "heads").exists()  # killed before the end
    summary = th.train_heads(config, workdir)
    assert 0 < summary["resumed_from"] < 400
    for got, want in zip(arrays(workdir), arrays(ref_dir), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_self_distilled_rows_are_the_targets_greedy_continuations(corpus, target_dir, tmp_path):
    config = heads_config(corpus, target_dir)
    config.data.update(kind="self_distill", num_prompts=3, eval_prompts=1, prompt_tokens=8,
                       new_tokens=12, generate_batch_size=2)  # fmt: skip
    target = sj.load_model(target_dir)
    rows, _ = th.prepare_rows(config, target, tmp_path)
    assert rows["tokens"].shape == (3, 20)
    assert rows["mask"].tolist() == [[0] * 8 + [1] * 12] * 3
    prompts = rows["tokens"][:, :8].tolist()
    out = sj.generate(target, prompts, 12, stop_token_ids=[])
    assert rows["tokens"][:, 8:].tolist() == out.tokens
    # A second run reuses the stored rows (nothing is generated again).
    stored = sorted((tmp_path / th.DISTILL).iterdir())
    again, _ = th.prepare_rows(config, target, tmp_path)
    assert sorted((tmp_path / th.DISTILL).iterdir()) == stored
    np.testing.assert_array_equal(again["tokens"], rows["tokens"])


def test_mixed_rows_add_corpus_windows_to_the_self_distilled_ones(corpus, target_dir, tmp_path):
    config = heads_config(corpus, target_dir)
    config.data.update(kind="self_distill", num_prompts=3, eval_prompts=1, prompt_tokens=8,
                       new_tokens=12, generate_batch_size=2)  # fmt: skip
    target = sj.load_model(target_dir)
    distilled, distilled_eval = th.prepare_rows(config, target, tmp_path)
    config.data.update(kind="mixed", corpus_rows=5)
    rows, eval_rows = th.prepare_rows(config, target, tmp_path)
    # The self-distilled rows first (reused), then 5 corpus windows as wide, every token counted;
    # the eval rows are the self-distilled ones alone.
    np.testing.assert_array_equal(rows["tokens"][:3], distilled["tokens"])
    np.testing.assert_array_equal(rows["mask"][:3], distilled["mask"])
    np.testing.assert_array_equal(eval_rows["tokens"], distilled_eval["tokens"])
    windows = rows["tokens"][3:]
    assert windows.shape == (5, 20) and (rows["mask"][3:] == 1).all()
    # Each window is a run of one corpus line's tokens.
    lines = [target.tokenizer.encode(line) for line in corpus.read_text().splitlines()]
    for w in windows.tolist():
        assert any(line[i : i + 20] == w for line in lines for i in range(len(line) - 19)), w
    config.data.corpus_rows = 10**6
    with pytest.raises(ValueError, match=r"corpus_rows=1000000: the corpus's train split holds"):
        th.prepare_rows(config, target, tmp_path)


@pytest.mark.slow
def test_precomputed_features_train_the_same_heads(corpus, target_dir, tmp_path):
    config = heads_config(corpus, target_dir, num_steps=20)
    th.train_heads(config, tmp_path / "live")
    config.features.precompute = True
    th.train_heads(config, tmp_path / "stored")
    assert (tmp_path / "stored" / th.FEATURES / "train" / "hidden.npy").is_file()
    for got, want in zip(arrays(tmp_path / "stored"), arrays(tmp_path / "live"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_medusa2_writes_a_target_and_heads_that_load(corpus, target_dir, tmp_path):
    config = heads_config(corpus, target_dir, num_steps=20)
    config.joint.update(enabled=True, heads_only_steps=10, kl_weight=1.0,
                        backbone_learning_rate=1e-3, backbone_warmup_steps=2)  # fmt: skip
    summary = th.train_heads(config, tmp_path)
    original, tuned = sj.load_model(target_dir), sj.load_model(tmp_path)
    assert summary["hf_dir"] == str(tmp_path / th.HF)
    before, after = sj.io.hf.export_state(original.module), sj.io.hf.export_state(tuned.module)
    assert any(not np.array_equal(before[k], after[k]) for k in before)  # the backbone trained
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "train/loss" in r]
    # Steps 1..10 train the heads alone (no backbone gradient, no KL), then the joint loss.
    assert [r["step"] for r in records] == [5, 10, 15, 20]
    assert not any("train/kl" in r or "train/lm_loss" in r for r in records[:2])
    assert all("train/kl" in r and "train/lm_loss" in r for r in records[2:])
    heads = sj.load_draft(tmp_path, target=tuned)
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    ref = sj.generate(tuned, prompts, 12, stop_token_ids=[]).tokens
    cfg = {"method": "medusa", "model": heads, "num_speculative_tokens": 2}
    assert sj.generate(tuned, prompts, 12, stop_token_ids=[], speculative_config=cfg).tokens == ref


def test_non_finite_loss_stops_the_run(corpus, target_dir, tmp_path):
    config = heads_config(corpus, target_dir, debug_nan_at_step=7, checkpoint_every=5, log_every=5)
    with pytest.raises(FloatingPointError, match="at step 7"):
        th.train_heads(config, tmp_path)
    assert not (tmp_path / "heads").exists()


@pytest.mark.parametrize(
    "change,match",
    [
        ({"method": "eagle7"}, r"config.method='eagle7' is not one of"),
        ({"data.kind": "books"}, r"config.data.kind='books' is not one of"),
        ({"data.kind": "mixed"}, r"config.data.corpus_rows=0: data.kind='mixed' needs"),
        ({"data.prompt_style": "quiz"}, r"config.data.prompt_style='quiz' is not one of"),
        ({"joint.enabled": True, "features.precompute": True}, "precompute=True needs a frozen"),
        ({"joint.enabled": True, "joint.heads_only_steps": 60}, "heads_only_steps=60 leaves no"),
        ({"target": ""}, "config.target is empty"),
        ({"loss.kind": "hinge"}, r"config.loss.kind='hinge' is not one of"),
        ({"heads.draft_vocab_size": -1}, r"config.heads.draft_vocab_size=-1 must be an int >= 0"),
        ({"heads.draft_vocab_size": 10**6}, r"draft_vocab_size=1000000 exceeds the target's"),
        (
            {"heads.draft_vocab_size": 16, "export.layouts": ("vllm",)},
            r"needs config.heads.shared_lm_head=True: vLLM loads a draft vocabulary only",
        ),  # fmt: skip
    ],
)
def test_bad_configs_are_refused_by_name(corpus, target_dir, tmp_path, change, match):
    config = heads_config(corpus, target_dir)
    for key, value in change.items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    with pytest.raises(ValueError, match=match):
        th.train_heads(config, tmp_path)
    assert not (tmp_path / th.CHECKPOINTS).exists()
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize("kind", ["ce", "tv"])
def test_cropping_rows_to_the_loss_keeps_the_loss(kind):
    """Medusa-1 rows shifted left to the first counted label minus K + 1 give the same loss
    and metrics as the full rows (the prompt's positions are never read), and are narrower;
    a reach of 2 (enough for head 0 only: the last head reads K + 1 before a label) changes
    it."""
    from specjax.train import losses

    rng = np.random.default_rng(3)
    N, T, D, V, K = 5, 24, 8, 11, 3
    mask = np.zeros((N, T), np.int8)
    for i, (a, b) in enumerate([(9, 20), (14, 24), (6, 13), (0, 0), (11, 22)]):
        mask[i, a:b] = 1  # row 3 counts nothing
    rows = {
        "tokens": rng.integers(0, V, (N, T)).astype(np.int32),
        "mask": mask,
        "hidden": rng.standard_normal((N, T, D)).astype(np.float32),
    }
    heads_w = rng.standard_normal((K, D, V)).astype(np.float32)
    unembed = rng.standard_normal((D, V)).astype(np.float32)

    def loss(r):
        head_logits = np.einsum("btd,kdv->btkv", r["hidden"], heads_w)
        target_logits = r["hidden"] @ unembed if kind != "ce" else None
        value, metrics = losses.medusa_loss(
            head_logits, r["tokens"], r["mask"], 0.8, target_logits=target_logits, kind=kind
        )
        return float(value), {k: float(v) for k, v in metrics.items()}

    cropped = th.crop_to_loss(rows, reach=K + 1)
    assert cropped["tokens"].shape[1] == 11 + K + 1 < T  # the longest span (rows 0, 4) + reach
    assert cropped["hidden"].shape == (N, cropped["tokens"].shape[1], D)
    assert int(cropped["mask"].sum()) == int(mask.sum())
    full_loss, full_metrics = loss(rows)
    crop_loss, crop_metrics = loss(cropped)
    np.testing.assert_allclose(crop_loss, full_loss, rtol=1e-5)
    for key, value in full_metrics.items():
        np.testing.assert_allclose(crop_metrics[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
    too_short, _ = loss(th.crop_to_loss(rows, reach=2))
    assert abs(too_short - full_loss) > 1e-3
