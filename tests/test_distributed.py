"""Two processes on localhost through `jax.distributed.initialize` give one process's numbers.

Three child processes of this file run the same computation (`compute`) on a tiny random Llama
built from the same seed in each: two of them, one CPU device each, join one JAX cluster
(`specjax.parallel.initialize_distributed`, CPU collectives over gloo) and run it on a (2, 1)
mesh whose data axis spans both processes; the third runs it alone on one device (the
reference). The computation: two LM training steps the way `specjax.train.lm` takes them
(parameters and AdamW state placed by the rules, each process reading only its own rows of
each batch through `batching.batches(local=...)` and `jax.make_array_from_process_local_data`),
an eval loss on a batch that does not divide over the processes (replicated), the state
gathered for export, and `sj.generate` at T=0, autoregressive and ngram.

Checked: generate's tokens and step counts equal exactly; the initial state equal; the
training losses within 1e-5 relative; the AdamW moments within 1e-5 of their norm after the
first step (1e-3 after the second, whose gradient is taken at already different parameters)
and the parameter updates within 1e-3 (the sums are split over two processes, so they are
ordered differently: tests/mesh/test_train_mesh.py says why AdamW widens the update's bound);
and each process read only its half of every batch.

The head trainers, end to end (slow): Medusa-1 and EAGLE-3 runs through `train_heads` and
`train_eagle` with config.mesh.data = 2 over the two processes, sharing one workdir (the
target loaded onto the mesh, self-distillation generated on it, the features stored once, the
state checkpointed by orbax from both processes), then resumed for two more steps from that
checkpoint; against the same two runs in one process. Checked: the summaries agree (the eval
losses within 1e-4 relative), both resumed from step 4, and the exported heads within 1e-3
of their update's norm (six AdamW steps of sums split over two processes; see above).

Skipped only where this jaxlib has no CPU collectives (gloo), the one thing two CPU processes
need to exchange gradients.
"""

import json
import os
import socket
import string
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from configs import train_eagle, train_medusa
from configs import train_lm as train_lm_configs
from specjax import parallel
from specjax.train import batching, eagle, heads, lm, loop

try:  # the jaxlib build: CPU collectives (gloo) are compiled in or not
    from jax._src.lib import _jax as _xla

    GLOO = hasattr(_xla, "make_gloo_tcp_collectives")
except ImportError:
    GLOO = False

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 150
TRAINERS_TIMEOUT_S = 600
HEADS_RTOL = 1e-3  # of the last two steps' update, as UPDATE_RTOL
ROLES = ("0", "1", "reference")
NO_GLOO = "this jaxlib has no CPU collectives (gloo): two CPU processes cannot all-reduce"
# Relative norms per leaf: the AdamW moments after the first step (its gradient) and after
# the second (whose gradient is taken at parameters that already differ by the first update's
# amplified rounding), and every parameter's update since the initial state.
STATE_RTOL = {"step1": 1e-5, "step2": 1e-3}
UPDATE_RTOL = 1e-3
B, T, V = 4, 16, 64
PROMPTS = [[5, 17, 3, 42, 9, 11], [7, 8, 9, 10, 7, 8, 9, 10, 7, 8]]
MAX_NEW = 12


# ----------------------------------------------------------------------------- the children


def compute(mesh) -> dict:
    """The numbers compared across topologies: {name: numpy array}."""
    config = sj.ModelConfig(
        model_type="llama", vocab_size=V, hidden_size=32, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=128,
    )  # fmt: skip
    layout = None if mesh is None else parallel.Layout(mesh)
    train = lm.default_config().train
    train.update(batch_size=B, warmup_steps=0, learning_rate=1e-2)
    tx, _ = loop.make_optimizer(train)
    graphdef, state = lm.init_train_state(config, tx, seed=0, layout=layout)
    state, shardings = loop.place_state(state, layout)
    out = flatten("init", loop.gather(state, layout))

    rows = np.random.default_rng(0).integers(0, V, (4 * B, T + 1), dtype=np.int32)
    local = loop.local_rows(layout, B)
    out["local_rows"] = np.asarray(local.indices(B)[:2])
    stream = loop.sharded_stream(batching.batches(rows, B, seed=0, local=local), layout)
    step = lm.make_train_step(graphdef, layout=layout, shardings=shardings)
    losses = []
    for name in ("step1", "step2"):
        _, batch = next(stream)
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
        out.update(flatten(name, loop.gather(state, layout)))
    out["loss"] = np.asarray(losses)
    evaluate = loop.on_layout(lm.make_eval_step(graphdef), layout)
    out["eval_loss"] = np.asarray(float(evaluate(state, rows[:3, :-1], rows[:3, 1:])))

    model = sj.Decoder(config, seed=0)
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
    for name, spec in (("autoregressive", None), ("ngram", ngram)):
        result = sj.generate(model, PROMPTS, MAX_NEW, speculative_config=spec, mesh=mesh)
        out[f"{name}/tokens"] = np.asarray(result.tokens)
        out[f"{name}/steps"] = np.asarray(result.stats["steps"])
    return out


