"""Train draft heads on a target: Medusa-1 (frozen target), Medusa-2 (joint); EAGLE in eagle.py.

    from specjax.train import heads
    config = heads.default_config()          # or configs/train_medusa.py:get_config("tiny")
    config.target = "workdirs/quickstart/target"
    summary = heads.train_heads(config, "/tmp/medusa")
    drafts = sj.load_draft("/tmp/medusa")    # the exported <workdir>/heads

Top to bottom: load the target; build the training rows (`specjax.train.rows`:
self-distillation by default, the target regenerating continuations of prompts from the
train split, `specjax.train.distill`; or the corpus text itself, `data.kind = "corpus"`, or
both, "mixed"); make the heads (identity blocks, the
target's LM head); then the run every trainer shares (`specjax.train.trainer.fit`): restore,
loop, eval, export, results.json.

The target's features come from its own forward inside the jitted step, under stop_gradient
(`features.precompute = False`, the default), or are computed once and stored in
`<workdir>/features/` and read back per batch (`features.precompute = True`, for targets too
large to run at every step; the stored file is reused while rows and target are the same).

Medusa-2 (`joint.enabled`): the heads train alone for `joint.heads_only_steps` (Medusa-1), then
the backbone joins with its own learning rate and warm-up; the loss is
`lm_weight * LM + heads_weight * Medusa (+ kl_weight * KL(original || current))`. The fine-tuned
target is written to `<workdir>/hf` (`sj.load_model(workdir)`), the heads to `<workdir>/heads`.

Workdir: `checkpoints/` (orbax), `metrics.jsonl` + `tensorboard/`, `heads/` (specjax layout:
`sj.load_draft(workdir)`), `export/<layout>/` for each layout in `export.layouts`, `hf/` (joint
runs), `features/` (precomputed), `distill/` (self-distillation rows, unless
`data.cache_dir` points elsewhere), `results.json` ({"task": "train_heads", "runs": [summary]}).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from specjax import parallel
from specjax.cache import KVCache
from specjax.heads import MedusaHeads
from specjax.heads.eagle import draft_vocabulary
from specjax.io.drafts import HEADS_DIR, save_draft
from specjax.io.hf import load_model, save_hf
from specjax.models import Model, as_model
from specjax.train import batching, distill, loop, losses, trainer
from specjax.train.rows import (  # noqa: F401 (the rows' API, also reached through heads)
    DATA_KINDS,
    DISTILL,
    PROMPT_STYLES,
    corpus_windows,
    magpie_prompts,
    prepare_rows,
    token_counts,
)

log = logging.getLogger(__name__)

CHECKPOINTS, HF, RESULTS = trainer.CHECKPOINTS, trainer.HF, trainer.RESULTS
FEATURES = "features"
METHODS = ("medusa",)
RESUME_KEYS = ("method", "target", "seed", "data", "heads", "loss", "joint", "features",
               "train.batch_size")  # fmt: skip


def default_config() -> ml_collections.ConfigDict:
    """Every knob of `train_heads` with its default (Medusa-1 on self-distilled data).

    Returns:
      ConfigDict: method, target (a checkpoint directory or training workdir), seed, data
      (kind "self_distill", "corpus" or "mixed", the corpus and split, prompts and
      generation for self-distillation, seq_len for corpus rows, corpus_rows for mixed ones), heads (num_heads, num_layers,
      shared_blocks, bias, shared_lm_head), loss (decay), joint (Medusa-2), features
      (precompute), export (layouts), train (`loop.train_config`'s knobs at its defaults)
      and mesh (data, model, fsdp: the device mesh of the training step,
      `loop.make_layout`; 1 x 1 = one device).
    """
    placeholder = ml_collections.config_dict.placeholder
    config = ml_collections.ConfigDict()
    config.task = "train_heads"
    config.method = "medusa"
    config.target = ""
    config.seed = 0
    config.data = dict(
        # "self_distill", "corpus" (the text itself) or "mixed": the self-distilled rows plus
        # `corpus_rows` windows of the corpus as wide as they are (the eval rows stay
        # self-distilled); corpus rows teach the target's law with loss "kl"/"tv" (EAGLE's
        # "ce" is already its law), the corpus's next token with Medusa's hard-label "ce"
        kind="self_distill",
        source="embedded",
        eval_fraction=0.05,
        seed=0,
        max_documents=placeholder(int),
        max_chars=placeholder(int),
        sample_by="document",
        num_prompts=128,  # self_distill: prompts per category from the train split
        eval_prompts=8,  # ... and from the eval split
        prompt_tokens=32,
        # "window": prompt_tokens-token windows of the corpus (a base model continues them);
        # "instruction": instructions made from those windows, chat-templated when the target
        # has a template (data.instruction_prompts: a chat model answers them);
        # "magpie": the chat target writes the user turns itself, from its template's text
        # before a user message, at temperature 1, up to prompt_tokens tokens (`magpie_prompts`;
        # num_prompts and eval_prompts are then totals, not per category)
        prompt_style="window",
        new_tokens=96,
        temperature=0.0,  # the target's sampling while it regenerates
        # several: the prompts are split evenly between these sampling temperatures (e.g.
        # (0.0, 1.0): one head set for greedy and sampled serving); empty: `temperature`
        temperatures=(),
        top_k=0,
        top_p=1.0,
        generate_batch_size=32,
        cache_dir="",  # "" = <workdir>/distill
        seq_len=128,  # corpus rows
        corpus_rows=0,  # mixed: corpus windows added to the train rows
    )
    # shared_lm_head: every head projects with the target's own LM head, frozen (vLLM's
    # original_lm_head); on a large vocabulary it is most of the step's cost when trained
    # draft_vocab_size: > 0 drafts from the most frequent target ids of the train rows'
    # labels only (vLLM's truncated_vocab_size / token_map); 0 = the whole vocabulary
    config.heads = dict(num_heads=4, num_layers=1, shared_blocks=False, bias=True,
                        shared_lm_head=False, draft_vocab_size=0)  # fmt: skip
    # kind: "ce" (hard labels, Medusa-1) | "kl" | "tv" against the target's law at
    # `temperature` (losses.LOSS_KINDS); the target's logits come from its LM head on the
    # same features (stored or computed), so stored features need nothing more.
    config.loss = dict(decay=0.8, kind="ce", temperature=1.0)
    config.joint = dict(
        enabled=False,
        heads_only_steps=100,
        backbone_learning_rate=1e-4,
        backbone_warmup_steps=50,
        lm_weight=1.0,
        heads_weight=0.2,
        kl_weight=0.0,  # > 0: distil from the original target's logits
    )
    config.features = dict(precompute=False, batch_size=16)
    config.export = dict(layouts=())  # e.g. ("vllm",): also written to <workdir>/export/<layout>
    config.train = loop.train_config()
    config.mesh = loop.mesh_config()
    return config


# ----------------------------------------------------------------------------------- data


def check_config(config) -> None:
    """Refuse what cannot work, naming the key and the value, before anything is loaded."""
    check_draft_config(config, METHODS)
    if config.joint.enabled and config.features.precompute:
        raise ValueError(
            "config.features.precompute=True needs a frozen target, but config.joint.enabled="
            "True trains it (its features change every step)"
        )
    vd = config.heads.get("draft_vocab_size", 0)
    if isinstance(vd, bool) or not isinstance(vd, int) or vd < 0:
        raise ValueError(
            f"config.heads.draft_vocab_size={vd!r} must be an int >= 0 (0: the whole vocabulary)"
        )
    layouts = tuple(config.export.layouts)
    if vd and "fasterdecoding" in layouts:
        raise ValueError(
            f"config.heads.draft_vocab_size={vd} with config.export.layouts={layouts}: "
            "FasterDecoding's layout has no draft vocabulary"
        )
    if vd and "vllm" in layouts and not config.heads.get("shared_lm_head", False):
        raise ValueError(
            f"config.heads.draft_vocab_size={vd} with config.export.layouts={layouts} needs "
            "config.heads.shared_lm_head=True: vLLM loads a draft vocabulary only with one "
            "shared LM head (original_lm_head)"
        )
    if config.joint.enabled and config.joint.heads_only_steps >= config.train.num_steps:
        raise ValueError(
            f"config.joint.heads_only_steps={config.joint.heads_only_steps} leaves no joint "
            f"steps before train.num_steps={config.train.num_steps}"
        )


def check_draft_config(config, methods: tuple[str, ...]) -> None:
    """The checks of every draft trainer (this one and EAGLE's): config.method among
    `methods`, the rows' data.kind and data.prompt_style, and the loss."""
    if config.method not in methods:
        raise ValueError(f"config.method={config.method!r} is not one of {methods}")
    if config.data.kind not in DATA_KINDS:
        raise ValueError(f"config.data.kind={config.data.kind!r} is not one of {DATA_KINDS}")
    corpus_rows = config.data.get("corpus_rows", 0)
    if config.data.kind == "mixed" and (not isinstance(corpus_rows, int) or corpus_rows < 1):
        raise ValueError(
            f"config.data.corpus_rows={corpus_rows!r}: data.kind='mixed' needs an int >= 1"
        )
    losses.check_loss_config(config.loss)
    style = config.data.get("prompt_style", "window")
    if style not in PROMPT_STYLES:
        raise ValueError(f"config.data.prompt_style={style!r} is not one of {PROMPT_STYLES}")


def load_target(config, target=None, mesh=None) -> Model:
    """The frozen target: `target` as a Model, or `config.target` loaded (onto `mesh`)."""
    if target is None:
        if not config.target:
            raise ValueError("config.target is empty: set it to a checkpoint dir or LM workdir")
        target = load_model(config.target, mesh=mesh)
    return as_model(target)


# ------------------------------------------------------------------------------- features


def _forward(graphdef, params, tokens):
    """The target's forward over whole rows [B, T] (a fresh cache of T slots: causal)."""
    module = nnx.merge(graphdef, params)
    B, T = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))  # [B, T]
    return module(tokens, positions, KVCache.for_model(module.config, B, T))


