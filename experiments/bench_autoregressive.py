"""Autoregressive greedy decoding: specjax vs transformers (PyTorch, CPU), same weights, same run.

A ~110M-parameter Llama-shaped model with random weights (D=768, 12 layers, 12 heads, F=2048,
V=32000, tied embeddings) decodes `--new` tokens greedily after a `--prompt`-token prompt, at
each batch size. specjax runs `sj.generate` (one jit: prefill + while_loop); transformers runs
`model.generate(do_sample=False)` on the same weights (copied with `export_state`). Repeats are
interleaved (specjax, transformers, specjax, ...), the first specjax call is the warm-up and its
extra time is reported as compile time, and each number is the median of `--repeats` runs.

The memory-bandwidth floor: a decode step must read every weight once, so one step takes at
least weight_bytes / bandwidth, with bandwidth measured here by a large numpy copy (bytes read +
written / time). At batch B a step yields B tokens.

    python experiments/bench_autoregressive.py                 # the full run (~5 min, 2 cores)
    python experiments/bench_autoregressive.py --quick         # a 2-layer smoke test

Writes experiments/results/bench_autoregressive.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np
import torch
import transformers

import specjax as sj
from specjax import kernels
from specjax.bench.markdown import table
from specjax.io.hf import export_state
from specjax.kernels import build
from specjax.models import config_to_hf

RESULTS = Path(__file__).parent / "results"


def bench_config(quick: bool, dtype: str = "float32") -> sj.ModelConfig:
    return sj.ModelConfig(
        dtype=dtype,
        model_type="llama",
        vocab_size=32000,
        hidden_size=768,
        num_layers=2 if quick else 12,
        num_heads=12,
        num_kv_heads=12,
        head_dim=64,
        intermediate_size=2048,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
    )


def memory_bandwidth(num_bytes: int = 1 << 29, repeats: int = 7) -> float:
    """Bytes/s of a large numpy copy (read + write), median over repeats."""
    src = np.ones(num_bytes // 8, np.float64)
    dst = np.empty_like(src)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t)
    return 2 * num_bytes / statistics.median(times)


def torch_model(decoder: sj.Decoder) -> torch.nn.Module:
    hf_config = transformers.AutoConfig.for_model(**config_to_hf(decoder.config))
    model = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    model = model.to(getattr(torch, decoder.config.dtype))
    dtype = getattr(torch, decoder.config.dtype)
    state = {
        k: torch.tensor(np.asarray(v, np.float32)).to(dtype)
        for k, v in export_state(decoder).items()
    }
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
    model.tie_weights()
    return model


def run_specjax(decoder, prompts, new, kernel=True):
    """kernel=False: the same call with the CPU kernel switched off (XLA's dot)."""
    old = os.environ.get(kernels.ENV)
    os.environ[kernels.ENV] = "1" if kernel else "0"
    try:
        out = sj.generate(decoder, prompts, max_new_tokens=new, stop_token_ids=[])
    finally:
        os.environ.pop(kernels.ENV) if old is None else os.environ.__setitem__(kernels.ENV, old)
    return out.tokens


def run_torch(model, prompts, new):
    ids = torch.tensor(prompts)
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )
    return out[:, ids.shape[1] :].tolist()


def best_torch_threads(model, prompts, candidates) -> int:
    """The faster torch thread count on a short run: on a loaded machine, OpenMP threads that wait
    for a preempted sibling make 2 threads many times slower than 1."""
    times = {}
    for threads in candidates:
        torch.set_num_threads(threads)
        run_torch(model, prompts, 4)
        times[threads] = min(timed(run_torch, model, prompts, 8)[0] for _ in range(2))
    best = min(times, key=times.get)
    torch.set_num_threads(best)
    return best


def timed(fn, *args):
    t = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t, result


