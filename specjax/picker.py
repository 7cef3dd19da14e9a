"""The picker: which speculative method and which N to ship for a workload.

    from specjax import picker
    cfg = picker.default_config()
    cfg.target, cfg.draft = "workdirs/quickstart/target", "workdirs/quickstart/draft"
    rec = picker.pick(cfg, "workdirs/pick")   # recommendation.md, recommendation.json

The model (`specjax.speedup`; Leviathan et al. 2023, arXiv 2211.17192, section 3): if each
draft token is accepted with probability alpha, independently, a step with N drafts emits on
average E[tokens per target call] = (1 - alpha^(N+1)) / (1 - alpha), and with a draft step
costing c target steps the wall-clock speedup is that divided by (N c + 1).

What is measured, on a sample of the user's prompts, for a workload of `batch_size` rows
decoded together (the costs are measured at that batch, alpha per row at batch 1):
- alpha per method, from one run at N = `num_speculative_tokens` (the tree's depth for
  draft_tree). Estimator (`alpha_from_acceptance`): the maximum-likelihood alpha of the
  truncated geometric model, accepted drafts / attempted drafts, where a step attempts
  drafts up to and including its first rejection: alpha = sum_{i=1..N} u_i /
  sum_{i=0..N-1} u_i with u_i = P(a step accepts >= i drafts), u_0 = 1. It is exact when
  acceptance is i.i.d. (u_i = alpha^i) and, unlike inverting tau, uses every position.
  `alpha_from_tau` (solve (1 - a^(N+1)) / (1 - a) = tau) is the fallback when only tau is
  known; both are reported. For a tree, u_i is the chance that the accepted path reaches
  depth i, so alpha is an effective per-depth acceptance of the tree.
- c, the draft/target cost ratio: the per-token time of the draft generating alone over
  the target's (at `batch_size`, at the workload's temperature, differenced over two lengths so
  that prefill cancels). For head methods (medusa) c is the heads' own forward per head in
  target steps (`measure_head_cost`), so N c is their share of a step; ngram is free: c = 0.
Then predicted speedup for every method and N = 1..n_max (a tree only up to
`max_draft_nodes` nodes: the model sees its depth, not its width), the best is picked (or
plain autoregressive when nothing beats 1), and the best N of the top methods is measured
against autoregressive (interleaved, median of `repeats`, at `batch_size`) to put predicted next
to measured. At a batch of several rows the verify curve is that batch's: on a CPU where
the batch already makes the target's products compute-bound, every drafted token costs
about what it saves, and the picker says so. (A batch also waits for its slowest row: the
measured speedup includes that, the prediction does not.)
For each measured candidate the step overhead the model leaves out is reported, in target
decode steps: tau / measured speedup - (N c + 1). Near 0 on hardware where verifying N+1
tokens costs the same as decoding one (memory-bound accelerators at small batch); large on
a CPU, where it is not.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from specjax import kernels, parallel
from specjax.bench import methods as mt
from specjax.bench import timing
from specjax.bench.markdown import table
from specjax.bench.verify_cost import cost_at, measure_verify_cost
from specjax.bench.workload import check_inputs, prompts_by_category, resolve_models
from specjax.heads import EagleHead
from specjax.models import as_model
from specjax.speedup import (
    alpha_from_acceptance,
    alpha_from_tau,
    expected_speedup,
    expected_tokens_per_call,
)
from specjax.validate import check_int

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ config


def default_config() -> ml_collections.ConfigDict:
    """The picker's knobs (see `configs/pick.py`).

    Returns:
      ConfigDict: target / draft paths, heads (heads.medusa / eagle / eagle3: a heads or
      drafter directory), methods and the method knobs, the benchmark's
      (`bench.methods.method_knobs`: the N each method's alpha is measured at is its
      num_speculative_tokens, draft_tree.depth, ...), n_max, max_draft_nodes, temperature,
      verify_cost / verify_blocks, the
      workload (num_prompts per category, prompt_tokens, max_new_tokens, prompts_file, data),
      cost_tokens (generation length for timing c),
      measure / measure_top / repeats (predicted next to measured), batch_size (rows decoded
      together: the verify curve, c and the measured candidates at that batch) and seed.
    """
    cfg = ml_collections.ConfigDict()
    cfg.target = ""
    cfg.draft = ""
    cfg.update(mt.method_knobs())  # the benchmark's methods and knobs, one definition
    cfg.n_max = 8
    cfg.max_draft_nodes = 64  # trees: depths whose node count exceeds this are not considered
    cfg.temperature = 0.0
    cfg.num_prompts = 4
    cfg.prompt_tokens = 64
    cfg.max_new_tokens = 64
    cfg.cost_tokens = 128  # generation length for timing c (and half of it, differenced)
    # The target forward over T-token blocks in one-token forwards, measured on this device
    # (`specjax.bench.verify_cost`); False: verification free, the paper's model.
    cfg.verify_cost = True
    cfg.verify_blocks = (1, 2, 3, 5, 8, 12, 16, 24, 32, 48, 65)
    cfg.prompts_file = ""  # "" = held-out prompts of `data`; else .txt (a prompt a line) / .jsonl
    cfg.data = ml_collections.ConfigDict(dict(source="embedded", eval_fraction=0.05, seed=0))
    cfg.measure = True
    cfg.measure_top = 3
    cfg.repeats = 3
    cfg.batch_size = 1
    cfg.seed = 0
    return cfg


# ------------------------------------------------------------------------------ measuring


def _file_prompts(cfg, tokenizer) -> dict[str, list[list[int]]]:
    path = Path(cfg.prompts_file)
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    if path.suffix == ".jsonl":
        rows = [json.loads(ln) for ln in lines]
        texts = [r.get("prompt", r.get("text")) for r in rows]
        if any(not isinstance(t, str) for t in texts):
            raise ValueError(f"every line of {path} needs a string 'prompt' (or 'text') field")
    else:
        texts = lines
    if not texts:
        raise ValueError(f"no prompts in {path}")
    return {"user": [tokenizer.encode(t) for t in texts[: cfg.num_prompts]]}


def sample_prompts(cfg, tokenizer) -> dict[str, list[list[int]]]:
    """{category: prompt ids}: the user's prompts file, else held-out prompts per category."""
    if cfg.prompts_file:
        return _file_prompts(cfg, tokenizer)
    return prompts_by_category(cfg, tokenizer)


