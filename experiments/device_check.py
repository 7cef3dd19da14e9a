"""A prepared accelerator check: decode speed against the bandwidth floor, and every method.

    python experiments/device_check.py                       # an accelerator: < 8 min, one GPU
    python experiments/device_check.py --target=workdirs/quickstart/target \\
        --draft=workdirs/quickstart/draft --medusa=workdirs/quickstart/medusa \\
        --eagle3=workdirs/quickstart/eagle3                   # (b) on a trained pair
    python experiments/device_check.py --tiny --out=/tmp/device_check.json   # CPU, seconds

(a) Autoregressive decode of a random ~1.1B-parameter Llama (D=2048, 16 layers, 32 query /
8 KV heads, F=8192, V=32000, untied; bfloat16) at batch 1 and 8: ms per step and tokens/s
against the floor. A decode step reads every weight once, so it takes at least weight bytes /
bandwidth, the bandwidth measured here as a large on-device array copy (bytes read + written
over the median time of a few runs; `block_until_ready`). The step time is a `generate`
call's wall time over its new tokens, prefill and the host round trip included.

(b) Every registered benchmark method (`specjax.bench.methods`: draft_model, draft_tree,
ngram, lookahead, medusa, medusa_chain, eagle1, eagle2, eagle3) against autoregressive decoding
in the same run, interleaved (`specjax.bench.timing.Runner.compare_many`), at batch 1 and
T=0: tau, speedup (median AR time / median method time) and the step cost in AR steps
(tau / speedup: what one speculative step costs, drafting and the wide verify included).
The pair is given by path (`--target`, `--draft`, `--medusa`, `--eagle`, `--eagle3`; any
piece not given is made from the target: a draft of its first layer, random heads), or
made here: a random Llama target (D=1024, 8 layers, bfloat16) and its pieces. Random pairs
only exercise the machinery (their tau is whatever random weights agree on); the step costs
are the numbers that carry over to trained heads. The method knobs are the benchmark's
defaults (`specjax.bench.default_config`, on this backend).

Runs with jax, flax, optax and orbax (no ml_collections, datasets or tokenizers, unless a
pair given by path brings a tokenizer), from the repository root (`PYTHONPATH=.` where
specjax is not installed). Writes one JSON (`--out`, default
experiments/results/device_check.json) and prints progress; any failure stops it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import specjax as sj
from specjax.bench import methods as bench_methods
from specjax.bench.methods import DEFAULT_DYNAMIC_TREE, DEFAULT_EAGLE_TREE, DEFAULT_MEDUSA_TREE
from specjax.bench.pairs import truncated_draft
from specjax.bench.timing import Runner, machine_info, make_batches
from specjax.decoding.spec_config import lookahead_defaults
from specjax.models import Model, as_model

RESULTS = Path(__file__).resolve().parent / "results"

# (a): a Llama-3.2-1B-like shape with a 32k vocabulary: 1.10B parameters.
AR_MODEL = sj.ModelConfig(
    vocab_size=32000,
    hidden_size=2048,
    num_layers=16,
    num_heads=32,
    num_kv_heads=8,
    head_dim=64,
    intermediate_size=8192,
    max_position_embeddings=2048,
    dtype="bfloat16",
)
# (b) without paths: 0.19B parameters; compiles fast enough for ten methods in the budget.
PAIR_TARGET = AR_MODEL.replace(hidden_size=1024, num_layers=8, num_heads=16, intermediate_size=4096)
TINY_AR = sj.ModelConfig(
    vocab_size=256,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    max_position_embeddings=256,
)
TINY_METHODS = ("draft_model", "ngram", "eagle3")

# Prompts for a pair given by path with a tokenizer: code and prose, as the benchmark's
# categories (a random pair gets random ids instead).
TEXT_PROMPTS = (
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n",
    "The meaning of a word is often clearer from the sentence around it than from",
    "To install the package, first create a virtual environment, then run the",
)


class Knobs(dict):
    """The method knobs `specjax.bench.methods` reads, as a dict with attribute access
    (the benchmark's ConfigDict without ml_collections)."""

    __getattr__ = dict.__getitem__


def method_knobs() -> Knobs:
    """`specjax.bench.default_config()`'s method knobs on this backend (a test checks that
    they agree)."""
    W, N, G = lookahead_defaults()
    return Knobs(
        num_speculative_tokens=4,
        draft_tree=Knobs(depth=3, width=2),
        prompt_lookup_min=1,
        prompt_lookup_max=3,
        medusa_tree=DEFAULT_MEDUSA_TREE,
        eagle_tree=DEFAULT_EAGLE_TREE,
        dynamic_tree=Knobs(DEFAULT_DYNAMIC_TREE, score_temperature=None),
        lookahead=Knobs(
            window=W, candidate_length=N - 1, max_candidates=G, seed_pool_from_prompt=True
        ),
    )


def log(start: float, message: str) -> None:
    print(f"[{time.perf_counter() - start:6.1f} s] {message}", flush=True)


def copy_bandwidth(num_bytes: int, repeats: int = 5) -> dict:
    """Device memory bandwidth: a jitted `x + 1` over a float32 array of `num_bytes` (read
    once, written once), median of `repeats` timed runs after a warm-up."""
    x = jnp.ones((num_bytes // 4,), jnp.float32)
    step = jax.jit(lambda a: a + 1.0)
    step(x).block_until_ready()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step(x).block_until_ready()
        times.append(time.perf_counter() - t)
    return {
        "bytes": int(x.nbytes),
        "times_s": times,
        "bytes_per_s": 2 * x.nbytes / statistics.median(times),
    }


def weight_bytes(module) -> int:
    return int(sum(x.nbytes for x in jax.tree.leaves(nnx.state(module, nnx.Param))))


def random_prompts(vocab: int, count: int, length: int, seed: int) -> list[list[int]]:
    return np.random.default_rng(seed).integers(0, vocab, (count, length)).tolist()


def check_autoregressive(config, batch_sizes, new_tokens, repeats, bandwidth, start) -> dict:
    """(a): AR decode of a random `config` model at each batch size, against the floor."""
    log(start, f"(a) a random {config.num_params() / 1e6:.1f}M-parameter model, {config.dtype}")
    model = sj.Decoder(config, seed=0)
    nbytes = weight_bytes(model)
    floor_s = nbytes / bandwidth
    runner = Runner(model, new_tokens)
    runs = []
    for batch in batch_sizes:
        prompts = [random_prompts(config.vocab_size, batch, 32, seed=batch)]
        t = time.perf_counter()
        runner.run(prompts, 0.0, None)
        first = time.perf_counter() - t
        times = [runner.run(prompts, 0.0, None)[0][0] for _ in range(repeats)]
        step_s = statistics.median(times) / new_tokens
        runs.append(
            {
                "batch": batch,
                "new_tokens": new_tokens,
                "times_s": times,
                "compile_s": max(first - statistics.median(times), 0.0),
                "ms_per_step": 1e3 * step_s,
                "tokens_per_s": batch / step_s,
                "floor_ms_per_step": 1e3 * floor_s,
                "floor_tokens_per_s": batch / floor_s,
                "fraction_of_floor": floor_s / step_s,
            }
        )
        log(start, f"(a) batch {batch}: {1e3 * step_s:.2f} ms/step, floor {1e3 * floor_s:.2f}")
    return {
        "model": {"num_params": config.num_params(), "dtype": config.dtype, "bytes": nbytes},
        "runs": runs,
    }


def make_pair(args, target_config) -> tuple[Model, bench_methods.Drafts, dict]:
    """(target, drafts, where each piece came from): paths where given, made otherwise."""
    if args.target:
        target = sj.load_model(args.target, dtype=args.dtype)
        source = {"target": args.target}
    else:
        target = Model(sj.Decoder(target_config, seed=1), None, "random")
        source = {"target": f"random, {target_config.num_params() / 1e6:.1f}M parameters"}
    if args.draft:
        draft = as_model(sj.load_model(args.draft, dtype=args.dtype))
        source["draft"] = args.draft
    else:
        draft = truncated_draft(target, 1)
        source["draft"] = "the target's first layer"
    heads = {}
    for slot in ("medusa", "eagle", "eagle3"):
        path = getattr(args, slot)
        if path:
            heads[slot] = sj.load_draft(path, target=target)
            source[slot] = path
        elif slot == "medusa":
            heads[slot] = sj.MedusaHeads.for_target(target, num_heads=4)
            source[slot] = "random (identity blocks, the target's LM head)"
        else:
            heads[slot] = sj.EagleHead.for_target(target, slot, seed=2)
            source[slot] = "random"
    timed_draft = Model(draft.module, None, draft.source)  # the tokenizer is not needed to time
    return target, bench_methods.Drafts(timed_draft, tuple(sorted(heads.items()))), source


def check_methods(args, target, drafts, start) -> dict:
    """(b): every method in `args.methods` against AR, interleaved, batch 1, T=0."""
    knobs = method_knobs()
    specs = {name: bench_methods.speculative_config(name, knobs, drafts) for name in args.methods}
    if target.tokenizer is not None:
        prompts = [target.tokenizer.encode(text) for text in TEXT_PROMPTS]
    else:
        prompts = random_prompts(target.config.vocab_size, len(TEXT_PROMPTS), 32, seed=3)
    workloads = {"prompts": make_batches(prompts, 1)}
    runner = Runner(target, args.method_tokens)
    log(start, f"(b) {len(specs)} methods x {args.repeats} repeats, warm-up compiles first")
    compared = runner.compare_many(workloads, 0.0, specs, args.repeats)
    runs = {}
    for name, result in compared.items():
        entry = result["categories"]["prompts"]
        t, t_ar = statistics.median(entry["times_s"]), statistics.median(entry["ar_times_s"])
        tau, speedup = entry["stats"]["tau"], t_ar / t
        runs[name] = {
            "tau": tau,
            "speedup": speedup,
            "step_cost_ar_steps": tau / speedup,
            "times_s": entry["times_s"],
            "ar_times_s": entry["ar_times_s"],
            "acceptance_by_position": entry["stats"]["acceptance_by_position"],
            "compile_s": result["compile_s"],
            "retraced": result["retraced"],
        }
        log(start, f"(b) {name}: tau {tau:.2f}, {speedup:.2f}x, step {tau / speedup:.2f} AR")
    return {
        "batch_size": 1,
        "temperature": 0.0,
        "new_tokens": args.method_tokens,
        "num_prompts": len(prompts),
        "knobs": json.loads(json.dumps(knobs)),
        "runs": runs,
    }


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model, a few methods: CPU")
    parser.add_argument("--out", default=str(RESULTS / "device_check.json"))
    parser.add_argument("--target", default="", help="target dir (sj.load_model)")
    parser.add_argument("--draft", default="", help="draft LM dir (sj.load_model)")
    parser.add_argument("--medusa", default="", help="Medusa heads dir (sj.load_draft)")
    parser.add_argument("--eagle", default="", help="EAGLE-1 drafter dir (sj.load_draft)")
    parser.add_argument("--eagle3", default="", help="EAGLE-3 drafter dir (sj.load_draft)")
    parser.add_argument(
        "--dtype", default=None, help="of models loaded by path (bfloat16; tiny: float32)"
    )
    parser.add_argument("--methods", nargs="+", default=None, help="default: every one")
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--ar_tokens", type=int, default=None, help="(a) new tokens a call")
    parser.add_argument("--method_tokens", type=int, default=None, help="(b) new tokens a call")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs (5; tiny: 2)")
    args = parser.parse_args(argv)
    registered = [m for m in bench_methods.registered_methods() if m != "autoregressive"]
    if args.methods is None:
        args.methods = list(TINY_METHODS) if args.tiny else registered
    unknown = sorted(set(args.methods) - set(registered))
    if unknown:
        parser.error(f"--methods: unknown {unknown}; registered: {registered}")
    defaults = dict(dtype=("bfloat16", "float32"), repeats=(5, 2), ar_tokens=(128, 16),
                    method_tokens=(64, 16))  # fmt: skip
    for name, (full, tiny) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else full)
    for name in ("repeats", "ar_tokens", "method_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} must be >= 1")
    if min(args.batch_sizes) < 1:
        parser.error(f"--batch_sizes={args.batch_sizes} must all be >= 1")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    start = time.perf_counter()
    info = machine_info()
    log(start, f"devices: {info['devices']} ({'tiny' if args.tiny else 'full'} mode)")
    bandwidth = copy_bandwidth((64 if args.tiny else 1024) << 20)
    log(start, f"copy bandwidth: {bandwidth['bytes_per_s'] / 1e9:.1f} GB/s")
    result = {"mode": "tiny" if args.tiny else "full", "machine": info, "bandwidth": bandwidth}
    ar_config = TINY_AR if args.tiny else AR_MODEL
    result["autoregressive"] = check_autoregressive(
        ar_config, args.batch_sizes, args.ar_tokens, args.repeats, bandwidth["bytes_per_s"], start
    )
    target, drafts, source = make_pair(args, TINY_AR if args.tiny else PAIR_TARGET)
    log(start, f"(b) pair: {source}")
    result["methods"] = {"pair": source, **check_methods(args, target, drafts, start)}
    result["wall_s"] = time.perf_counter() - start
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    log(start, f"wrote {out}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
