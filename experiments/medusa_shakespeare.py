"""Medusa-2 heads vs a truncated self-draft on a small GPT-2-style model of tinyshakespeare.

Seed exercise 3 (issue 8). Four stages, each a library call, all on CPU:

1. LM: a BPE tokenizer (V=2048) trained on the corpus and a GPT-2-style decoder trained from
   scratch (`specjax.train.lm.train_lm`, model_type "gpt2", 4 layers x D=128, 1.1M
   parameters, 600 steps of 8x128 tokens; the single file is split into documents by
   paragraph, 5% held out). D=256 trains at ~640 tokens/s on the shared 2-core VM (load ~7),
   too slow for "a few minutes"; D=128 runs at ~2,000.
2. Medusa-2: 3 heads (t+2..t+4) trained jointly with the backbone
   (`specjax.train.heads.train_heads`, `joint.enabled=True`: 120 heads-only steps, then the
   backbone joins at lr 1e-4 with its own warm-up; loss LM + 0.2 Medusa + 1.0 KL to the
   original target, as configs/train_medusa.py:joint). Rows are self-distilled: the original
   target's own continuations (96 tokens) of 768 train-split prompts, sampled at
   `--distill-temperature` (default 1). Why self-distilled: the heads must predict what the
   target writes, not what Shakespeare wrote. Why T=1: on the target's own T=1 samples the LM
   term's expected gradient at the original weights is zero (E_p[grad log p] = 0), so the
   backbone moves only as far as the heads' loss pulls it; greedy (T=0) rows pull it towards
   its own argmax path (measured: `--distill-temperature 0` raises the target's held-out loss
   by 0.28 nats). `--heads-data corpus` trains on the text instead.
3. Drafts: the Medusa-2 *fine-tuned* target (the model every method verifies against) with
   its heads, and vanilla drafts = that same fine-tuned target truncated to its first 1 and
   2 layers (`specjax.bench.pairs.truncated_draft`, no training).
4. Decoding 32 held-out prompts (eval split, never trained on) x 64 tokens at T=0 (greedy
   verification) and T=1 (Medusa's top-k drafts: one-hot rule, the default; draft_model and
   the "sampled" Medusa rows, nodes drawn from their head's law: probabilistic rule):
   Medusa chain of 3, Medusa top-k tree topk_3x2 (14 drafts), Medusa sparse tree of 14
   drafts built by `specjax.decoding.trees.sparse_tree` from the heads' per-rank accuracies
   measured here, and draft_model chains of 3. Per-position acceptance (unconditional and
   conditional) and tau, pooled by counts over the prompts (`specjax.bench.timing.pool_stats`).
   At T=0 every method's tokens are checked equal to plain greedy decoding. Optional
   (`--timing-prompts N`): wall-clock speedup vs autoregressive at batch 1, AR and method
   interleaved (`Runner.compare`); on the shared 2-core VM these are indicative only.

Also measured: the target's next-token loss on the held-out corpus before and after
Medusa-2 (with KL(original || fine-tuned) and their argmax agreement), and the heads' top-1 /
top-5 accuracy (the trainer's summary and a recomputation over every eval row, with the
accuracy of each rank 1..5, which `sparse_tree` needs and the trainer does not report).

    python experiments/medusa_shakespeare.py --data ../shared/data/tinyshakespeare.txt \
        --timing-prompts 4                                    # ~20 min: the main run
    python experiments/medusa_shakespeare.py --data ../shared/data/tinyshakespeare.txt \
        --timing-prompts 4 --distill-temperature 0 --tag _distill_t0   # + ~13 min, same LM
    python experiments/medusa_shakespeare.py --data ../shared/data/tinyshakespeare.txt \
        --quick --tag _quick                                  # smoke: ~4 min, tiny numbers
    python experiments/medusa_shakespeare.py --data ... --replot [--tag ...]   # png from json

Trained models go to --workdir (default workdirs/medusa_shakespeare, or ..._quick):
`lm/` and `medusa2_<heads data>[_T<distill temperature>]/`. A second run with the same
workdir reuses them (both trainers resume from their finished checkpoints; the distillation
rows are cached), so another --distill-temperature trains only new heads. Results:
experiments/results/medusa_shakespeare<tag>.json and .png; --log appends an entry to
experiments/LOG.md. Measured on the shared 2-core CPU VM (load 5-7): LM 5.5 min, Medusa-2
9-11 min (its heads-only steps cost as much as joint ones: the trainer differentiates the
backbone and runs the KL reference from step 1), self-distillation, measurements and decoding
~2 min, timing ~2 min.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import time
from pathlib import Path

import common
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import specjax as sj
from specjax import data
from specjax.bench import plotstyle
from specjax.bench.markdown import table
from specjax.bench.pairs import truncated_draft
from specjax.bench.timing import Runner, machine_info, make_batches, pool_stats
from specjax.cache import KVCache
from specjax.decoding import trees
from specjax.train import heads, lm

log = logging.getLogger("medusa_shakespeare")

EVAL_FRACTION, SPLIT_SEED = 0.05, 0  # the LM trainer's split; prompts come from its eval side
RANKS = 5  # per-rank accuracies measured (top-1 .. top-5)


# ------------------------------------------------------------------------------- training


def lm_config(args):
    config = lm.default_config()
    config.data.update(source=str(args.data), sample_by="paragraph",
                       eval_fraction=EVAL_FRACTION, seed=SPLIT_SEED)  # fmt: skip
    config.tokenizer.vocab_size = args.vocab
    # GPT-2: learned positions, LayerNorm, GELU (tanh), tied embeddings, one kv head per head.
    heads_n = max(1, args.hidden // 64)
    config.model.update(
        model_type="gpt2", num_layers=args.layers, hidden_size=args.hidden, num_heads=heads_n,
        num_kv_heads=heads_n, head_dim=args.hidden // heads_n, intermediate_size=4 * args.hidden,
        max_position_embeddings=512, tie_word_embeddings=True, hidden_act="gelu_new",
        norm_eps=1e-5,
    )  # fmt: skip
    config.train.update(seq_len=128, batch_size=args.lm_batch, num_steps=args.lm_steps,
                        learning_rate=args.lm_lr, warmup_steps=max(1, args.lm_steps // 10),
                        eval_every=max(1, args.lm_steps // 2), eval_batches=16,
                        checkpoint_every=max(1, args.lm_steps // 2), progress=False)  # fmt: skip
    return config


def medusa_config(args, lm_dir: Path):
    """configs/train_medusa.py:joint, with 3 heads on this corpus (that file is not importable
    from experiments/, so its two joint settings are repeated here)."""
    config = heads.default_config()
    config.method = "medusa"
    config.target = str(lm_dir)
    config.joint.update(enabled=True, kl_weight=1.0, heads_only_steps=args.heads_only_steps,
                        backbone_learning_rate=args.backbone_lr,
                        backbone_warmup_steps=max(1, args.heads_only_steps // 2))  # fmt: skip
    config.data.update(kind=args.heads_data, source=str(args.data), sample_by="paragraph",
                       eval_fraction=EVAL_FRACTION, seed=SPLIT_SEED,
                       num_prompts=args.distill_prompts, eval_prompts=args.distill_eval_prompts,
                       prompt_tokens=32, new_tokens=96, temperature=args.distill_temperature,
                       generate_batch_size=32, seq_len=128)  # fmt: skip
    config.heads.update(num_heads=args.num_heads, num_layers=1)
    config.train.update(batch_size=8, num_steps=args.heads_steps, learning_rate=1e-3,
                        warmup_steps=max(1, args.heads_steps // 10),
                        eval_every=max(1, args.heads_steps // 2), eval_batches=64,
                        checkpoint_every=max(1, args.heads_steps // 2), progress=False)  # fmt: skip
    return config


# --------------------------------------------------------------------------- measurements


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, state, tokens):
    model = nnx.merge(graphdef, state)
    B, T = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    out = model(tokens, positions, KVCache.for_model(model.config, B, T))
    return out.logits, out.last_hidden  # [B, T, V], [B, T, D]


def _batches(n: int, size: int):
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def target_losses(original, tuned, rows: np.ndarray, batch: int = 16) -> dict:
    """Next-token CE of both models on packed corpus rows [M, T+1], KL(orig || tuned) and
    greedy (argmax) agreement, means over every predicted position."""
    g0, s0 = nnx.split(original.module)
    g1, s1 = nnx.split(tuned.module)
    ce0, ce1, kl, agree, n = 0.0, 0.0, 0.0, 0.0, 0
    for sl in _batches(len(rows), batch):
        x, y = jnp.asarray(rows[sl, :-1]), jnp.asarray(rows[sl, 1:])
        l0, _ = _forward(g0, s0, x)
        l1, _ = _forward(g1, s1, x)
        lp0, lp1 = jax.nn.log_softmax(l0, -1), jax.nn.log_softmax(l1, -1)
        ce0 += float(optax.softmax_cross_entropy_with_integer_labels(l0, y).sum())
        ce1 += float(optax.softmax_cross_entropy_with_integer_labels(l1, y).sum())
        kl += float(jnp.sum(jnp.exp(lp0) * (lp0 - lp1)))
        agree += float(jnp.sum(jnp.argmax(l0, -1) == jnp.argmax(l1, -1)))
        n += y.size
    return dict(original=ce0 / n, tuned=ce1 / n, kl_original_tuned=kl / n,
                argmax_agreement=agree / n, positions=n)  # fmt: skip


def masked_lm_loss(model, rows: dict, batch: int = 16) -> float:
    """Masked next-token CE on {"tokens", "mask"} rows (the distilled continuation only)."""
    g, s = nnx.split(model.module)
    total, count = 0.0, 0.0
    for sl in _batches(len(rows["tokens"]), batch):
        tok = jnp.asarray(rows["tokens"][sl])
        logits, _ = _forward(g, s, tok)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tok[:, 1:])
        w = jnp.asarray(rows["mask"][sl][:, 1:], jnp.float32)
        total, count = total + float(jnp.sum(ce * w)), count + float(w.sum())
    return total / max(count, 1.0)


def rank_accuracies(target, medusa, rows: dict, batch: int = 16) -> np.ndarray:
    """[K, RANKS]: P(the label is exactly head k's rank-r token) on {"tokens", "mask"} rows.

    Head k at position t predicts tokens[t + k + 2]; counted iff mask[t + k + 2]. The rank is
    the number of logits strictly above the label's plus the lower ids tied with it (the
    tie-break of `jax.lax.top_k`, which the proposer and the trainer's top-k metric use).
    """
    g, s = nnx.split(target.module)
    K = medusa.config.num_heads
    hits, counts = np.zeros((K, RANKS)), np.zeros(K)
    for sl in _batches(len(rows["tokens"]), batch):
        tok = jnp.asarray(rows["tokens"][sl])
        mask = np.asarray(rows["mask"][sl], bool)
        _, hidden = _forward(g, s, tok)
        logits = np.asarray(medusa(hidden))  # [B, T, K, V]
        T = tok.shape[1]
        tok = np.asarray(tok)
        for k in range(K):
            lg, lab, w = logits[:, : T - k - 2, k], tok[:, k + 2 :], mask[:, k + 2 :]
            own = np.take_along_axis(lg, lab[..., None], -1)  # [B, T', 1]
            ids = np.arange(lg.shape[-1])
            rank = (lg > own).sum(-1) + ((lg == own) & (ids < lab[..., None])).sum(-1)
            for r in range(RANKS):
                hits[k, r] += np.sum((rank == r) & w)
            counts[k] += w.sum()
    return hits / np.maximum(counts, 1)[:, None]


def decode(target, prompts, new: int, temperature: float, spec, batch: int, seed: int):
    """(pooled stats, tokens per prompt, seconds) of generate over the prompts in batches."""
    sampling = sj.SamplingParams(temperature=temperature, seed=seed)
    stats, tokens = [], []
    start = time.perf_counter()
    for chunk in make_batches(prompts, batch):
        out = sj.generate(target, chunk, new, sampling=sampling, stop_token_ids=[],
                          speculative_config=spec)  # fmt: skip
        stats.append(out.stats)
        tokens += out.tokens
    return pool_stats(stats), tokens[: len(prompts)], time.perf_counter() - start


# ------------------------------------------------------------------------------------ main


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, type=Path, help="tinyshakespeare.txt (or any .txt)")
    p.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="default: workdirs/medusa_shakespeare[_quick] in the repository root",
    )
    p.add_argument("--tag", default="", help="suffix of the result files")
    p.add_argument("--quick", action="store_true", help="smoke settings (minutes, tiny numbers)")
    # LM
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--lm-steps", type=int, default=600)
    p.add_argument("--lm-batch", type=int, default=8)
    p.add_argument("--lm-lr", type=float, default=3e-3)
    # Medusa-2
    p.add_argument("--num-heads", type=int, default=3)
    p.add_argument("--heads-data", choices=("self_distill", "corpus"), default="self_distill")
    p.add_argument("--distill-temperature", type=float, default=1.0)
    p.add_argument("--distill-prompts", type=int, default=768)
    p.add_argument("--distill-eval-prompts", type=int, default=64)
    p.add_argument("--heads-steps", type=int, default=400)
    p.add_argument("--heads-only-steps", type=int, default=120)
    p.add_argument("--backbone-lr", type=float, default=1e-4)
    # decoding
    p.add_argument("--draft-layers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--tree-drafts", type=int, default=14, help="nodes of the sparse tree")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--timing-prompts",
        type=int,
        default=0,
        help="> 0: also time each method vs AR at batch 1 on this many prompts",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--log", action="store_true", help="append an entry to experiments/LOG.md")
    p.add_argument(
        "--replot",
        action="store_true",
        help="only redraw the .png from the run's .json (same --tag)",
    )
    args = p.parse_args()
    if args.quick:
        args.layers, args.hidden, args.vocab = 2, 64, 512
        args.lm_steps, args.lm_batch = 60, 8
        args.distill_prompts, args.distill_eval_prompts = 32, 8
        args.heads_steps, args.heads_only_steps = 40, 20
        args.prompts, args.new, args.draft_layers = 8, 24, [1]
    if not args.data.is_file():
        p.error(f"--data {args.data}: no such file")
    if args.workdir is None:
        quick = "_quick" if args.quick else ""
        args.workdir = common.HERE.parent / "workdirs" / f"medusa_shakespeare{quick}"
    return args


def replot(tag: str) -> None:
    res = json.loads((common.RESULTS / f"medusa_shakespeare{tag}.json").read_text())
    args = argparse.Namespace(**res["args"])
    K = len(res["head_rank_accuracy"])
    plot(
        res["rows"], common.RESULTS / f"medusa_shakespeare{tag}.png", K, res["lm"]["summary"], args
    )


def main() -> None:
    args = parse_args()
    if args.replot:
        return replot(args.tag)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", force=True)
    for noisy in ("absl", "orbax", "jax._src", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    began = time.perf_counter()
    timings = {}

    # 1. The LM.
    lm_dir = args.workdir / "lm"
    t = time.perf_counter()
    lm_summary = lm.train_lm(lm_config(args), lm_dir)
    timings["lm_s"] = time.perf_counter() - t
    original = sj.load_model(lm_dir)
    log.info("LM: eval loss %.3f (%.1fs)", lm_summary["eval_loss"], timings["lm_s"])

    # 2. Medusa-2 heads, jointly with the backbone.
    med_dir = args.workdir / (
        f"medusa2_{args.heads_data}"
        + (f"_T{args.distill_temperature:g}" if args.heads_data == "self_distill" else "")
    )
    hc = medusa_config(args, lm_dir)
    t = time.perf_counter()
    h_summary = heads.train_heads(hc, med_dir, target=original)
    timings["medusa2_s"] = time.perf_counter() - t
    tuned = sj.load_model(med_dir)  # <workdir>/hf: the fine-tuned backbone
    medusa = sj.load_draft(med_dir, target=tuned)
    log.info("Medusa-2: top-1 %s (%.1fs)", h_summary["top1"], timings["medusa2_s"])

    # The target's own quality before/after, and the heads' per-rank accuracy.
    t = time.perf_counter()
    _, _, corpus_eval = lm.prepare_data(lm_config(args), lm_dir)  # the LM's own eval rows
    losses = target_losses(original, tuned, corpus_eval)
    _, head_eval = heads.prepare_rows(hc, original, med_dir)  # cached distill rows
    losses["distill_eval_original"] = masked_lm_loss(original, head_eval)
    losses["distill_eval_tuned"] = masked_lm_loss(tuned, head_eval)
    acc = rank_accuracies(tuned, medusa, head_eval)  # [K, RANKS]
    timings["measure_s"] = time.perf_counter() - t
    K = medusa.config.num_heads
    sparse = trees.sparse_tree(acc, args.tree_drafts)

    # 3. Drafts, and 4. decoding.
    drafts = {L: truncated_draft(tuned, L) for L in args.draft_layers}
    methods = {
        f"medusa chain {K}": {"method": "medusa", "model": medusa, "num_speculative_tokens": K},
        f"medusa topk_{K}x2": {"method": "medusa", "model": medusa, "num_speculative_tokens": K,
                               "draft_tree": f"topk_{K}x2"},
        f"medusa sparse {args.tree_drafts}": {"method": "medusa", "model": medusa,
                                              "num_speculative_tokens": K, "draft_tree": sparse},
    }  # fmt: skip
    for L, draft in drafts.items():
        methods[f"draft L{L} chain {K}"] = {
            "method": "draft_model",
            "model": draft,
            "num_speculative_tokens": K,
        }
    # T > 0 only: Medusa nodes sampled from their head's law, verified probabilistically
    # (as the draft model's chain is), instead of the default one-hot rule on top-k tokens.
    sampled = {
        f"{name} sampled": {**methods[name], "verification": "probabilistic"}
        for name in (f"medusa chain {K}", f"medusa topk_{K}x2")
    }
    at = lambda temperature: {**methods, **(sampled if temperature > 0 else {})}  # noqa: E731
    _, eval_ds = data.split_dataset(
        data.load_text_dataset(args.data, sample_by="paragraph"), EVAL_FRACTION, SPLIT_SEED
    )
    prompts = [ids for _, ids in data.held_out_prompts(
        eval_ds, tuned.tokenizer, args.prompts, args.prompt_tokens, seed=args.seed + 100)]  # fmt: skip
    t = time.perf_counter()
    rows = []
    _, greedy, _ = decode(tuned, prompts, args.new, 0.0, None, args.batch, args.seed)
    for temperature in (0.0, 1.0):
        for name, spec in at(temperature).items():
            try:
                stats, tokens, secs = decode(tuned, prompts, args.new, temperature, spec,
                                             args.batch, args.seed)  # fmt: skip
            except ValueError as e:  # a rule this library version refuses for the method
                log.warning("T=%g %s skipped: %s", temperature, name, e)
                continue
            row = dict(
                method=name, temperature=temperature, verification=rule(spec, temperature),
                tau=stats["tau"], steps=stats["steps"],
                draft_tokens=stats["draft_tokens"], accepted_tokens=stats["accepted_tokens"],
                acceptance_by_position=stats["acceptance_by_position"],
                conditional_acceptance_by_position=stats["conditional_acceptance_by_position"],
                offered_by_position=stats["offered_by_position"],
                accepted_by_position=stats["accepted_by_position"],
                seconds_with_compile=secs,
                equals_greedy=(tokens == greedy) if temperature == 0 else None,
            )  # fmt: skip
            rows.append(row)
            log.info("T=%g %-22s tau %.2f  u %s  c %s  (%.1fs)%s", temperature, name, row["tau"],
                     np.round(row["acceptance_by_position"], 3).tolist(),
                     np.round(row["conditional_acceptance_by_position"], 3).tolist(), secs,
                     "" if temperature else f"  == greedy: {row['equals_greedy']}")  # fmt: skip
    timings["decode_s"] = time.perf_counter() - t

    # Optional: wall-clock vs AR at batch 1, interleaved.
    speed = []
    if args.timing_prompts > 0:
        t = time.perf_counter()
        runner = Runner(tuned, args.new, args.seed)
        workloads = {"shakespeare": make_batches(prompts[: args.timing_prompts], 1)}
        done = {(r["method"], r["temperature"]) for r in rows}
        for temperature in (0.0, 1.0):
            for name, spec in at(temperature).items():
                if (name, temperature) not in done:
                    continue
                res = runner.compare(workloads, temperature, spec, args.repeats)
                cell = res["categories"]["shakespeare"]
                ar, mt = np.median(cell["ar_times_s"]), np.median(cell["times_s"])
                speed.append(dict(method=name, temperature=temperature, speedup=float(ar / mt),
                                  ar_s=float(ar), method_s=float(mt), tau=cell["stats"]["tau"],
                                  retraced=res["retraced"], ar_times_s=cell["ar_times_s"],
                                  times_s=cell["times_s"]))  # fmt: skip
                log.info("timing T=%g %-22s speedup %.2f (AR %.2fs, method %.2fs)",
                         temperature, name, ar / mt, ar, mt)  # fmt: skip
        timings["timing_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - began

    result = dict(
        command=common.command(),
        machine=machine_info(),
        args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        lm=dict(
            summary=lm_summary,
            model=lm_config(args).model.to_dict(),
            params_M=original.config.num_params() / 1e6,
            vocab_size=original.config.vocab_size,
        ),  # fmt: skip
        medusa2=dict(summary=h_summary, config=hc.to_dict()),
        target_loss=losses,
        head_rank_accuracy=acc.tolist(),
        head_top1_all_eval_rows=acc[:, 0].tolist(),
        head_top5_all_eval_rows=acc.sum(1).tolist(),
        sparse_tree_choices=[list(c) for c in sparse.choices],
        draft_params_M={L: d.config.num_params() / 1e6 for L, d in drafts.items()},
        prompts=len(prompts),
        new_tokens=args.new,
        rows=rows,
        speed=speed,
        timings_s=timings,
    )
    common.save_json(f"medusa_shakespeare{args.tag}", result)
    png = common.RESULTS / f"medusa_shakespeare{args.tag}.png"
    plot(rows, png, K, lm_summary, args)
    body = report(result, args)
    print(body)
    if args.log:
        common.log_entry(
            f"Medusa-2 heads vs a truncated self-draft on tinyshakespeare ({args.layers}x"
            f"{args.hidden} GPT-2)",
            body,
        )


def rule(spec: dict, temperature: float) -> str:
    """The verification rule "auto" resolves to (specjax.decoding.spec_config)."""
    if "verification" in spec:
        return spec["verification"]
    if temperature == 0:
        return "greedy"
    return "probabilistic" if spec["method"] == "draft_model" else "one_hot"


def _style(name: str):
    """(colour, line style, marker): Medusa red (chain -, top-k tree --, sparse :; sampled
    nodes with square markers), the truncated drafts blue (1 layer) and a spare colour."""
    if name.startswith("medusa"):
        color = plotstyle.method_color("medusa")
        ls = {"chain": "-", "topk": "--", "sparse": ":"}[name.split()[1].split("_")[0]]
        return color, ls, ("s" if name.endswith("sampled") else "o")
    return plotstyle.method_color("draft_model" if " L1 " in name else name), "-", "o"


def plot(rows, path, K, lm_summary, args) -> None:
    with plotstyle.figure(path, ncols=2, width=11, height=4.2) as (fig, axes):
        for ax, temperature in zip(axes, (0.0, 1.0), strict=True):
            for r in (r for r in rows if r["temperature"] == temperature):
                color, ls, marker = _style(r["method"])
                x = np.arange(1, len(r["acceptance_by_position"]) + 1)
                ax.plot(x, r["acceptance_by_position"], ls, color=color, marker=marker,
                        label=f"{r['method']} (tau {r['tau']:.2f})")  # fmt: skip
            ax.set_xticks(np.arange(1, K + 1))
            ax.set_ylim(0, 1)
            ax.set_xlabel("draft position i (depth)")
            ax.set_ylabel("P(step accepts >= i drafts)")
            how = ("greedy verification" if temperature == 0 else
                   "Medusa one-hot, 'sampled' and draft_model probabilistic")  # fmt: skip
            ax.set_title(f"T={temperature:g} ({how})")
            ax.legend(loc="best")
        rows_of = (f"T={args.distill_temperature:g} self-distilled rows"
                   if args.heads_data == "self_distill" else "corpus rows")  # fmt: skip
        fig.suptitle(
            f"Medusa-2 ({K} heads, {rows_of}) vs truncated draft: {args.layers}x{args.hidden} "
            f"GPT-2 on tinyshakespeare (eval loss {lm_summary['eval_loss']:.2f}), "
            f"{args.prompts} held-out prompts x {args.new} tokens"
        )


def _ran(summary: dict, seconds: float) -> str:
    if summary["resumed_from"] >= summary["step"]:
        return "trained earlier, reused from the workdir"
    return f"{seconds / 60:.1f} min"


def _summary(res) -> str:
    lines = []
    for temperature in (0.0, 1.0):
        rows = sorted((r for r in res["rows"] if r["temperature"] == temperature),
                      key=lambda r: -r["tau"])  # fmt: skip
        lines.append(f"T={temperature:g}: tau " + ", ".join(
            f"{r['method']} {r['tau']:.2f}" for r in rows) + ".")  # fmt: skip
    greedy = [r["equals_greedy"] for r in res["rows"] if r["temperature"] == 0]
    lines.append(f"Every T=0 run emitted exactly the greedy tokens: {all(greedy)}.")
    return "\n".join(lines)


def _f(x, n=3):
    return f"{x:.{n}f}"


def report(res, args) -> str:
    lm_s, h_s, loss = res["lm"]["summary"], res["medusa2"]["summary"], res["target_loss"]
    acc = np.asarray(res["head_rank_accuracy"])
    K = len(acc)
    head_rows = [
        [f"head {k} (t+{k + 2})", _f(h_s["top1"][k]), _f(h_s["top5"][k]), _f(acc[k, 0]),
         _f(acc[k].sum()), " / ".join(_f(a, 3) for a in acc[k])]
        for k in range(K)
    ]  # fmt: skip
    heads_table = table(
        ["head", "top-1 (trainer)", "top-5 (trainer)", "top-1 (all eval rows)",
         "top-5 (all eval rows)", "P(rank = 0..4)"], head_rows, "lrrrrl")  # fmt: skip
    dec_rows = []
    for r in res["rows"]:
        u = " / ".join(_f(a, 2) for a in r["acceptance_by_position"])
        c = " / ".join(_f(a, 2) for a in r["conditional_acceptance_by_position"])
        eq = "" if r["equals_greedy"] is None else ("yes" if r["equals_greedy"] else "NO")
        dec_rows.append([f"{r['temperature']:g}", r["method"], r["verification"],
                         _f(r["tau"], 2), u, c, f"{r['steps']:,}", eq])  # fmt: skip
    dec_table = table(["T", "method", "rule", "tau", "acceptance by position 1/2/3",
                       "conditional 1/2/3", "steps", "= greedy"], dec_rows, "lllrllrc")  # fmt: skip
    speed = ""
    if res["speed"]:
        sp_rows = [[f"{s['temperature']:g}", s["method"], _f(s["tau"], 2), f"{s['speedup']:.2f}x",
                    _f(s["ar_s"], 2), _f(s["method_s"], 2)] for s in res["speed"]]  # fmt: skip
        speed = (
            f"\nWall-clock at batch 1, {args.timing_prompts} prompts x {args.new} tokens, "
            f"median of {args.repeats} interleaved repeats (shared 2-core CPU: indicative only):\n\n"
            + table(["T", "method", "tau", "speedup", "AR s", "method s"], sp_rows, "llrrrr")
            + "\n"
        )
    t = res["timings_s"]
    d = res["args"]
    return f"""
Corpus `{Path(d["data"]).name}` split by paragraph (5% held out). Target: GPT-2-style
{d["layers"]}x{d["hidden"]}, V={res["lm"]["vocab_size"]} BPE trained on the train split, tied embeddings,
{res["lm"]["params_M"]:.2f}M parameters, {d["lm_steps"]} steps of {d["lm_batch"]}x128 tokens
({_ran(lm_s, t["lm_s"])}): eval loss {lm_s["eval_loss"]:.3f} (perplexity {lm_s["eval_perplexity"]:.0f}).
Medusa-2: {K} heads x 1 block, {d["heads_steps"]} steps of 8 rows ({d["heads_only_steps"]}
heads-only at lr 1e-3, then the backbone joins at lr {d["backbone_lr"]:g} with its own warm-up;
loss LM + 0.2 Medusa + 1.0 KL to the original; {_ran(h_s, t["medusa2_s"])}), on
{h_s["train_rows"]} rows of `{h_s["data_kind"]}` data ({d["distill_prompts"]} train-split prompts of 32
tokens + 96 tokens the original target sampled at T={d["distill_temperature"]:g}). Drafts:
the fine-tuned target truncated to its first {", ".join(map(str, d["draft_layers"]))} layer(s)
(no training). Decoding: {res["prompts"]} held-out prompts of {d["prompt_tokens"]} tokens (eval
split), {res["new_tokens"]} new tokens each, batches of {d["batch"]}, stats pooled by counts;
T=0 greedy verification; T=1 one-hot for Medusa's top-k drafts, probabilistic for the
draft model's and for "sampled" Medusa (nodes drawn from their head's law). Sparse tree
(`sparse_tree` on the per-rank accuracies below, {d["tree_drafts"]} drafts):
`{res["sparse_tree_choices"]}`.