def _per_token_seconds(
    models: dict, prompt, long: int, short: int, repeats: int, temperature, batch: int = 1,
    weight_dtypes: dict | None = None,
):  # fmt: skip
    """Decode time per step of each model at `batch` rows (the prompt repeated), prefill
    differenced out.

    Uses the fastest of the interleaved repeats at each length: interference from other
    work on a shared machine only ever adds time, and a difference of two noisy medians can
    be anything (even negative) when the load changes between them.
    """
    dtypes = weight_dtypes or {}
    runners = {
        (name, m): timing.Runner(model, m, weight_dtype=dtypes.get(name))
        for name, model in models.items()
        for m in (long, short)
    }
    rows = [[prompt] * batch]
    for runner in runners.values():  # warm-up: compile both lengths
        runner.run(rows, temperature, None)
    times = {key: [] for key in runners}
    for _ in range(repeats):  # interleaved: target long, target short, draft long, ...
        for key, runner in runners.items():
            times[key].append(sum(runner.run(rows, temperature, None)[0]))
    per_token = {}
    for name in models:
        t_long, t_short = min(times[name, long]), min(times[name, short])
        diff = (t_long - t_short) / max(long - short, 1)
        # Noise can make the difference meaningless for very short runs: fall back to the mean.
        per_token[name] = diff if diff > 0 else t_long / long
    return per_token


