"""Train a decoder LM from scratch: corpus -> BPE tokenizer -> packed rows -> AdamW -> HF export.

    from specjax.train import lm
    config = lm.default_config()            # or configs/train_lm.py:get_config("tiny")
    summary = lm.train_lm(config, "/tmp/lm")
    model = sj.load_model("/tmp/lm")         # the exported <workdir>/hf

The trainer reads top to bottom: setup (data, tokenizer, model, optimizer), then the run every
trainer shares (`specjax.train.trainer.fit`): restore, loop (train step, metrics, eval,
checkpoints), final eval and save, export, results.json. A workdir holds:

    tokenizer/           tokenizer.json (+ tokenizer_config.json) used for the whole run
    checkpoints/<step>/  orbax: model + optimizer state, and the config as JSON
    metrics.jsonl        one record per log/eval step; tensorboard/ the same as event files
    hf/                  the final model in Hugging Face layout (`sj.load_model(workdir)`)
    results.json         {"task": "train_lm", "runs": [summary]}

Steps count optimizer updates: step s is the state after s updates, trained on the batches
`batching.batches` yields for indices 0..s-1.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from specjax import data, parallel
from specjax.cache import KVCache
from specjax.io.hf import save_hf
from specjax.io.tokenizer import Tokenizer, train_bpe
from specjax.models import Decoder, Model, ModelConfig
from specjax.train import batching, loop, trainer

log = logging.getLogger(__name__)

CHECKPOINTS, HF, RESULTS = trainer.CHECKPOINTS, trainer.HF, trainer.RESULTS
TOKENIZER = "tokenizer"
# What a resumed run must share with the checkpoint's run.
RESUME_KEYS = ("model", "data", "seed", "train.batch_size", "train.seq_len")


def default_config() -> ml_collections.ConfigDict:
    """Every knob of `train_lm` with its default (a small Llama on the embedded corpus).

    Returns:
      ConfigDict with task, seed (init and batch order), data (load_text_dataset and
      split_dataset arguments), tokenizer (path of a tokenizer.json or a directory holding
      one, "" = train a BPE on the train split), model (ModelConfig fields; the vocabulary
      size comes from the tokenizer), train (`loop.train_config`'s knobs, and seq_len: the
      tokens of a packed row) and mesh (data, model, fsdp: the device mesh,
      `loop.make_layout`; 1 x 1 = one device).
    """
    placeholder = ml_collections.config_dict.placeholder
    config = ml_collections.ConfigDict()
    config.task = "train_lm"
    config.seed = 0
    config.data = dict(
        source="embedded",
        eval_fraction=0.05,
        seed=0,
        max_documents=placeholder(int),
        max_chars=placeholder(int),
        sample_by="document",
    )
    # path: a tokenizer.json, or a directory holding one (a tokenizer dir, an HF model dir,
    # another run's workdir); "" trains a BPE of vocab_size on the train split.
    config.tokenizer = dict(path="", vocab_size=2048, min_frequency=2)
    config.model = dict(
        model_type="llama",
        num_layers=2,
        hidden_size=128,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        intermediate_size=384,
        max_position_embeddings=512,
        # None: the family's choice (Llama untied; GPT-2 always tied, with a GELU).
        tie_word_embeddings=placeholder(bool),
        rope_theta=10000.0,
        dtype="float32",
    )
    config.train = loop.train_config(batch_size=16, num_steps=500, learning_rate=3e-3,
                                     warmup_steps=50, weight_decay=0.1, b2=0.95)  # fmt: skip
    config.train.seq_len = 128  # the LM's own knob: tokens a packed row trains on
    config.mesh = loop.mesh_config()
    return config


# ----------------------------------------------------------------------------------- setup


def load_tokenizer(config: ml_collections.ConfigDict, texts, workdir: Path) -> Tokenizer:
    """The run's tokenizer, in resume order: the workdir's own, the configured path, a new BPE.

    A new or configured tokenizer is saved to `<workdir>/tokenizer` so that a resumed run
    tokenizes exactly as the interrupted one did.
    """
    own = workdir / TOKENIZER
    if (own / "tokenizer.json").is_file():
        return Tokenizer.from_dir(own)
    path = Path(config.tokenizer.path) if config.tokenizer.path else None
    if path is not None and path.is_dir():
        # A tokenizer directory, an HF model directory or another run's workdir.
        found = [d for d in (path, path / TOKENIZER, path / HF) if (d / "tokenizer.json").is_file()]
        if not found:
            raise FileNotFoundError(f"tokenizer.path={str(path)!r} holds no tokenizer.json")
        tokenizer = Tokenizer.from_dir(found[0])
    elif path is not None:
        tokenizer = Tokenizer.from_file(path)
    else:
        tokenizer = train_bpe(
            texts, config.tokenizer.vocab_size, min_frequency=config.tokenizer.min_frequency
        )
    if jax.process_index() == 0:
        tokenizer.save(own)
    return tokenizer


def prepare_data(config: ml_collections.ConfigDict, workdir: Path):
    """Corpus -> (tokenizer, train rows [N, T+1], eval rows [M, T+1]) int32."""
    d = config.data
    ds = data.load_text_dataset(
        d.source, max_documents=d.max_documents, max_chars=d.max_chars, sample_by=d.sample_by
    )
    train_ds, eval_ds = data.split_dataset(ds, d.eval_fraction, d.seed)
    tokenizer = load_tokenizer(config, train_ds["text"], workdir)
    seq_len, eos = config.train.seq_len, tokenizer.eos_token_id
    train_rows = batching.pack(batching.tokenize(train_ds["text"], tokenizer), seq_len, eos)
    try:
        eval_rows = batching.pack(batching.tokenize(eval_ds["text"], tokenizer), seq_len, eos)
    except ValueError as e:
        raise ValueError(
            f"the eval split ({len(eval_ds)} documents) is too small for seq_len={seq_len}: "
            f"raise data.eval_fraction or use a larger corpus ({e})"
        ) from e
    log.info(
        "data: %d train rows, %d eval rows of %d tokens", len(train_rows), len(eval_rows), seq_len
    )
    return tokenizer, train_rows, eval_rows


def model_config(model: ml_collections.ConfigDict, tokenizer: Tokenizer) -> ModelConfig:
    """ModelConfig from the config's model fields; vocabulary and special ids from the tokenizer."""
    return ModelConfig(
        **model.to_dict(),
        vocab_size=tokenizer.vocab_size,
        eos_token_ids=tuple(tokenizer.eos_token_ids),
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def init_train_state(
    model_cfg: ModelConfig, tx: optax.GradientTransformation, seed: int,
    layout: parallel.Layout | None = None,
):  # fmt: skip
    """A fresh decoder and its optimizer, as (graphdef, state) of `nnx.split((decoder, optimizer))`.

    Initialised in one jitted call: eager initialisation would compile every initializer
    separately (seconds on a CPU). The parameters depend only on `seed`. Under `layout` the
    call writes each array straight onto its shards (no device ever holds the whole model).
    """

    def create():
        decoder = Decoder(model_cfg, nnx.Rngs(seed))
        return decoder, nnx.Optimizer(decoder, tx, wrt=nnx.Param)

    graphdef, abstract = nnx.split(nnx.eval_shape(create))
    init = lambda: nnx.split(create())[1]  # noqa: E731
    if layout is None:
        return graphdef, jax.jit(init)()
    return graphdef, jax.jit(init, out_shardings=parallel.tree_shardings(abstract, layout))()


def next_token_loss(decoder: Decoder, inputs, targets):
    """Mean cross entropy of next-token prediction. inputs, targets: [B, T] int32 -> [] float32."""
    B, T = inputs.shape
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))  # [B, T]
    # A fresh cache of exactly T slots: the causal block mask over it is plain causal attention.
    cache = KVCache.for_model(decoder.config, B, T)
    logits = decoder(inputs, positions, cache).logits  # [B, T, V] float32
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def make_train_step(graphdef, nan_at_step: int = -1, layout=None, shardings=None):
    """The update: (state, batch) -> (new state, {"loss": loss}); jitted, the state donated.

    Args:
      graphdef: from `nnx.split((decoder, optimizer))`.
      nan_at_step: > 0 makes the loss of that step NaN (a test hook for the non-finite guard).
      layout, shardings: the run's `parallel.Layout` and the state's shardings
        (`loop.place_state`); None: one device.
    """

    def train_step(state, inputs, targets):
        decoder, optimizer = nnx.merge(graphdef, state)
        loss_fn = lambda model: (next_token_loss(model, inputs, targets), {})  # noqa: E731
        return loop.update(decoder, optimizer, loss_fn, nan_at_step)

    step = loop.jit_train_step(train_step, layout, shardings)
    return lambda state, batch: step(state, batch["inputs"], batch["targets"])