def flatten(prefix: str, state) -> dict:
    flat = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(state))[0]
    return {f"{prefix}/{jax.tree_util.keystr(p)}": np.asarray(x) for p, x in flat}


def train_both(workdir: Path, target_dir: str, corpus: str, data_axis: int) -> dict:
    """Medusa-1 and EAGLE-3 for 4 steps, then resumed to 6: {"<method>/<name>": array}."""
    out = {}
    for method in ("medusa", "eagle3"):
        make, trainer = {
            "medusa": (train_medusa.get_config, heads.train_heads),
            "eagle3": (train_eagle.get_config, eagle.train_eagle),
        }[method]
        config = make("tiny")
        config.target = target_dir
        config.data.update(source=corpus, sample_by="line", max_chars=None, num_prompts=8,
                           eval_prompts=2, generate_batch_size=4)  # fmt: skip
        config.features.update(precompute=True, batch_size=4)
        config.train.update(num_steps=4, warmup_steps=1, checkpoint_every=2, eval_every=4,
                            log_every=2, eval_batches=1, progress=False)  # fmt: skip
        config.mesh.data = data_axis
        summaries = []
        for stage, steps in (("step4", 4), ("step6", 6)):  # the second resumes from step 4
            config.train.num_steps = steps
            summaries.append(trainer(config, workdir / method))
            draft = sj.load_draft(workdir / method)
            out.update(flatten(f"{method}/{stage}", nnx.state(draft, nnx.Param)))
        out[f"{method}/eval_loss"] = np.asarray([s["eval_loss"] for s in summaries])
        out[f"{method}/resumed_from"] = np.asarray([s["resumed_from"] for s in summaries])
    return out


def child(role: str, port: int, out: str, *trainer_args: str) -> None:
    mesh = None
    if role != "reference":
        parallel.initialize_distributed(f"localhost:{port}", num_processes=2, process_id=int(role))
        assert jax.process_count() == 2 and jax.device_count() == 2, jax.devices()
        mesh = parallel.make_mesh(2, 1)
    jax.config.update("jax_default_matmul_precision", "highest")
    if trainer_args:
        workdir, target_dir, corpus = trainer_args
        np.savez(out, **train_both(Path(workdir), target_dir, corpus, 1 if mesh is None else 2))
    else:
        np.savez(out, **compute(mesh))