def measure_cost_ratio(
    target, draft, prompt, tokens: int, repeats: int, temperature: float = 0.0, batch: int = 1,
    draft_weight_dtype: str | None = None,
) -> dict:  # fmt: skip
    """c = draft decode step time / target decode step time, both generating alone, `batch`
    rows (the prompt repeated) a step.

    Both sample at `temperature` (the sampling ops are part of a draft step); at least 5
    interleaved repeats, the fastest of each kept (see `_per_token_seconds`). Two lengths,
    L = `tokens` (capped by both models' position limits) and L / 2 + 1, so the prefill
    cancels in the difference. Use long runs (the config's `cost_tokens`, 128): a small
    draft's per-token time is a fraction of a millisecond, easily lost in a shared
    machine's noise. The draft decodes with its weights read in `draft_weight_dtype`, as it
    drafts (`speculative_config["draft_weight_dtype"]`).

    Returns:
      {"target_step_s", "draft_step_s", "c", "lengths"}; c is None without a draft.
    """
    models = {"target": target} if draft is None else {"target": target, "draft": draft}
    room = min(m.config.max_position_embeddings for m in models.values()) - len(prompt)
    long = max(min(int(tokens), room), 2)
    short = long // 2 + 1
    per_token = _per_token_seconds(
        models, prompt, long, short, max(int(repeats), 5), float(temperature), int(batch),
        {"draft": draft_weight_dtype},
    )  # fmt: skip
    c = per_token["draft"] / per_token["target"] if draft is not None else None
    return {
        "target_step_s": per_token["target"],
        "draft_step_s": per_token.get("draft"),
        "c": c,
        "lengths": [short, long],
        "batch": int(batch),
    }


def measure_head_cost(
    heads, num_heads: int, target_step_s: float, repeats: int, target=None, batch: int = 1,
    weight_dtype: str | None = None,
) -> dict:  # fmt: skip
    """A head's c in target decode steps per draft token, so that N c is the proposer's cost
    of a step that drafts N tokens, as for a draft LM.

    Medusa: the heads' own forward (`batch` rows, `num_heads` heads) divided by num_heads (one
    forward drafts them all). EAGLE: one drafter call over one entry a row with a cache of 256
    slots (a chain drafts one token per call); `target_step_s` is the target's step at the
    same batch; `target` (the Model whose embedding and LM head the
    drafter shares) is required there. Timed as 64 calls inside one jitted loop (no per-call
    dispatch in the number), fastest of `repeats` (at least 5) runs. The heads' weights are
    read in `weight_dtype` (`speculative_config["draft_weight_dtype"]`), as decoding reads them.

    Returns:
      {"heads_step_s": seconds per forward (all num_heads Medusa heads, one EAGLE call), "c":
      that / (num_heads * target_step_s) for Medusa, that / target_step_s for EAGLE}.
    """
    batch = check_int("batch", batch, 1)
    if isinstance(heads, EagleHead):
        return _measure_drafter_cost(heads, target, target_step_s, repeats, batch, weight_dtype)
    # The layout decoding uses.
    graphdef, params = kernels.split_for_decode(heads, weight_dtype=weight_dtype)
    calls = 64

    @jax.jit
    def run(p, h):
        module = nnx.merge(graphdef, p)
        # A new input every iteration, so nothing is hoisted out of the loop.
        body = lambda i, acc: acc + module(h + i.astype(h.dtype), num_heads)[:, :, :1]  # noqa: E731
        return jax.lax.fori_loop(0, calls, body, jnp.zeros((batch, num_heads, 1), jnp.float32))

    h = jnp.zeros((batch, heads.config.hidden_size), jnp.float32)
    jax.block_until_ready(run(params, h))  # compile
    times = []
    for _ in range(max(int(repeats), 5)):
        start = time.perf_counter()
        jax.block_until_ready(run(params, h))
        times.append((time.perf_counter() - start) / calls)
    step = min(times)
    return {"heads_step_s": step, "c": step / (num_heads * target_step_s)}