def precompute_features(
    target: Model, rows: dict, directory: Path, batch_size: int, progress, mesh=None
):  # fmt: skip
    """The target's `last_hidden` for every row, stored once as `hidden.npy` [N, T, D] float32.

    Reused when the rows and the target are unchanged (`key.json` records both hashes).
    `mesh`: the device mesh the target's parameters live on (None: one device).
    Returns the array (memory-mapped, read-only).
    """
    key = {
        "target": distill.target_fingerprint(target),
        "rows": hashlib.sha256(rows["tokens"].tobytes()).hexdigest(),
    }
    graphdef, params = nnx.split(target.module)
    forward = jax.jit(lambda p, t: _forward(graphdef, p, t).last_hidden)
    stored = distill.store_features(
        directory, key, lambda t: {"hidden": forward(params, t)}, rows["tokens"],
        {"hidden": (rows["tokens"].shape[1], target.config.hidden_size)},
        batch_size=batch_size, progress=progress, mesh=mesh,
    )  # fmt: skip
    return stored["hidden"]


def attach_features(config, target: Model, splits: dict, workdir: Path, mesh=None) -> None:
    """Adds the stored `hidden` features to each split's rows ({"train": rows, "eval": rows}),
    Medusa-1's rows then cropped to the loss (`crop_to_loss`)."""
    fb, bar = config.features.batch_size, config.train.progress
    for name, rows in splits.items():
        rows["hidden"] = precompute_features(target, rows, workdir / FEATURES / name, fb, bar,
                                             mesh)  # fmt: skip
        if not config.joint.enabled:
            # the prompt's features are never read (head k: feature t, label t + k + 2)
            rows.update(crop_to_loss(rows, reach=config.heads.num_heads + 1))


