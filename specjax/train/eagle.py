"""Train EAGLE drafters on a frozen target: EAGLE-1, and EAGLE-3 with training-time test.

    from specjax.train import eagle
    config = eagle.default_config()          # or configs/train_eagle.py:get_config("tiny")
    config.target = "workdirs/quickstart/target"
    summary = eagle.train_eagle(config, "/tmp/eagle3")
    drafter = sj.load_draft("/tmp/eagle3")   # the exported <workdir>/heads

Top to bottom, as `specjax.train.heads` (whose target, rows, evaluation and export this
reuses): load the target; build the rows (self-distillation by default); count the tokens and
pick the draft vocabulary (EAGLE-3); make the drafter; then the run every trainer shares
(`specjax.train.trainer.fit`): restore, loop, eval, export, results.json.

What one row teaches (entry t reads token x_{t+1}; see `specjax.heads.eagle`):

- EAGLE-1 (`method="eagle"`): entry t reads f_t, the target's post-norm last hidden state,
  plus uniform noise U(-a, a) (`loss.noise`, default a = 0.1; see below), and predicts
  f_hat_{t+1}. Loss = feature_weight * SmoothL1(f_hat_{t+1}, f_{t+1})
  + token_weight * CE(LM(f_hat_{t+1}), softmax(target logits at t + 1)), weights 1 and 0.1
  as the paper's.
- EAGLE-3 (`method="eagle3"`), unrolled `ttt_steps` = n times (`unroll`): step 0 reads
  g_t = fc(cat(taps_t)); step k >= 1 reads the drafter's own pre-norm output of step k - 1 at
  the same entry, token x_{t+1+k}, RoPE position t + k, and drafts token t + k + 2 against
  the target's distribution at t + k + 1 restricted to the draft vocabulary
  (`losses.eagle_step_loss`). Step k's query at t sees step 0's keys at <= t and the keys of
  steps 1..k at t (`ttt_mask`). Loss = sum_k decay^k loss_k, each loss_k a masked mean over
  its counted entries (so n = 1 is exactly the one-step loss, and a step whose entries are
  few weighs what its decay says, not less); the sum is not divided by sum_k decay^k,
  as the reference's.

Noise: the reference adds (U(0,1) - 0.5) * 0.2 * 512 / seq_len to its features, i.e.
U(-0.1, 0.1) at 512 tokens a row; the sequence-length factor has no stated reason, so here
the amplitude is absolute: U(-a, a) on the target features the drafter reads (EAGLE-1: f_t;
EAGLE-3: each tap), never on the regression target. `loss.noise = None` takes the method's
default: 0.1 for EAGLE-1, 0 for EAGLE-3 (training-time test replaces it, as the reference's
EAGLE-3 trains without noise). The noise key is (seed, step): a resumed run draws the same.

Draft vocabulary (EAGLE-3, `head.draft_vocab_size` > 0): the most frequent target ids among
the train rows' counted (mask = 1) tokens, `specjax.heads.eagle.draft_vocabulary`, stored in
the drafter's `d2t` / `t2d` before training (and in every checkpoint).

Evaluation (held-out rows, every `train.eval_every` steps and at the end): both methods
unroll `ttt_steps` steps (EAGLE-1 feeds back its f_hat, as when it drafts) and report
eval/step_<k>/top1 (the drafter's argmax, in target ids, equals the target's argmax at the
shifted position: step k's acceptance given correct earlier tokens, at T = 0) and
eval/step_<k>/ce; EAGLE-3 adds eval/step_0/coverage (target argmaxes inside the draft
vocabulary); EAGLE-1 adds eval/feature_loss.

Workdir: as `specjax.train.heads`'s (`checkpoints/`, `metrics.jsonl`, `tensorboard/`,
`heads/`, `export/<layout>/`, `features/`, `distill/`, `results.json`). Stored features
(`features.precompute`) are `hidden.npy` [N, T, D] and, for EAGLE-3, `taps.npy` [N, T, 3, D].
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from specjax import parallel
from specjax.cache import KVCache
from specjax.heads.eagle import EagleHead, default_tap_layers, draft_vocabulary
from specjax.io.drafts import HEADS_DIR
from specjax.models import Model
from specjax.train import batching, distill, loop, losses, trainer
from specjax.train import heads as th
from specjax.train.rows import token_counts  # noqa: F401 (also reached through eagle)

log = logging.getLogger(__name__)

CHECKPOINTS, RESULTS = trainer.CHECKPOINTS, trainer.RESULTS
FEATURES, DISTILL = th.FEATURES, th.DISTILL
METHODS = ("eagle", "eagle3")
DEFAULT_NOISE = {"eagle": 0.1, "eagle3": 0.0}
RESUME_KEYS = ("method", "target", "seed", "data", "head", "ttt_steps", "loss", "features",
               "train.batch_size")  # fmt: skip


def default_config() -> ml_collections.ConfigDict:
    """Every knob of `train_eagle` with its default (EAGLE-3, 7 TTT steps, self-distilled rows).

    Returns:
      ConfigDict: method ("eagle" or "eagle3"), target, seed, data / features / export
      (as `specjax.train.heads.default_config`'s), train (`loop.train_config`'s knobs at its
      defaults), head (fc_bias: EAGLE-1 only; tap_layers: EAGLE-3, () =
      `default_tap_layers`; draft_vocab_size: EAGLE-3, 0 = the target's vocabulary;
      intermediate_size: the drafter layer's MLP width, 0 = the target's), ttt_steps
      (EAGLE-3's training unroll; both methods' eval unroll),
      loss (decay, feature_weight, token_weight, noise: None = the method's default),
      mesh (as train_heads': the device mesh of the training step).
    """
    base = th.default_config()
    config = ml_collections.ConfigDict()
    config.task = "train_eagle"
    config.method = "eagle3"
    config.target = ""
    config.seed = 0
    config.data = base.data
    config.head = dict(fc_bias=False, tap_layers=(), draft_vocab_size=0, intermediate_size=0)
    config.ttt_steps = 7
    config.loss = dict(
        decay=0.8,
        kind="ce",  # "ce" (soft CE at T=1, the reference) | "kl" | "tv" (losses.LOSS_KINDS)
        temperature=1.0,  # the training temperature of "kl" / "tv"
        feature_weight=1.0,
        token_weight=0.1,
        noise=ml_collections.config_dict.placeholder(float),
    )
    config.features = base.features
    config.export = base.export
    config.train = loop.train_config()
    config.mesh = base.mesh
    return config


def check_config(config) -> None:
    """Refuse what cannot work, naming the key and the value, before anything is loaded."""
    th.check_draft_config(config, METHODS)
    if not isinstance(config.ttt_steps, int) or config.ttt_steps < 1:
        raise ValueError(f"config.ttt_steps={config.ttt_steps!r} must be an int >= 1")
    if config.loss.noise is not None and not config.loss.noise >= 0:
        raise ValueError(f"config.loss.noise={config.loss.noise!r} must be >= 0 (or None)")
    h = config.head
    if config.method == "eagle3" and h.fc_bias:
        raise ValueError("config.head.fc_bias=True: EAGLE-3's fc has no bias (EAGLE-1 only)")
    if config.method == "eagle" and (tuple(h.tap_layers) or h.draft_vocab_size):
        raise ValueError(
            f"config.head.tap_layers={tuple(h.tap_layers)} / draft_vocab_size="
            f"{h.draft_vocab_size}: EAGLE-3 options; method='eagle' reads the last hidden "
            "state over the full vocabulary"
        )
    if h.draft_vocab_size < 0:
        raise ValueError(f"config.head.draft_vocab_size={h.draft_vocab_size} must be >= 0")
    width = h.get("intermediate_size", 0)
    if not isinstance(width, int) or isinstance(width, bool) or width < 0:
        raise ValueError(
            f"config.head.intermediate_size={width!r} must be an int >= 0 (0: the target's "
            "MLP width)"
        )


def noise_amplitude(config) -> float:
    return DEFAULT_NOISE[config.method] if config.loss.noise is None else float(config.loss.noise)


def tap_layers(config, target: Model) -> tuple[int, ...]:
    """The target layers an EAGLE-3 drafter reads (() for EAGLE-1)."""
    if config.method != "eagle3":
        return ()
    return tuple(int(i) for i in config.head.tap_layers) or default_tap_layers(
        target.config.num_layers
    )


# ------------------------------------------------------------------------------- features


def _forward(module, tokens, taps: tuple[int, ...]):
    """The target's forward over whole rows [B, T] (a fresh cache of T slots: causal):
    (last_hidden [B, T, D] post-norm, taps: tuple of [B, T, D])."""
    B, T = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))  # [B, T]
    out = module(tokens, positions, KVCache.for_model(module.config, B, T), tap_layers=taps)
    return out.last_hidden, out.taps


def precompute_features(target: Model, rows: dict, directory: Path, taps: tuple[int, ...],
                        batch_size: int, progress: bool, mesh=None) -> dict:  # fmt: skip
    """The target's features for every row, computed once and stored under `directory`.

    `hidden.npy` [N, T, D] float32 (post-norm last hidden), `best.npy` [N, T] int32 (the
    target's greedy token at every position, so that a step over a reduced draft vocabulary
    never needs the whole LM head) and, when `taps` is non-empty, `taps.npy` [N, T, len(taps),
    D] float32 (the residual stream entering each tap layer).
    Reused while rows, target and taps are unchanged (`key.json`). `mesh`: the device mesh
    the target's parameters live on (None: one device).

    Returns:
      {"hidden": array, "best": array, "taps": array (if taps)}, memory-mapped read-only.
    """
    tokens = np.asarray(rows["tokens"])
    key = {
        "target": distill.target_fingerprint(target),
        "rows": hashlib.sha256(tokens.tobytes()).hexdigest(),
        "tap_layers": list(taps),
        "stores": ["hidden", "best"] + (["taps"] if taps else []),
    }
    graphdef, params = nnx.split(target.module)

    @jax.jit
    def forward(p, t):
        module = nnx.merge(graphdef, p)
        hidden, tapped = _forward(module, t, taps)
        out = {"hidden": hidden, "best": jnp.argmax(module.unembed(hidden), -1).astype(jnp.int32)}
        if taps:
            out["taps"] = jnp.stack(tapped, axis=2)  # [B, T, len(taps), D]
        return out

    T, D = tokens.shape[1], target.config.hidden_size
    shapes = {"hidden": (T, D), "best": (T,), **({"taps": (T, len(taps), D)} if taps else {})}
    return distill.store_features(
        directory, key, lambda t: forward(params, t), tokens, shapes,
        batch_size=batch_size, progress=progress, mesh=mesh, dtypes={"best": np.int32},
    )  # fmt: skip


def attach_features(config, target: Model, splits: dict, workdir: Path, mesh=None) -> None:
    """Adds the stored features (`hidden`, EAGLE-3's `taps`) to each split's rows
    ({"train": rows, "eval": rows})."""
    taps, fb = tap_layers(config, target), config.features.batch_size
    for name, rows in splits.items():
        rows.update(precompute_features(target, rows, workdir / FEATURES / name, taps, fb,
                                        config.train.progress, mesh))  # fmt: skip


# -------------------------------------------------------------------- the unrolled drafter


def ttt_mask(T: int, step: int) -> jax.Array:
    """[T, (step + 1) * T] bool: what step `step`'s query at entry t attends to.

    Keys are the steps' keys concatenated in step order (step 0's T keys first). Query t
    sees step 0's keys at entries <= t (the real prefix: causal) and, for each step
    1..`step`, that step's key at entry t (the same-position band): exactly what a drafter
    that drafts `step` tokens ahead of position t holds in its cache at inference.
    """
    causal = jnp.tril(jnp.ones((T, T), bool))  # [T, T]
    same = jnp.eye(T, dtype=bool)  # [T, T]
    return jnp.concatenate([causal] + [same] * step, axis=1)


def _shift(tokens, by: int):
    """tokens [B, T] moved left by `by`, padded with 0 (entries past the row; never counted)."""
    return jnp.pad(tokens[:, by:], ((0, 0), (0, min(by, tokens.shape[1]))))  # [B, T]


def unroll(head: EagleHead, target, tokens, feature, steps: int, logits: bool = True):
    """The drafter unrolled `steps` times over whole rows (training-time test).

    Args:
      head: the drafter.
      target: the target's module (embedding; EAGLE-1's LM head).
      tokens: [B, T] the rows.
      feature: [B, T, H] step 0's hidden input per entry (EAGLE-1: f_t; EAGLE-3: fc(taps)).
      steps: n >= 1 (static).
      logits: False: each step's logits are left to the caller (None), which computes them
        where a loss reads them.
    Returns:
      [(h [B, T, H] pre-norm output, logits [B, T, Vd] float32)] for steps 0..n-1. Entry t of
      step k read token x_{t+1+k} at RoPE position t + k.
    """
    B, T = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))  # [B, T]
    keys, values, outs = [], [], []
    for k in range(steps):
        a, residual = head.layer_input(target, _shift(tokens, 1 + k), feature)  # [B, T, *]
        q, key, value = head.qkv(a, positions + k)  # [B, T, N|K, Hd]
        keys.append(key)
        values.append(value)
        mask = jnp.broadcast_to(ttt_mask(T, k), (B, T, (k + 1) * T))  # [B, T, (k+1)T]
        k_all = jnp.concatenate(keys, 1).transpose(0, 2, 1, 3)  # [B, K, (k+1)T, Hd]
        v_all = jnp.concatenate(values, 1).transpose(0, 2, 1, 3)
        attn = head.attend(q, k_all, v_all, mask)
        h = head.layer_output(residual, attn)  # [B, T, H]
        outs.append((h, head.draft_logits(target, h) if logits else None))
        feature = h  # the next step reads this step's pre-norm output at the same entry
    return outs


def label_count(*row_sets: dict) -> int:
    """The most counted labels in any row of these row sets (`compute_losses`'s `labels`)."""
    return max(int(np.asarray(rows["mask"]).sum(1).max()) for rows in row_sets)


def counted_positions(mask, labels: int):
    """([B, M] int32 the counted positions of each row in order, then uncounted ones;
    [B, M] their mask values): M = `labels` >= every row's count, so none is lost."""
    order = jnp.argsort(1 - mask.astype(jnp.int32), axis=1, stable=True)[:, :labels]
    return order.astype(jnp.int32), jnp.take_along_axis(mask, order, 1)


def _gather(x, index):
    """x [B, T, ...] at index [B, M] -> [B, M, ...]."""
    return jnp.take_along_axis(x, index.reshape(index.shape + (1,) * (x.ndim - 2)), 1)


def compute_losses(
    config, head: EagleHead, target, batch, hidden, taps, steps: int, key=None, labels=None
):  # fmt: skip
    """(loss [], metrics) of one batch.

    With stored features (`batch["best"]`, the target's greedy tokens) and a reduced draft
    vocabulary, the target's law is computed at the draft ids only (`Decoder.unembed_at`);
    otherwise from its whole LM head. Both give the same loss and metrics.

    With `labels` (M, at least the most counted labels of any row: `label_count`) below the
    rows' width, the drafter's and the target's LM heads run at the M counted label positions
    of each row only (their entries gathered, `counted_positions`), not at all T: on
    self-distilled rows about half of each row is an uncounted prompt. Same loss and metrics.

    Args:
      config: the run's config (method, loss).
      head: the drafter; target: the target's module.
      batch: {"tokens", "mask"} [B, T].
      hidden: [B, T, D] the target's post-norm last hidden state; taps: tuple of [B, T, D].
      steps: drafting steps unrolled (EAGLE-3 training: ttt_steps; EAGLE-1 training: 1).
      key: PRNG key of the feature noise (None: no noise, as in eval).
      labels: M (static), or None: every entry.
    """
    tokens, mask = batch["tokens"], batch["mask"]
    T = tokens.shape[1]
    gathered = labels is not None and labels < T
    amplitude = noise_amplitude(config)
    if key is not None and amplitude > 0:
        noisy = lambda x, k: x + jax.random.uniform(k, x.shape, x.dtype, -amplitude, amplitude)  # noqa: E731
        keys = jax.random.split(key, 1 + len(taps))
        hidden_in = noisy(hidden, keys[0]) if config.method == "eagle" else hidden
        taps = tuple(noisy(x, k) for x, k in zip(taps, keys[1:], strict=True))
    else:
        hidden_in = hidden
    feature = head.target_feature(hidden_in, taps)
    outs = unroll(head, target, tokens, feature, steps, logits=not gathered)
    draft_ids = in_draft = None
    if head.config.draft_vocab_size < head.config.vocab_size:
        draft_ids, in_draft = head.draft_to_target_ids(), head.t2d[...]
    best, full_hidden = batch.get("best"), hidden
    if gathered:  # label p is labelled by the target at p - 1, at every drafting step
        position, counted = counted_positions(mask, labels)  # [B, M]
        source = jnp.maximum(position - 1, 0)
        hidden, best = _gather(hidden, source), None if best is None else _gather(best, source)
    if draft_ids is not None and best is not None:
        law = jax.lax.stop_gradient(target.unembed_at(hidden, draft_ids))  # [B, T|M, Vd]
        best = best.astype(jnp.int32)  # [B, T|M]
    else:  # once for every step: the law at the draft ids and the greedy token
        law, best = losses.eagle_targets(jax.lax.stop_gradient(target.unembed(hidden)), draft_ids)
    loss, metrics = jnp.zeros((), jnp.float32), {}
    lc = config.loss
    for k, (h, logits) in enumerate(outs):
        if gathered:  # entry p - k - 2 of step k drafts label p
            entry = position - (k + 2)
            weights = counted.astype(jnp.float32) * (entry >= 0)
            logits = head.draft_logits(target, _gather(h, jnp.maximum(entry, 0)))  # [B, M, Vd]
            step_loss, m = losses.eagle_label_loss(
                logits, law, best, weights, draft_ids, in_draft, lc.kind, lc.temperature
            )
        else:
            step_loss, m = losses.eagle_step_loss(
                logits, law, mask, k, draft_ids, in_draft, lc.kind, lc.temperature,
                target_best=best,
            )  # fmt: skip
        metrics.update({f"step_{k}/{n}": v for n, v in m.items() if n != "coverage" or k == 0})
        if k == 0:
            first = step_loss
        loss = loss + lc.decay**k * step_loss
    if config.method == "eagle":
        feature = losses.eagle_feature_loss(outs[0][0], full_hidden, mask)
        metrics["feature_loss"] = feature
        loss = lc.feature_weight * feature + lc.token_weight * first
    return loss, metrics


# ------------------------------------------------------------------------------ the state


def make_head(config, target: Model, counts: np.ndarray | None = None) -> EagleHead:
    """A fresh drafter for `target` from the seed; EAGLE-3's draft vocabulary from `counts`."""
    h = config.head
    options = {"base_model": str(config.target)}
    if config.method == "eagle":
        options["fc_bias"] = bool(h.fc_bias)
    else:
        options["tap_layers"] = tap_layers(config, target)
        options["draft_vocab_size"] = int(h.draft_vocab_size)
    if h.get("intermediate_size", 0):
        options["layer"] = {"intermediate_size": int(h.intermediate_size)}
    head = EagleHead.for_target(target, config.method, seed=config.seed, **options)
    c = head.config
    if c.method == "eagle3" and c.draft_vocab_size < c.vocab_size:
        if counts is None:
            raise ValueError("a reduced draft vocabulary needs the training rows' token counts")
        d2t, t2d = draft_vocabulary(counts, c.draft_vocab_size)
        head.d2t.set_value(jnp.asarray(d2t, jnp.int32))
        head.t2d.set_value(jnp.asarray(t2d))
    return head


def make_state(config, target: Model, counts: np.ndarray | None = None):
    """(graphdef, state, schedule): nnx.split((drafter, optimizer)) and the lr schedule."""
    tx, schedule = loop.make_optimizer(config.train)
    head = make_head(config, target, counts)
    graphdef, state = nnx.split((head, nnx.Optimizer(head, tx, wrt=nnx.Param)))
    return graphdef, state, schedule


def make_steps(config, graphdef, target: Model, layout=None, shardings=None, labels=None):
    """(train_step, eval_step): (state, batch) -> (state, metrics) / metrics; jitted.

    The target's parameters are an argument of the compiled steps (not constants folded into
    them); its features come from the batch when precomputed, else from its forward.
    layout, shardings: the run's `parallel.Layout` and the state's shardings
    (`loop.place_state`; the target's parameters are placed by the same rules); None: one
    device. labels: `compute_losses`'s (the most counted labels of any row), or None.
    """
    t_graphdef, t_params = nnx.split(target.module)
    t_params = parallel.shard_params(t_params, layout, "target parameters", target.config.head_dim)
    taps_ids = tap_layers(config, target)
    train_steps = config.ttt_steps if config.method == "eagle3" else 1
    nan_at = config.train.debug_nan_at_step

    def features(module, batch):
        if "hidden" in batch:
            stored = batch.get("taps")
            return batch["hidden"], tuple(stored[:, :, i] for i in range(len(taps_ids)))
        hidden, taps = _forward(module, batch["tokens"], taps_ids)
        return jax.lax.stop_gradient(hidden), jax.lax.stop_gradient(taps)

    def train_step(state, batch, t_params):
        head, optimizer = nnx.merge(graphdef, state)
        module = nnx.merge(t_graphdef, t_params)
        hidden, taps = features(module, batch)
        key = jax.random.fold_in(jax.random.key(config.seed), optimizer.step[...])

        def loss_fn(head):
            return compute_losses(config, head, module, batch, hidden, taps, train_steps, key,
                                  labels)  # fmt: skip

        return loop.update(head, optimizer, loss_fn, nan_at)

    def eval_step(state, batch, t_params):
        head, _ = nnx.merge(graphdef, state)
        module = nnx.merge(t_graphdef, t_params)
        hidden, taps = features(module, batch)
        # The training objective without noise (EAGLE-1's reads step 0 only, whatever the
        # unroll), plus every step's metrics.
        loss, metrics = compute_losses(config, head, module, batch, hidden, taps, config.ttt_steps,
                                       labels=labels)  # fmt: skip
        return {"loss": loss, **metrics}

    step = loop.jit_train_step(train_step, layout, shardings)
    evaluate = jax.jit(eval_step)
    return (
        lambda s, b: step(s, b, t_params),
        loop.on_layout(lambda s, b: evaluate(s, b, t_params), layout),
    )


# ----------------------------------------------------------------------------------- the run


def train_eagle(config: ml_collections.ConfigDict, workdir, *, target=None) -> dict:
    """Trains (or resumes) an EAGLE / EAGLE-3 drafter on `config.target` and exports it.

    Resume order as `specjax.train.loop` states it; the rows (hence the token counts and the
    draft vocabulary) are rebuilt deterministically, and d2t / t2d are also restored from
    the checkpoint.

    Args:
      config: see `default_config`.
      workdir: the run's directory (created if missing).
      target: a loaded Model to use instead of loading `config.target`.
    Returns:
      Summary dict (`specjax.train.trainer.fit`'s; also results.json's one run): task, step,
      resumed_from, train_loss, eval_loss, method, top1 and ce (per drafting step, held-out
      rows), ttt_steps, tap_layers, draft_vocab_size, num_params, train_rows, data_kind,
      coverage (EAGLE-3: target argmaxes inside the draft vocabulary), feature_loss
      (EAGLE-1), train_seconds, heads_dir (None, with export_error, if the export was
      refused).
    """
    check_config(config)
    workdir, layout = trainer.begin(config, workdir)
    mesh = None if layout is None else layout.mesh

    # Setup: target, rows, draft vocabulary, features, drafter, optimizer.
    target = th.load_target(config, target, mesh)
    V = target.config.vocab_size
    if config.head.draft_vocab_size > V:
        raise ValueError(
            f"config.head.draft_vocab_size={config.head.draft_vocab_size} exceeds the "
            f"target's vocab_size={V}"
        )
    train_rows, eval_rows = th.prepare_rows(config, target, workdir, mesh)
    counts = token_counts(train_rows, V)
    if config.features.precompute:
        attach_features(config, target, {"train": train_rows, "eval": eval_rows}, workdir, mesh)
    graphdef, state, schedule = make_state(config, target, counts)
    state, shardings = loop.place_state(state, layout)
    log.info("%s drafter: %d rows of %d tokens (%s)", config.method, batching.num_rows(train_rows),
             train_rows["tokens"].shape[1], config.data.kind)  # fmt: skip

    # Restore, loop, eval, export, results.json.
    pieces = trainer.Pieces(
        task="train_eagle", graphdef=graphdef, schedule=schedule, train_rows=train_rows,
        eval_rows=eval_rows,
        make_steps=lambda start: make_steps(config, graphdef, target, layout, shardings,
                                            label_count(train_rows, eval_rows)),
        evaluate=th.evaluate, resume_keys=RESUME_KEYS, desc=f"train {config.method}",
        tokens_per_step=config.train.batch_size * train_rows["tokens"].shape[1],
        summarize=lambda head, final: _summary(config, head, final, train_rows),
        export=lambda head: th.export_draft(config, head, workdir),
        outputs={"heads_dir": workdir / HEADS_DIR},
    )  # fmt: skip
    summary = trainer.fit(config, workdir, layout, state, pieces)
    log.info("%s: eval top-1 by step %s", config.method,
             " / ".join(f"{a:.2f}" for a in summary["top1"]))  # fmt: skip
    return summary


def _summary(config, head: EagleHead, final: dict, train_rows: dict) -> dict:
    """The EAGLE trainer's own summary fields."""
    c, n = head.config, config.ttt_steps
    summary = {
        "method": config.method,
        "top1": [final[f"eval/step_{k}/top1"] for k in range(n)],
        "ce": [final[f"eval/step_{k}/ce"] for k in range(n)],
        "ttt_steps": n,
        "tap_layers": list(c.tap_layers),
        "draft_vocab_size": c.draft_vocab_size,
        "num_params": c.num_params(),
        "train_rows": batching.num_rows(train_rows),
        "data_kind": config.data.kind,
    }
    if config.method == "eagle3":
        summary["coverage"] = final["eval/step_0/coverage"]
    else:
        summary["feature_loss"] = final["eval/feature_loss"]
    return summary
