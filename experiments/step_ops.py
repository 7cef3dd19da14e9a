"""A decode step's own ops, by component: only what runs inside the decode loop.

`decode_step_profile.py --what heads-step` divides every op of a call (the prefill's too) by
the steps, so a method with fewer steps carries more of the prefill a step. This keeps the ops
of the loop's body only: it dumps the optimized program (XLA_FLAGS, set here before jax is
imported), maps each profiled op to its `op_name` (`.../while/body/...`), and prints
microseconds a step (profiled: read as shares) by component: the target's attention kernels
(q/k/v, cache attention, o) and MLP kernels summed over layers, every other kernel call by its
output shape (the LM head, a drafter's blocks and heads), and XLA's own ops by name. For
autoregressive decoding and a trained drafter's chain (`--depth`) or tree (`--tree`), T=0,
batch 1, one held-out prompt, `--new` tokens; `--heads` takes several head sets (name=dir).
`--prefill`: the ops outside the loop of a 1-token call instead (the prefill and the first
token), us a call. `--detail`: every op by its name and result shape instead of by component
(an EAGLE drafter's ops carry no module path); `--batch B`: B held-out prompts together.

    cd experiments && python step_ops.py --target ../workdirs/qs/target \
        --heads own=../workdirs/qs/medusa
    cd experiments && python step_ops.py --target ../workdirs/qs/target --prefill --top 12
    cd experiments && python step_ops.py --target ../workdirs/qs/target \
        --heads e3=../workdirs/qs/eagle3 --detail --top 30
"""

from __future__ import annotations

import tempfile

from hlo_dump import generate_dump_dir

_DUMP = generate_dump_dir("step-ops")  # before jax: re-runs with XLA's dump on

import argparse  # noqa: E402
import collections  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
from decode_step_profile import held_out  # noqa: E402

import specjax as sj  # noqa: E402
from specjax.kernels import build  # noqa: E402

_INSTR = re.compile(r"\s*(?:ROOT )?%(\S+) = (\S+) .*?op_name=\"([^\"]*)\"")


def op_names() -> dict[str, dict[str, tuple[str, str]]]:
    """Per dumped generate module: instruction name -> (op_name, result shape)."""
    modules = {}
    for path in Path(_DUMP).glob("*jit__generate_jit.cpu_after_optimizations.txt"):
        table = modules.setdefault(path.name, {})
        for line in path.read_text().splitlines():
            if m := _INSTR.match(line):
                table[m.group(1)] = (m.group(3), m.group(2))
    return modules


def component(name: str, op: str, shape: str, detail: bool = False) -> str:
    body = re.sub(r"layer_\d+", "layer_*", op.split("/while/body/")[-1])
    body = body.removeprefix("jit(_generate_jit)/")
    if detail:  # every op by its name and result shape (a drafter's ops carry no module path)
        kind = "kernel" if name.startswith("ffi_call") else "XLA"
        return f"{kind} {body[-70:]} {shape.split('{')[0][:40]}"
    if name.startswith("ffi_call"):
        for part in ("attention", "mlp"):
            if f"layer_*/{part}/" in body:
                return f"kernels: target {part}, all layers"
        return f"kernel {shape.split('{')[0]}"
    return f"XLA {body}"


def step_ops(target, prompts, spec, new: int, prefill: bool = False, detail: bool = False):
    run = lambda: sj.generate(target, prompts, new, stop_token_ids=[], speculative_config=spec)
    run()  # compile (and dump)
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        out = run()
        walls.append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as logdir:
        jax.profiler.start_trace(logdir)
        out = run()
        jax.profiler.stop_trace()
        (trace,) = Path(logdir).rglob("*.trace.json.gz")
        events = [e for e in json.load(gzip.open(trace))["traceEvents"] if e.get("ph") == "X"]
    names = {e["name"] for e in events}
    modules = op_names()
    table = modules[max(modules, key=lambda k: len(names & set(modules[k])))]
    parts = collections.Counter()
    for e in events:
        op, shape = table.get(e["name"], ("", ""))
        if op and (("/while/" not in op) if prefill else ("/while/body/" in op)):
            parts[component(e["name"], op, shape, detail)] += e["dur"]
    return parts, out.stats, statistics.median(walls), len(events)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--heads", nargs="+", default=[], help="name=drafter_dir ...")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument(
        "--tree", default=None, help="also each drafter on this draft_tree (e.g. medusa_k4_8)"
    )
    ap.add_argument("--new", type=int, default=129)
    ap.add_argument("--top", type=int, default=8, help="XLA op kinds listed")
    ap.add_argument(
        "--prefill",
        action="store_true",
        help="the ops outside the loop of a 1-token call instead (the prefill), us a call",
    )
    ap.add_argument(
        "--detail",
        action="store_true",
        help="every op by name and result shape, not by component (--top: how many)",
    )
    ap.add_argument("--batch", type=int, default=1, help="held-out prompts decoded together")
    args = ap.parse_args()
    if args.prefill:
        args.new = 1
    target = sj.load_model(args.target)
    prompts = held_out(target, args.batch)[: args.batch]
    settings = {"autoregressive": None}
    for item in args.heads:
        name, path = item.split("=", 1)
        drafter = sj.load_draft(path, target=target)
        settings[f"{name} chain {args.depth}"] = {
            "method": drafter.config.method,
            "model": drafter,
            "num_speculative_tokens": args.depth,
        }
        if args.tree:
            settings[f"{name} tree {args.tree}"] = {
                "method": drafter.config.method,
                "model": drafter,
                "draft_tree": args.tree,
                "num_speculative_tokens": args.depth,
            }
    print("cpu:", build.cpu_description())
    print(
        f"T=0, batch {len(prompts)}, {len(prompts[0])}-token prompts, {args.new} new tokens; "
        "profiled us a step"
    )
    for name, spec in settings.items():
        parts, stats, wall, n_events = step_ops(
            target, prompts, spec, args.new, args.prefill, args.detail
        )
        steps = max(stats["steps"], 1)
        total = sum(parts.values()) / steps
        tau = stats["mean_accepted_length"] or 1.0
        print(
            f"\n{name}: {steps} steps, tau {tau:.2f}, {total:.0f} us a step inside the loop "
            f"(profiled ops); whole call unprofiled {wall * 1e3:.1f} ms, "
            f"{wall * 1e6 / steps:.0f} us a step with the prefill; {n_events / steps:.0f} "
            "profiled ops a step"
        )
        kernels = [(k, v) for k, v in parts.most_common() if k.startswith("kernel")]
        xla = [(k, v) for k, v in parts.most_common() if k.startswith("XLA")]
        for k, v in kernels:
            print(f"  {k:48s} {v / steps:7.1f}")
        print(f"  {'XLA ops, all':48s} {sum(v for _, v in xla) / steps:7.1f}")
        for k, v in xla[: args.top]:
            print(f"    {k[:46]:46s} {v / steps:7.1f}")


if __name__ == "__main__":
    main()