def crop_to_loss(rows: dict, reach: int) -> dict:
    """Rows with stored features, each shifted left to the first position a loss reads.

    Medusa-1's head k reads only the stored feature at t and the label at t + k + 2, so the
    positions before the first counted label minus `reach` = K + 1 (the prompt of a self-distilled
    row: about half of it on chat data) cost a full LM-head product per head for nothing.
    Every row's (tokens, mask, hidden) move left together by the same amount and are padded
    on the right with mask 0; the width becomes the longest counted span plus `reach`. A row
    without a counted label keeps its first positions (it contributes nothing either way).

    Args:
      rows: {"tokens" [N, T], "mask" [N, T], "hidden" [N, T, D]}.
      reach: how far before a label its earliest reader sits (K heads: K + 1).
    Returns:
      The rows, [N, W] and [N, W, D] with W <= T.
    """
    mask = np.asarray(rows["mask"])
    counted = mask.any(axis=1)
    first = np.where(counted, mask.argmax(axis=1), 0)
    last = np.where(counted, mask.shape[1] - mask[:, ::-1].argmax(axis=1), 0)
    start = np.where(counted, np.maximum(first - reach, 0), 0)
    width = max(int((last - start).max()), 1)
    out = {}
    for key, array in rows.items():
        array = np.asarray(array)
        cropped = np.zeros((len(array), width, *array.shape[2:]), array.dtype)
        for i, s in enumerate(start):
            piece = array[i, s : s + width]
            cropped[i, : len(piece)] = piece
        out[key] = cropped
    return out


# ----------------------------------------------------------------------------------- steps