def _measure_drafter_cost(
    head, target, target_step_s: float, repeats: int, batch: int, weight_dtype=None
) -> dict:
    if target is None:
        raise ValueError("measure_head_cost: an EAGLE drafter needs target= (its embedding)")
    module = as_model(target).module
    tdef, tparams = kernels.split_for_decode(module)
    hdef, hparams = kernels.split_for_decode(head, weight_dtype=weight_dtype)
    calls, slots = 64, 256

    @jax.jit
    def run(p, cache):
        tmod, drafter = nnx.merge(tdef, p[0]), nnx.merge(hdef, p[1])
        mask = jnp.ones((batch, 1, 1), bool)

        def body(i, carry):
            cache, acc = carry
            tok = jnp.full((batch, 1), i % tmod.config.vocab_size, jnp.int32)
            feat = jnp.zeros((batch, 1, drafter.config.hidden_size), jnp.float32) + acc
            pos = jnp.full((batch, 1), 128, jnp.int32) + i
            h, logits, cache = drafter(tmod, tok, feat, pos, cache, mask)
            return cache, acc + logits[0, 0, 0] * 0 + h[0, 0, 0] * 1e-6

        return jax.lax.fori_loop(0, calls, body, (cache, jnp.float32(0)))[1]

    cache = head.init_cache(batch, slots).replace(lengths=jnp.full((batch,), 128, jnp.int32))
    params = (tparams, hparams)
    jax.block_until_ready(run(params, cache))  # compile
    times = []
    for _ in range(max(int(repeats), 5)):
        start = time.perf_counter()
        jax.block_until_ready(run(params, cache))
        times.append((time.perf_counter() - start) / calls)
    step = min(times)
    return {"heads_step_s": step, "c": step / target_step_s}


def _head_limit(heads) -> int | None:
    """The deepest N a head set can draft: Medusa's stored heads; EAGLE has no limit."""
    return None if isinstance(heads, EagleHead) else heads.config.num_heads


def _measure_alpha(cfg, runner, workloads, name, draft) -> dict:
    spec = mt.speculative_config(name, cfg, draft)
    per_category = {}
    for category, batches in workloads.items():
        _, stats = runner.run(batches, cfg.temperature, spec)
        per_category[category] = stats
    stats = timing.pool_stats(list(per_category.values()))
    n = mt.depth_of(cfg, name)
    alpha = alpha_from_acceptance(stats["acceptance_by_position"])
    tau_alpha = alpha_from_tau(min(max(stats["tau"], 1.0), n + 1.0), n)
    return {
        "n_measured": n,
        "tau": stats["tau"],
        "acceptance_by_position": stats["acceptance_by_position"],
        "alpha": tau_alpha if alpha is None else alpha,
        "alpha_from_tau": tau_alpha,
        "alpha_by_category": {
            c: alpha_from_acceptance(s["acceptance_by_position"]) for c, s in per_category.items()
        },
    }


def _predictions(
    cfg, name: str, alpha: float, c: float, n_limit: int | None = None, curve=None
) -> list[dict]:
    """Predicted tau and speedup for N = 1..n_max (trees: up to max_draft_nodes nodes; head
    methods: up to the heads stored, `n_limit`), the verify forward of the step's nodes + 1
    tokens priced by the measured `curve` (None: free, the paper's model)."""
    method = mt.get_method(name)
    rows = []
    last = int(cfg.n_max) if n_limit is None else min(int(cfg.n_max), n_limit)
    for n in range(1, last + 1):
        nodes = method.num_nodes(cfg, n)
        if n > 1 and nodes > cfg.max_draft_nodes:
            break
        v = cost_at(curve, nodes + 1)
        rows.append(
            {
                "n": n,
                "draft_nodes": nodes,
                "verify_cost": v,
                "tokens_per_call": expected_tokens_per_call(alpha, n),
                "speedup": expected_speedup(alpha, n, c, v),
            }
        )
    return rows