Heads (eval = self-distilled rows from held-out prompts, scored through the fine-tuned target;
"trainer" = train_heads' summary, the first eval batches; "all eval rows" = recomputed here):

{heads_table}

Target before/after Medusa-2 (next-token CE on the held-out corpus rows,
{loss["positions"]:,} positions): original {_f(loss["original"])}, fine-tuned
{_f(loss["tuned"])} ({loss["tuned"] - loss["original"]:+.3f}); KL(original || fine-tuned)
{_f(loss["kl_original_tuned"], 4)} nats a token; argmax agreement {loss["argmax_agreement"]:.3f}.
On the self-distilled eval continuations: original {_f(loss["distill_eval_original"])},
fine-tuned {_f(loss["distill_eval_tuned"])}.

{dec_table}
{speed}
Run time {t["total_s"] / 60:.1f} min (LM {t["lm_s"] / 60:.1f}, Medusa-2 {t["medusa2_s"] / 60:.1f},
decoding {t["decode_s"] / 60:.1f}{", timing " + format(t["timing_s"] / 60, ".1f") if "timing_s" in t else ""}).

{_summary(res)}

Files: results/medusa_shakespeare{d["tag"]}.json, results/medusa_shakespeare{d["tag"]}.png.
"""


if __name__ == "__main__":
    main()