class Joint(nnx.Module):
    """Heads and the backbone they read, trained together (Medusa-2)."""

    def __init__(self, heads: MedusaHeads, target):
        self.heads = heads
        self.target = target


def _backbone_label(path, _):
    first = path[0]
    return "heads" if getattr(first, "key", first) == "heads" else "backbone"


def check_draft_vocab(config, target: Model) -> int:
    """config.heads.draft_vocab_size, refused when above the target's vocabulary."""
    vd, V = config.heads.get("draft_vocab_size", 0), target.config.vocab_size
    if vd > V:
        raise ValueError(f"config.heads.draft_vocab_size={vd} exceeds the target's vocab_size={V}")
    return vd


def token_map_for(config, target: Model, train_rows: dict) -> np.ndarray | None:
    """The heads' draft vocabulary: the `heads.draft_vocab_size` most frequent target ids
    among the train rows' counted labels, in increasing order (None: the whole vocabulary)."""
    vd, V = check_draft_vocab(config, target), target.config.vocab_size
    if vd in (0, V):
        return None
    d2t, _ = draft_vocabulary(token_counts(train_rows, V), vd)
    return d2t + np.arange(vd)


def make_state(config, target: Model, token_map=None):
    """(graphdef, state) of nnx.split((trainable, optimizer)) and the heads' lr schedule.
    token_map: the draft vocabulary (`token_map_for`), None: the whole vocabulary."""
    train, h = config.train, config.heads
    tx, schedule = loop.make_optimizer(train)

    def create():
        options = {} if token_map is None else {"token_map": token_map}
        heads = MedusaHeads.for_target(
            target, h.num_heads, h.num_layers, shared_blocks=h.shared_blocks, bias=h.bias,
            shared_lm_head=h.get("shared_lm_head", False), base_model=str(config.target),
            **options,
        )  # fmt: skip
        if not config.joint.enabled:
            return heads, nnx.Optimizer(heads, tx, wrt=nnx.Param)
        j = config.joint
        backbone_tx, _ = loop.make_optimizer(
            train, learning_rate=j.backbone_learning_rate, warmup_steps=j.backbone_warmup_steps,
            start_step=j.heads_only_steps,
        )  # fmt: skip
        backbone = nnx.clone(target.module)
        # Own buffers: the train step donates the joint state, and the frozen original (the
        # KL reference) must keep its arrays.
        nnx.update(backbone, jax.tree.map(jnp.copy, nnx.state(backbone)))
        joint = Joint(heads, backbone)
        both = optax.multi_transform(
            {"heads": tx, "backbone": backbone_tx},
            lambda params: jax.tree_util.tree_map_with_path(_backbone_label, params),
        )
        return joint, nnx.Optimizer(joint, both, wrt=nnx.Param)

    graphdef, state = nnx.split(create())
    return graphdef, state, schedule


RANKS = 10  # eval reports each head's hit rate at ranks 0..RANKS-1 (sparse-tree input)


def _losses(
    config, trainable, batch, hidden, ref_logits, ranks: int = 0, heads_only=False, unembed=None
):
    """(loss, metrics) of one batch; `hidden` given for Medusa-1, computed here for joint.

    heads_only: Medusa-2's first stage: the backbone's features under stop_gradient and the
    heads' loss alone, so no backbone gradient (and no KL reference) is computed.
    unembed: the frozen target's LM head ((features, ids=None) -> logits), for "kl"/"tv".
    """
    tokens, mask = batch["tokens"], batch["mask"]
    lc = config.loss
    soft = lc.kind != "ce"

    heads = trainable.heads if isinstance(trainable, Joint) else trainable
    draft_ids = heads.token_map[...] if heads.config.truncated else None

    def heads_loss(feature, target_logits, with_ranks):
        """target_logits: [B, T, V], or [B, T, Vd] already at the draft ids, or None."""
        if draft_ids is not None and target_logits is not None:
            if target_logits.shape[-1] != draft_ids.shape[0]:
                target_logits = jnp.take(target_logits, draft_ids, axis=-1)  # [B, T, Vd]
        return losses.medusa_loss(
            heads.draft_logits(feature), tokens, mask, lc.decay, ranks if with_ranks else 0,
            target_logits=target_logits, kind=lc.kind, temperature=lc.temperature,
            draft_ids=draft_ids,
        )  # fmt: skip

    if isinstance(trainable, Joint):
        B, T = tokens.shape
        positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        out = trainable.target(tokens, positions, KVCache.for_model(trainable.target.config, B, T))
        # soft labels: the original target's law where the KL reference is computed, else
        # the backbone's own (a constant either way)
        law = None
        if soft:
            law = jax.lax.stop_gradient(out.logits if ref_logits is None else ref_logits)
        if heads_only:
            feature = jax.lax.stop_gradient(out.last_hidden)
            return heads_loss(feature, law, False)
        h_loss, metrics = heads_loss(out.last_hidden, law, True)
        lm = losses.next_token_ce(out.logits, tokens, mask)
        j = config.joint
        loss = j.lm_weight * lm + j.heads_weight * h_loss
        metrics = {**metrics, "lm_loss": lm, "heads_loss": h_loss}
        if j.kl_weight > 0:
            kl = losses.kl_to_reference(out.logits, ref_logits, tokens, mask)
            loss, metrics["kl"] = loss + j.kl_weight * kl, kl
        return loss, metrics
    law = None
    if soft:  # the target's law at the draft ids only (a sixth of the product at 8,192 of 49k)
        law = jax.lax.stop_gradient(unembed(hidden, draft_ids))
    return heads_loss(hidden, law, True)