def _measure_candidates(cfg, runner, workloads, candidates, draft, per_method, curve) -> list[dict]:
    rows = []
    for cand in candidates:
        name, n = cand["method"], cand["n"]
        spec = mt.speculative_config(name, mt.with_depth(cfg, name, n), draft)
        measured = runner.compare(workloads, cfg.temperature, spec, int(cfg.repeats))
        cats = measured["categories"].values()
        stats = timing.pool_stats([c["stats"] for c in cats])
        t = timing.median([sum(x) for x in zip(*(c["times_s"] for c in cats), strict=True)])
        t_ar = timing.median([sum(x) for x in zip(*(c["ar_times_s"] for c in cats), strict=True)])
        c = per_method[name]["c"]
        v = cost_at(curve, cand["draft_nodes"] + 1)
        rows.append(
            {
                **cand,
                "measured_tau": stats["tau"],
                "measured_speedup": t_ar / t,
                # What the model leaves out, in target decode steps per speculative step:
                # measured step time = t_target (N c + v + overhead), so
                # overhead = tau / speedup - (N c + v), v the measured verify cost of the
                # block (1 without a curve). Sampling and acceptance work land here.
                "overhead_steps": stats["tau"] * t / t_ar - (n * c + v),
                "compile_s": measured["compile_s"],
            }
        )
    return rows


def pick(cfg, workdir, *, target=None, draft=None, heads=None) -> dict:
    """Measure alpha and c, predict every method x N, pick the best, check it by measuring.

    c is the draft LM's decode step over the target's for draft_model and draft_tree, the
    heads' own forward per head (`measure_head_cost`) for head methods, and 0 for ngram.

    Args:
      cfg: a `default_config()` ConfigDict.
      workdir: output directory for recommendation.md / recommendation.json (created).
      target, draft: optional Models used instead of `cfg.target` / `cfg.draft`.
      heads: optional {slot: heads} used instead of `cfg.heads.<slot>` paths.
    Returns:
      The recommendation dict written to recommendation.json: machine, config, cost,
      methods ({name: alpha, c, predictions, ...}), choice and measured.
    """
    names = [m for m in cfg.methods if m != "autoregressive"]
    check_inputs(cfg, draft, heads)
    check_int("n_max", cfg.n_max, 1, 16)
    batch = check_int("batch_size", cfg.batch_size, 1, 256)
    target, draft, drafts = resolve_models(cfg, target, draft, heads)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    prompts = sample_prompts(cfg, target.tokenizer)
    runner = timing.Runner(target, int(cfg.max_new_tokens), int(cfg.seed))
    workloads = {c: timing.make_batches(p, 1) for c, p in prompts.items()}  # alpha, per row
    served = {c: timing.make_batches(p, batch) for c, p in prompts.items()}  # timed candidates
    first_prompt = next(iter(prompts.values()))[0]
    log.info("pick 1/3: draft/target cost ratio at batch %d", batch)
    draft_dtype = mt.weight_dtype(cfg, "draft_weight_dtype")
    cost = measure_cost_ratio(
        target, drafts.model, first_prompt, cfg.cost_tokens, cfg.repeats, cfg.temperature, batch,
        draft_dtype,
    )  # fmt: skip
    head_cost = {
        slot: measure_head_cost(h, min(int(cfg.num_speculative_tokens), _head_limit(h) or 16),
                                cost["target_step_s"], cfg.repeats, target, batch, draft_dtype)
        for slot, h in drafts.heads
    }  # fmt: skip
    cost["heads"] = head_cost
    curve = None
    if cfg.verify_cost:
        room = target.config.max_position_embeddings - int(cfg.prompt_tokens)
        blocks = [b for b in cfg.verify_blocks if b <= min(int(cfg.max_draft_nodes) + 1, room)]
        curve = measure_verify_cost(target, blocks, batch=batch, context=int(cfg.prompt_tokens),
                                    repeats=int(cfg.repeats))  # fmt: skip
        log.info("verify cost (target forwards): %s", dict(zip(curve["blocks"],
                 (round(x, 2) for x in curve["cost"]), strict=True)))  # fmt: skip
    cost["verify_curve"] = curve
    log.info("pick 2/3: alpha of %s at T=%g", ", ".join(names), cfg.temperature)
    per_method = {}
    for name in names:
        entry = _measure_alpha(cfg, runner, workloads, name, drafts)
        method, limit = mt.get_method(name), None
        entry["c"] = cost["c"] if method.needs_draft else 0.0
        if method.needs_heads:
            entry["c"] = head_cost[method.needs_heads]["c"]
            limit = _head_limit(drafts.head(method.needs_heads))
        entry["predictions"] = _predictions(cfg, name, entry["alpha"], entry["c"], limit, curve)
        per_method[name] = entry
        log.info("%s: tau %.2f, alpha %.3f, c %.3f", name, entry["tau"], entry["alpha"], entry["c"])
    ranked = sorted(
        (
            {"method": name, "n": p["n"], "draft_nodes": p["draft_nodes"],
             "predicted_tau": p["tokens_per_call"], "predicted_speedup": p["speedup"]}
            for name, e in per_method.items()
            for p in e["predictions"]
        ),
        key=lambda r: -r["predicted_speedup"],
    )  # fmt: skip
    best_per_method = []  # each method's best N, best first (ranked is sorted, stable in N)
    for row in ranked:
        if row["method"] not in {b["method"] for b in best_per_method}:
            best_per_method.append(row)
    measured = []
    if cfg.measure and best_per_method:
        top = best_per_method[: max(int(cfg.measure_top), 1)]
        log.info("pick 3/3: measuring %s", ", ".join(f"{r['method']} N={r['n']}" for r in top))
        measured = _measure_candidates(cfg, runner, served, top, drafts, per_method, curve)
    choice = _choose(best_per_method, measured)
    result = {
        "machine": timing.machine_info(),
        "config": cfg.to_dict(),
        "models": {"target": repr(target), "draft": repr(draft) if draft else None},
        "prompts": {c: len(p) for c, p in prompts.items()},
        "cost": cost,
        "methods": per_method,
        "ranked": ranked,
        "measured": measured,
        "choice": choice,
    }
    if jax.process_index() == 0:  # several processes share the workdir: one writer
        (workdir / "recommendation.json").write_text(
            json.dumps(result, indent=2, default=str) + "\n"
        )
        (workdir / "recommendation.md").write_text(recommendation_markdown(result, workdir))
        log.info("recommendation: %s (written to %s)", choice, workdir)
    parallel.barrier(f"pick {workdir}")  # every process returns once they exist
    return result