def make_eval_step(graphdef):
    """The jitted eval loss: (state, inputs, targets) -> [] float32."""

    @jax.jit
    def eval_step(state, inputs, targets):
        decoder, _ = nnx.merge(graphdef, state)
        return next_token_loss(decoder, inputs, targets)

    return eval_step


def evaluate(eval_step, state, eval_rows: np.ndarray, batch_size: int, num_batches: int) -> dict:
    """Mean loss and perplexity over the first `num_batches` batches of the eval rows (in order)."""
    batch_size = min(batch_size, len(eval_rows))
    count = max(1, min(num_batches, len(eval_rows) // batch_size))
    losses = []
    for i in range(count):
        rows = eval_rows[i * batch_size : (i + 1) * batch_size]  # [B, T + 1]
        losses.append(eval_step(state, rows[:, :-1], rows[:, 1:]))
    loss = float(np.mean(jax.device_get(losses)))
    return {"eval/loss": loss, "eval/perplexity": math.exp(min(loss, 50.0))}


# ----------------------------------------------------------------------------------- the run


def train_lm(config: ml_collections.ConfigDict, workdir) -> dict:
    """Trains (or resumes) a decoder LM as `config` says and exports it to `<workdir>/hf`.

    Resume order (a restarted run redoes exactly what the interrupted one would have done):
      1. Tokenizer: `<workdir>/tokenizer` if present, else `config.tokenizer.path`, else a BPE
         trained on the train split; a new one is saved to `<workdir>/tokenizer` first.
      2. Model and optimizer are built from `config.seed` as on a fresh run, then replaced by
         the latest committed checkpoint in `<workdir>/checkpoints` (parameters, AdamW moments
         and step count, hence the learning-rate schedule). Interrupted saves are ignored.
      3. Data resumes at batch index `step` (`batching.batches(..., start_step=step)`).
      4. `metrics.jsonl` drops its records after `step`; the redone steps are logged again.

    Args:
      config: see `default_config`.
      workdir: the run's directory (created if missing).
    Returns:
      Summary dict (`specjax.train.trainer.fit`'s): task, step, resumed_from, train_loss,
      eval_loss, eval_perplexity, num_params, tokens_seen, train_seconds, hf_dir; also the
      one run of `<workdir>/results.json`.
    Raises:
      FloatingPointError: the training loss became NaN or infinite (the message names the step).
    """
    workdir, layout = trainer.begin(config, workdir)
    train = config.train

    # Setup: data, tokenizer, model, optimizer (placed on the mesh by the rules).
    tokenizer, train_rows, eval_rows = prepare_data(config, workdir)
    tx, schedule = loop.make_optimizer(train)
    model_cfg = model_config(config.model, tokenizer)
    graphdef, state = init_train_state(model_cfg, tx, config.seed, layout)
    state, shardings = loop.place_state(state, layout)
    log.info(
        "model: %d layers, D=%d, V=%d, %.2fM parameters",
        model_cfg.num_layers,
        model_cfg.hidden_size,
        model_cfg.vocab_size,
        model_cfg.num_params() / 1e6,
    )

    def make_steps(start: int):  # the same steps whatever the restored step
        train_step = make_train_step(graphdef, train.debug_nan_at_step, layout, shardings)
        return train_step, loop.on_layout(make_eval_step(graphdef), layout)

    # Restore, loop, eval, export, results.json.
    pieces = trainer.Pieces(
        task="train_lm", graphdef=graphdef, schedule=schedule, train_rows=train_rows,
        eval_rows=eval_rows, make_steps=make_steps, evaluate=evaluate, resume_keys=RESUME_KEYS,
        desc=f"train {config.model.num_layers}x{config.model.hidden_size}",
        tokens_per_step=train.batch_size * train.seq_len,
        summarize=lambda decoder, final: _summary(config, decoder, final),
        export=lambda decoder: save_hf(Model(decoder, tokenizer), workdir / HF),
        outputs={"hf_dir": workdir / HF},
    )  # fmt: skip
    summary = trainer.fit(config, workdir, layout, state, pieces)
    log.info(
        "trained: eval loss %.3f, perplexity %.1f", summary["eval_loss"], summary["eval_perplexity"]
    )
    return summary


def _summary(config, decoder: Decoder, final: dict) -> dict:
    """The LM's own summary fields."""
    train = config.train
    return {
        "eval_perplexity": final["eval/perplexity"],
        "num_params": decoder.config.num_params(),
        "tokens_seen": int(train.num_steps * train.batch_size * train.seq_len),
    }