def make_steps(config, graphdef, target: Model, start: int = 0, layout=None, shardings=None):
    """(train_step, eval_step): (state, batch) -> (state, metrics) / metrics; jitted.

    A joint run's train step is two compiled steps: the heads-only one for steps
    1..joint.heads_only_steps, then the joint one (`start`: the restored step).
    layout, shardings: the run's `parallel.Layout` and the state's shardings
    (`loop.place_state`; the frozen target is placed by the same rules); None: one device.
    """
    t_graphdef, t_params = nnx.split(target.module)
    t_params = parallel.shard_params(t_params, layout, "target parameters", target.config.head_dim)
    joint, nan_at = config.joint.enabled, config.train.debug_nan_at_step
    kl = joint and config.joint.kl_weight > 0

    def unembed(h, ids=None):  # the frozen target's LM head, at the ids only when given
        module = nnx.merge(t_graphdef, t_params)
        return module.unembed(h) if ids is None else module.unembed_at(h, ids)

    def inputs(batch, heads_only=False):
        """The frozen target's features (or None: the joint model computes its own)."""
        if joint:
            if not kl or heads_only:
                return None, None
            ref = _forward(t_graphdef, t_params, batch["tokens"]).logits
            return None, jax.lax.stop_gradient(ref)
        if "hidden" in batch:
            return batch["hidden"], None
        return jax.lax.stop_gradient(
            _forward(t_graphdef, t_params, batch["tokens"]).last_hidden
        ), None

    def train_step(state, batch, heads_only=False):
        trainable, optimizer = nnx.merge(graphdef, state)
        hidden, ref = inputs(batch, heads_only)

        def loss_fn(model):
            return _losses(config, model, batch, hidden, ref, heads_only=heads_only,
                           unembed=unembed)  # fmt: skip

        return loop.update(trainable, optimizer, loss_fn, nan_at)

    def eval_step(state, batch):
        trainable, _ = nnx.merge(graphdef, state)
        hidden, ref = inputs(batch)
        loss, metrics = _losses(config, trainable, batch, hidden, ref, RANKS, unembed=unembed)
        return {"loss": loss, **metrics}

    step = loop.jit_train_step(train_step, layout, shardings, static_argnames="heads_only")
    evaluate = loop.on_layout(jax.jit(eval_step), layout)
    if not joint:
        return step, evaluate
    done = [start]  # steps taken so far (the loop calls the step once per step, in order)

    def staged(state, batch):
        done[0] += 1
        return step(state, batch, heads_only=done[0] <= config.joint.heads_only_steps)

    return staged, evaluate