def _choose(best_per_method: list[dict], measured: list[dict]) -> dict:
    """The pick: the best measured candidate when measured, else the best predicted one.

    Autoregressive when the winner's speedup (measured if available) is not above 1.
    """
    pool = measured or best_per_method
    key = "measured_speedup" if measured else "predicted_speedup"
    if not pool:
        return {"method": "autoregressive", "n": 0, "basis": "no speculative method given"}
    best = max(pool, key=lambda r: r[key])
    if best[key] <= 1.0:
        return {
            "method": "autoregressive",
            "n": 0,
            "basis": f"best {key.replace('_', ' ')} {best[key]:.2f}x <= 1 ({best['method']}, "
            f"N={best['n']})",
        }
    return {**best, "basis": key}


def _fmt(x, spec=".2f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _candidates_table(result: dict) -> str:
    """Predicted next to measured for the measured candidates (else the top 5 predicted)."""
    header = ["method", "N", "draft nodes", "predicted tau", "measured tau"]
    header += ["predicted speedup", "measured speedup", "step overhead"]
    rows = [
        [r["method"], r["n"], r["draft_nodes"], _fmt(r["predicted_tau"]),
         _fmt(r.get("measured_tau")), f"{_fmt(r['predicted_speedup'])}x",
         f"{_fmt(r.get('measured_speedup'))}x", _fmt(r.get("overhead_steps"))]
        for r in result["measured"] or result["ranked"][:5]
    ]  # fmt: skip
    return table(header, rows, "lrrrrrrr")


def _methods_table(result: dict) -> str:
    """Per method: what was measured (tau, alpha, c) and its best predicted N."""
    header = ["method", "measured at N", "tau", "alpha (MLE)", "alpha from tau", "c"]
    header += ["best N", "predicted speedup at best N"]
    rows = []
    for name, e in result["methods"].items():
        best = max(e["predictions"], key=lambda p: p["speedup"])
        rows.append(
            [name, e["n_measured"], f"{e['tau']:.2f}", f"{e['alpha']:.3f}",
             f"{e['alpha_from_tau']:.3f}", _fmt(e["c"], ".3f"), best["n"],
             f"{best['speedup']:.2f}x"]
        )  # fmt: skip
    return table(header, rows, "lrrrrrrr")


def _verify_line(curve) -> str:
    if not curve:
        return "Verify cost: not measured (verification priced as one target step)."
    pairs = ", ".join(f"{b}: {x:.2f}" for b, x in zip(curve["blocks"], curve["cost"], strict=True))
    kernel = "on" if curve.get("cpu_kernel") else "off"
    return f"Verify cost v by block size (tokens: target steps; CPU kernel {kernel}): {pairs}."


def _cpu_line(machine: dict) -> str:
    cpu = machine.get("cpu") or {}
    if not cpu:
        return str(machine.get("processor"))
    ext = "/".join(cpu.get("vector_extensions", [])) or "no AVX"
    return f"{cpu.get('model')} ({ext}; caches {cpu.get('caches')})"


def recommendation_markdown(result: dict, workdir) -> str:
    """recommendation.md: the pick, predicted vs measured, and what the prediction used."""
    choice, cfg, cost = result["choice"], result["config"], result["cost"]
    batch = cfg.get("batch_size", 1)
    if choice["method"] == "autoregressive":
        headline = f"**Do not speculate** at batch {batch}: {choice['basis']}."
    else:
        got = choice.get("measured_speedup")
        headline = (
            f"**Use `{choice['method']}` with N = {choice['n']}** at temperature "
            f"{cfg['temperature']}, batch {batch}: predicted {choice['predicted_speedup']:.2f}x"
            + (f", measured {got:.2f}x" if got is not None else "")
            + " over autoregressive decoding."
        )
    lines = [
        "# Speculative decoding recommendation",
        "",
        headline,
        "",
        f"Target: `{result['models']['target']}`; draft: `{result['models']['draft']}`; "
        f"prompts: {result['prompts']} ({cfg['max_new_tokens']} new tokens; alpha at batch 1, "
        f"the costs and the measured speedups at batch {cfg.get('batch_size', 1)}).",
        "",
        "## Predicted vs measured",
        "",
        _candidates_table(result),
        "",
        "## What the prediction used",
        "",
        f"Cost ratio c = draft step / target step = {_fmt(cost['c'], '.3f')} "
        f"(target {_fmt(cost['target_step_s'] * 1e3, '.2f')} ms/token, draft "
        f"{_fmt(None if cost['draft_step_s'] is None else cost['draft_step_s'] * 1e3, '.2f')} "
        f"ms/token, batch {cost.get('batch', 1)}, T={cfg['temperature']:g}); head methods use the heads' own "
        "forward per head in target steps"
        + "".join(
            f" ({slot}: {h['heads_step_s'] * 1e3:.3f} ms for the heads used, c = {h['c']:.3f})"
            for slot, h in cost.get("heads", {}).items()
        )
        + "; ngram uses c = 0.",
        "",
        _methods_table(result),
        "",
        "Model: speedup = (1 - a^(N+1)) / ((1 - a)(N c + v)) with i.i.d. acceptance a "
        "(Leviathan et al. 2023), v the target forward over the step's nodes + 1 tokens in "
        "one-token forwards, measured on this device (1 when the curve is off: the paper's "
        "free verification). Step overhead = measured tau / measured speedup - (N c + v) is "
        "what it still leaves out (sampling, the acceptance walk, proposer bookkeeping), in "
        "target decode steps per speculative step. The measured columns are the ground "
        "truth on this machine.",
        "",
        _verify_line(cost.get("verify_curve")),
        "",
        f"Machine: {_cpu_line(result['machine'])}, {result['machine']['cpu_count']} CPUs, "
        f"jax {result['machine']['jax']} ({result['machine']['backend']}). "
        f"Written to `{workdir}`.",
        "",
    ]
    return "\n".join(lines)
