"""Timing and statistics shared by the benchmark harness and the picker.

A *workload* is a category's prompts cut into batches of one batch size; one timed run is
`generate` over every batch in turn, wall-clock, results pulled to the host. `compare` times
a method against the autoregressive baseline on the same workloads with the runs
interleaved (AR, method, AR, method, ...; with several methods AR, m1, m2, ..., AR, m1, ...),
so slow drifts of a shared machine hit both sides alike; speedup = median(AR time) / median(method time).

Acceptance statistics from several `generate` calls are pooled by their counts, not by
averaging ratios: tau = (accepted + steps) / steps over all calls, and the unconditional
acceptance at position i is the steps weighted mean (each call's is a fraction of its own
steps), so pooled numbers equal what one big call would report.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import statistics
import time

import jax
import numpy as np

from specjax import kernels
from specjax import sampling as sp
from specjax.decoding import engine
from specjax.decoding.engine import acceptance_rates
from specjax.validate import check_int

log = logging.getLogger(__name__)


def machine_info() -> dict:
    """What the numbers were measured on: host, CPU count and load, jax and its devices."""
    devices = jax.devices()
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.device_kind}" for d in devices],
        # The CPU by model, vector extensions and caches: an AVX2 figure is not an AVX-512 one.
        "cpu": kernels.build.cpu_description(),
        "cpu_kernel": kernels.available(),
    }
    if hasattr(os, "getloadavg"):
        info["load_average_1m_at_start"] = round(os.getloadavg()[0], 2)
    return info


def make_batches(prompts: list[list[int]], batch_size: int) -> list[list[list[int]]]:
    """Cut prompts into batches of exactly `batch_size` rows.

    Prompts are cycled to fill the last batch (and to fill one batch when there are fewer
    prompts than rows), so every batch has the same shape and every call does the same work.

    Args:
      prompts: token-id lists (at least one).
      batch_size: rows per batch (>= 1).
    Returns:
      ceil(max(len(prompts), batch_size) / batch_size) batches.
    """
    if not prompts:
        raise ValueError("make_batches needs at least one prompt")
    batch_size = check_int("batch_size", batch_size, 1)
    num_batches = -(-max(len(prompts), batch_size) // batch_size)
    rows = [prompts[i % len(prompts)] for i in range(num_batches * batch_size)]
    return [rows[i : i + batch_size] for i in range(0, len(rows), batch_size)]


def _counts(stats: dict) -> tuple[int, int, int, int]:
    """(steps, accepted, drafted, generated) of a raw `generate` stats dict or a pooled one."""
    if "row_steps" in stats:  # raw: per-row lists from the engine
        steps, generated = sum(stats["row_steps"]), sum(stats["generated_tokens"])
    else:
        steps, generated = stats["steps"], stats["generated_tokens"]
    return int(steps), int(stats["accepted_tokens"]), int(stats["draft_tokens"]), int(generated)


POSITION_COUNTS = ("offered_by_position", "reached_by_position", "accepted_by_position")


def pool_stats(stats_list: list[dict]) -> dict:
    """Pool the acceptance statistics of several calls by their counts.

    Args:
      stats_list: `GenerateOutput.stats` dicts of calls with the same method config, or
        dicts this function returned (pooling is associative).
    Returns:
      dict: steps, accepted_tokens, draft_tokens, generated_tokens, tau, the per-position
      counts (offered/reached/accepted_by_position) and from them acceptance_by_position
      (P(a step accepts >= i drafts | position i offered), i = 1..depth) and
      conditional_acceptance_by_position (P(>= i | >= i-1, i offered)); empty lists for
      autoregressive.
    """
    counts = np.array([_counts(s) for s in stats_list], np.int64).reshape(-1, 4)  # [calls, 4]
    steps, accepted, drafted, generated = (int(x) for x in counts.sum(0))
    pooled = {
        "steps": steps,
        "accepted_tokens": accepted,
        "draft_tokens": drafted,
        "generated_tokens": generated,
        "tau": (accepted + steps) / steps if steps else 0.0,
        # A lossy verification rule (Medusa's typical acceptance) in any of the calls.
        "lossy": any(bool(s.get("lossy", False)) for s in stats_list),
    }
    with_positions = [s for s in stats_list if s.get("offered_by_position")]
    for key in POSITION_COUNTS:
        pooled[key] = (
            np.sum([s[key] for s in with_positions], axis=0, dtype=np.int64).tolist()
            if with_positions
            else []
        )
    pooled.update(acceptance_rates(pooled))  # empty lists without positions (autoregressive)
    return pooled


def release_programs() -> None:
    """Drop the compiled programs jax holds in memory (a persistent compilation cache on disk
    stays, and serves a recompile).

    Each round-robin of a run compiles its own programs, and XLA:CPU maps every executable's
    code in many regions: about 1,000 for one SmolLM2-135M decode program. Linux caps a
    process at `vm.max_map_count` mappings (65,530 by default), and a Spec-Bench run that kept
    every cell's programs crashed in LLVM ("Cannot allocate memory", then a segfault) after
    two cells of 5 methods x 12 categories. Released before each round-robin, the live
    programs are the current round's only.
    """
    jax.clear_caches()


@dataclasses.dataclass
class Runner:
    """Runs and times `generate` for one target with a fixed budget and no stop ids.

    Every call generates exactly `max_new_tokens` per row (`stop_token_ids=[]`), so the
    work per call is the same for every method.
    """

    target: object
    max_new_tokens: int
    seed: int = 0
    weight_dtype: str | None = None  # the target's weights as read (`engine.generate`)

    def run(self, batches, temperature: float, spec: dict | None) -> tuple[list[float], dict]:
        """One timed pass over `batches`.

        Returns:
          (seconds per call, pooled stats of the pass).
        """
        sampling = sp.SamplingParams(temperature=float(temperature), seed=self.seed)
        seconds, stats = [], []
        for batch in batches:
            start = time.perf_counter()
            out = engine.generate(
                self.target,
                batch,
                self.max_new_tokens,
                sampling=sampling,
                stop_token_ids=[],
                speculative_config=spec,
                weight_dtype=self.weight_dtype,
            )
            seconds.append(time.perf_counter() - start)  # generate returns host arrays
            stats.append(out.stats)
        return seconds, pool_stats(stats)

    def compare(self, workloads: dict, temperature: float, spec: dict | None, repeats: int):
        """Time `spec` against autoregressive on every workload, interleaved.

        One method's `compare_many` (see there for the returned dict).
        """
        return self.compare_many(workloads, temperature, {"method": spec}, repeats)["method"]

    def compare_many(self, workloads: dict, temperature: float, specs: dict, repeats: int):
        """Time several methods against one autoregressive baseline, round-robin.

        Each repeat runs AR and then every method once on every workload (AR, m1, m2, ...,
        AR, m1, m2, ...), so every method's times and the baseline's come from the same
        stretch of wall time, and the baseline is timed once per repeat for all methods
        rather than once per method (the benchmark's grid cells share it).

        Args:
          workloads: {category: batches} (see `make_batches`); batches may fall in several
            prompt buckets: one batch of each is run once in the warm-up (`warmup_batches`).
          temperature: sampling temperature for every side.
          specs: {name: speculative_config} (None compares AR with itself).
          repeats: timed repeats per side (>= 1).
        Returns:
          {name: dict}: per category {times_s, ar_times_s (per repeat, summed over the
          category's calls; the same baseline for every name), stats (pooled, first timed
          repeat)}, plus warmup_s / compile_s for the method and the baseline and
          `retraced` (compiles during timed repeats, counted over the whole round-robin; 0
          when the timings are clean).
        """
        repeats = check_int("repeats", repeats, 1)
        if not specs:
            raise ValueError("compare_many needs at least one method")
        release_programs()  # the previous round-robin's programs: this one compiles its own
        first = next(iter(workloads.values()))[:1]
        first_cat = next(iter(workloads))
        # One batch of every other prompt bucket (Spec-Bench's categories span several):
        # each is its own program, compiled here rather than inside a timed repeat.
        others = warmup_batches(workloads, skip=first[0])
        warm = {}
        for side, s in ((None, None), *specs.items()):  # None: the AR baseline
            start = time.perf_counter()
            self.run(first, temperature, s)
            warm[side] = time.perf_counter() - start
            if others:
                self.run(others, temperature, s)
        traces = engine.trace_count()
        result = {
            name: {cat: {"times_s": [], "ar_times_s": [], "stats": None} for cat in workloads}
            for name in specs
        }
        first_call = {side: [] for side in warm}
        for _ in range(repeats):
            for cat, batches in workloads.items():
                ar_seconds, _ = self.run(batches, temperature, None)
                if cat == first_cat:
                    first_call[None].append(ar_seconds[0])
                for name, spec in specs.items():
                    seconds, stats = self.run(batches, temperature, spec)
                    entry = result[name][cat]
                    entry["ar_times_s"].append(sum(ar_seconds))
                    entry["times_s"].append(sum(seconds))
                    entry["stats"] = entry["stats"] or stats
                    if cat == first_cat:
                        first_call[name].append(seconds[0])
        retraced = engine.trace_count() - traces
        if retraced:
            log.warning("%d compile(s) during timed repeats: timings include them", retraced)
        steady = {k: statistics.median(v) for k, v in first_call.items()}
        ar_compile = max(warm[None] - steady[None], 0.0)
        return {
            name: {
                "categories": result[name],
                "warmup_s": warm[name],
                "compile_s": max(warm[name] - steady[name], 0.0),
                "ar_warmup_s": warm[None],
                "ar_compile_s": ar_compile,
                "retraced": retraced,
            }
            for name in specs
        }


def warmup_batches(workloads: dict, skip=None) -> list:
    """One batch of each prompt bucket the workloads use (`engine.prompt_bucket` of the
    batch's longest prompt), except the bucket of `skip` (a batch warmed up already)."""
    seen = set() if skip is None else {engine.prompt_bucket(max(map(len, skip)))}
    out = []
    for batches in workloads.values():
        for batch in batches:
            bucket = engine.prompt_bucket(max(map(len, batch)))
            if bucket not in seen:
                seen.add(bucket)
                out.append(batch)
    return out


def median(values) -> float:
    """Median of a non-empty sequence of numbers."""
    return float(statistics.median(values))