def evaluate(eval_step, state, rows: dict, batch_size: int, num_batches: int) -> dict:
    """Means over the first `num_batches` batches of the eval rows: eval/loss and, per head,
    eval/head_<k>/{ce, top1, top5} (top-k accuracy of the token at t + k + 2)."""
    n = batching.num_rows(rows)
    batch_size = min(batch_size, n)
    count = max(1, min(num_batches, n // batch_size))
    results = []
    for i in range(count):
        batch = {k: np.asarray(v[i * batch_size : (i + 1) * batch_size]) for k, v in rows.items()}
        results.append(eval_step(state, batch))
    host = jax.device_get(results)
    return {f"eval/{k}": float(np.mean([r[k] for r in host])) for k in host[0]}


# ----------------------------------------------------------------------------------- the run


def train_heads(config: ml_collections.ConfigDict, workdir, *, target=None) -> dict:
    """Trains (or resumes) draft heads on `config.target` and exports them.

    Resume order as `specjax.train.loop` states it; the training rows are rebuilt
    deterministically (self-distillation rows are reused from their cache).

    Args:
      config: see `default_config`.
      workdir: the run's directory (created if missing).
      target: a loaded Model to use instead of loading `config.target`.
    Returns:
      Summary dict (`specjax.train.trainer.fit`'s; also results.json's one run): task, step,
      resumed_from, train_loss, eval_loss, method, top1 / top5 (per head), rank_accuracy (per
      head and rank), num_params, train_rows, data_kind, eval_lm_loss (joint runs),
      train_seconds, heads_dir, hf_dir (joint runs); those two None, with export_error, if
      the export was refused.
    """
    check_config(config)
    workdir, layout = trainer.begin(config, workdir)
    mesh = None if layout is None else layout.mesh

    # Setup: target, rows, features, heads, optimizer.
    target = load_target(config, target, mesh)
    check_draft_vocab(config, target)  # before the rows (self-distillation takes minutes)
    train_rows, eval_rows = prepare_rows(config, target, workdir, mesh)
    if config.features.precompute:
        attach_features(config, target, {"train": train_rows, "eval": eval_rows}, workdir, mesh)
    graphdef, state, schedule = make_state(
        config, target, token_map_for(config, target, train_rows)
    )
    state, shardings = loop.place_state(state, layout)
    log.info("%s heads: %d rows of %d tokens (%s)", config.method, batching.num_rows(train_rows),
             train_rows["tokens"].shape[1], config.data.kind)  # fmt: skip

    # Restore, loop, eval, export, results.json.
    outputs = {"heads_dir": workdir / HEADS_DIR}
    if config.joint.enabled:
        outputs["hf_dir"] = workdir / HF
    pieces = trainer.Pieces(
        task="train_heads", graphdef=graphdef, schedule=schedule, train_rows=train_rows,
        eval_rows=eval_rows,
        make_steps=lambda start: make_steps(config, graphdef, target, start, layout, shardings),
        evaluate=evaluate, resume_keys=RESUME_KEYS, desc=f"train {config.method} heads",
        tokens_per_step=config.train.batch_size * train_rows["tokens"].shape[1],
        summarize=lambda trainable, final: _summary(config, trainable, final, train_rows),
        export=lambda trainable: _export(config, trainable, target, workdir),
        outputs=outputs,
    )  # fmt: skip
    summary = trainer.fit(config, workdir, layout, state, pieces)
    log.info("heads: eval top-1 %s", " / ".join(f"{a:.2f}" for a in summary["top1"]))
    return summary


def _summary(config, trainable, final: dict, train_rows: dict) -> dict:
    """The head trainer's own summary fields."""
    heads = trainable.heads if isinstance(trainable, Joint) else trainable
    K = heads.config.num_heads
    summary = {
        "method": config.method,
        "top1": [final[f"eval/head_{k}/top1"] for k in range(K)],
        "top5": [final[f"eval/head_{k}/top5"] for k in range(K)],
        # [K][RANKS]: how often exactly head k's rank-r token is right (trees.sparse_tree).
        "rank_accuracy": [
            [
                final[f"eval/head_{k}/rank_{r}"]
                for r in range(RANKS)
                if f"eval/head_{k}/rank_{r}" in final
            ]
            for k in range(K)
        ],
        "num_params": heads.config.num_params(),
        "draft_vocab_size": heads.config.draft_vocab_size,
        "train_rows": batching.num_rows(train_rows),
        "data_kind": config.data.kind,
    }
    if isinstance(trainable, Joint):
        summary["eval_lm_loss"] = final.get("eval/lm_loss")
    return summary


def export_draft(config, heads, workdir: Path) -> None:
    """Writes `heads` to `<workdir>/heads` (specjax layout) and each `export.layouts` dir."""
    save_draft(heads, workdir / HEADS_DIR, layout="specjax")
    for name in config.export.layouts:
        save_draft(heads, workdir / "export" / name, layout=name)


def _export(config, trainable, target: Model, workdir: Path) -> None:
    """The heads and, for a joint run, the fine-tuned target (`<workdir>/hf`)."""
    joint = isinstance(trainable, Joint)
    export_draft(config, trainable.heads if joint else trainable, workdir)
    if joint:
        save_hf(Model(trainable.target, target.tokenizer, str(workdir / HF)), workdir / HF)