def bench_batch(decoder, model, batch, prompt_len, new, repeats):
    rng = np.random.default_rng(batch)
    prompts = rng.integers(0, decoder.config.vocab_size, (batch, prompt_len)).tolist()
    threads = best_torch_threads(model, prompts, sorted({1, os.cpu_count()}))
    first, _ = timed(run_specjax, decoder, prompts, new)
    timed(run_specjax, decoder, prompts, new, False)
    torch_first, _ = timed(run_torch, model, prompts, new)
    sj_times, off_times, pt_times = [], [], []
    for _ in range(repeats):
        dt, sj_tokens = timed(run_specjax, decoder, prompts, new)
        sj_times.append(dt)
        dt, off_tokens = timed(run_specjax, decoder, prompts, new, False)
        off_times.append(dt)
        dt, pt_tokens = timed(run_torch, model, prompts, new)
        pt_times.append(dt)
    sj_t, pt_t = statistics.median(sj_times), statistics.median(pt_times)
    off_t = statistics.median(off_times)
    agree = np.mean([a == b for a, b in zip(sj_tokens, pt_tokens, strict=True)])
    assert off_tokens == sj_tokens, "the kernel changed the tokens"
    return dict(
        batch=batch,
        specjax_s=sj_times,
        torch_s=pt_times,
        specjax_tok_s=batch * new / sj_t,
        specjax_kernel_off_s=off_times,
        specjax_kernel_off_tok_s=batch * new / off_t,
        torch_tok_s=batch * new / pt_t,
        speedup=pt_t / sj_t,
        specjax_compile_s=first - sj_t,
        torch_first_call_s=torch_first,
        torch_threads=threads,
        rows_identical=float(agree),
    )


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    l3 = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    return dict(
        nproc=os.cpu_count(),
        cpu=cpu,
        l3_cache=l3.read_text().strip() if l3.exists() else None,
        load_avg=os.getloadavg(),
        jax=jax.__version__,
        torch=torch.__version__,
        torch_threads=torch.get_num_threads(),
        transformers=transformers.__version__,
        cpu_description=build.cpu_description(),
    )


def results_table(result) -> str:
    return table(
        ["batch", "specjax tok/s", "kernel off tok/s", "transformers tok/s", "speedup",
         "floor tok/s", "specjax / floor", "compile (s)"],
        [
            [r["batch"], f"{r['specjax_tok_s']:.1f}", f"{r['specjax_kernel_off_tok_s']:.1f}",
             f"{r['torch_tok_s']:.1f}", f"{r['speedup']:.2f}x", f"{r['floor_tok_s']:.1f}",
             f"{r['fraction_of_floor']:.0%}", f"{r['specjax_compile_s']:.1f}"]
            for r in result["runs"]
        ],
        "rrrrrrrr",
    )  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2 layers, for a smoke test")
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16"], help="both sides"
    )
    parser.add_argument("--out", default=str(RESULTS / "bench_autoregressive.json"))
    args = parser.parse_args()

    config = bench_config(args.quick, args.dtype)
    decoder = sj.Decoder(config, seed=0)
    model = torch_model(decoder)
    weight_bytes = config.num_params() * jax.numpy.dtype(args.dtype).itemsize
    bandwidth = memory_bandwidth()
    result = dict(
        command="python " + " ".join(sys.argv),
        machine=machine(),
        params=config.num_params(),
        weight_bytes=weight_bytes,
        bandwidth_gb_s=bandwidth / 1e9,
        floor_step_ms=1e3 * weight_bytes / bandwidth,
        prompt=args.prompt,
        new=args.new,
        repeats=args.repeats,
        runs=[],
    )
    print(f"{config.num_params() / 1e6:.1f}M params, bandwidth {bandwidth / 1e9:.1f} GB/s")
    for batch in args.batch:
        run = bench_batch(decoder, model, batch, args.prompt, args.new, args.repeats)
        run["floor_tok_s"] = batch * bandwidth / weight_bytes
        run["fraction_of_floor"] = run["specjax_tok_s"] / run["floor_tok_s"]
        result["runs"].append(run)
        print(json.dumps(run))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(results_table(result))


if __name__ == "__main__":
    main()