# ------------------------------------------------------------------------------- the test


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_children(tmp_path: Path, timeout_s: int, args: dict | None = None) -> dict:
    """Start the two cluster processes and the reference, wait, return {role: numbers}.

    `args`: {role: extra argv} for the trainer children (None: `compute`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    port = free_port()
    procs = {
        role: subprocess.Popen(
            [
                sys.executable,
                __file__,
                role,
                str(port),
                str(tmp_path / f"{role}.npz"),
                *(args or {}).get(role, []),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for role in ROLES
    }
    logs = {}
    try:
        for role, proc in procs.items():
            logs[role] = proc.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        for proc in procs.values():
            proc.kill()
        pytest.fail(f"a child ran past {timeout_s} s: {json.dumps(logs)[-4000:]}")
    for role, log in logs.items():
        (tmp_path / f"{role}.log").write_text(log)
    failed = [role for role, proc in procs.items() if proc.returncode != 0]
    assert not failed, "\n".join(f"child {r} failed:\n{logs[r][-4000:]}" for r in failed)
    return {role: dict(np.load(tmp_path / f"{role}.npz")) for role in ROLES}


@pytest.mark.slow  # two processes of jax.distributed: half a minute
@pytest.mark.skipif(not GLOO, reason=NO_GLOO)
def test_two_processes_give_one_process_numbers(tmp_path):
    numbers = run_children(tmp_path, TIMEOUT_S)
    ref = numbers["reference"]
    for role in ("0", "1"):
        got = numbers[role]
        assert got.keys() == ref.keys()
        # Each process read its own half of every batch; one process reads all of it.
        np.testing.assert_array_equal(
            got["local_rows"], [B // 2 * int(role), B // 2 * (int(role) + 1)]
        )
        np.testing.assert_array_equal(ref["local_rows"], [0, B])
        for name in ("autoregressive", "ngram"):
            for what in ("tokens", "steps"):
                key = f"{name}/{what}"
                np.testing.assert_array_equal(got[key], ref[key], err_msg=f"{role}: {key}")
        np.testing.assert_allclose(got["loss"], ref["loss"], rtol=1e-5)
        np.testing.assert_allclose(got["eval_loss"], ref["eval_loss"], rtol=1e-5)
        moved = 0
        for key, want in ref.items():
            stage, _, name = key.partition("/")
            if stage == "init":
                np.testing.assert_array_equal(got[key], want, err_msg=key)
            if stage not in STATE_RTOL or not np.issubdtype(want.dtype, np.floating):
                continue
            if "opt_state" in name:
                err, scale = np.linalg.norm(got[key] - want), np.linalg.norm(want)
                rtol = STATE_RTOL[stage]
            else:  # the update since the initial state
                err = np.linalg.norm(got[key] - want)
                scale, rtol = np.linalg.norm(want - ref[f"init/{name}"]), UPDATE_RTOL
                moved += bool(scale > 0)
            assert err <= rtol * max(scale, 1e-30), f"{role}: {key}: {err:.2e} of {scale:.2e}"
        assert moved >= 6


@pytest.mark.slow
@pytest.mark.skipif(not GLOO, reason=NO_GLOO)
def test_the_head_trainers_on_two_processes_give_one_process_heads(tmp_path):
    lines = []
    rng = np.random.default_rng(0)
    for _ in range(200):  # the alphabet in cyclic order from a random letter
        s = int(rng.integers(26))
        lines.append(" ".join(string.ascii_lowercase[(s + j) % 26] for j in range(40)))
    corpus = tmp_path / "cycles.txt"
    corpus.write_text("\n".join(lines) + "\n")
    config = train_lm_configs.get_config("tiny")
    config.data.update(source=str(corpus), sample_by="line", max_chars=None)
    config.tokenizer.vocab_size = 300
    config.train.update(num_steps=20, learning_rate=1e-2, progress=False)
    lm.train_lm(config, tmp_path / "target")

    shared = [str(tmp_path / "cluster"), str(tmp_path / "target"), str(corpus)]
    args = {"0": shared, "1": shared, "reference": [str(tmp_path / "alone"), *shared[1:]]}
    numbers = run_children(tmp_path, TRAINERS_TIMEOUT_S, args)
    ref = numbers["reference"]
    for role in ("0", "1"):
        got = numbers[role]
        assert got.keys() == ref.keys()
        for method in ("medusa", "eagle3"):
            np.testing.assert_array_equal(got[f"{method}/resumed_from"], [0, 4])
            np.testing.assert_allclose(got[f"{method}/eval_loss"], ref[f"{method}/eval_loss"],
                                       rtol=1e-5)  # fmt: skip
        moved = 0
        for key, want in ref.items():
            method, stage, name = (key.split("/", 2) + ["", ""])[:3]
            if stage != "step6":
                continue
            # Both roles load the heads process 0 exported; the reference's are its own. The
            # scale: how far the reference's last two (resumed) steps moved this array.
            err = np.linalg.norm(got[key] - want)
            scale = np.linalg.norm(want - ref[f"{method}/step4/{name}"])
            moved += bool(scale > 0)
            assert err <= HEADS_RTOL * max(scale, 1e-30), f"{role}: {key}: {err:.2e} of {scale:.2e}"
            np.testing.assert_allclose(got[f"{method}/step4/{name}"], ref[f"{method}/step4/{name}"],
                                       rtol=1e-4, atol=1e-6, err_msg=key)  # fmt: skip
        assert moved >= 10, moved


if __name__ == "__main__":
    child(sys.argv[1], int(sys.argv[2]), sys.argv[3], *sys.argv[4:])
