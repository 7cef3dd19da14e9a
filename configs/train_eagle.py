r"""Train an EAGLE-3 drafter (training-time test) or an EAGLE-1 drafter on a frozen target.

    python -m launch.main --config=configs/train_eagle.py \
        --config.target=workdirs/quickstart/target --workdir=workdirs/eagle3
    python -m launch.main --config=configs/train_eagle.py --config.method=eagle \
        --config.target=workdirs/quickstart/target --workdir=workdirs/eagle
    python -m launch.main --config=configs/train_eagle.py:tiny \
        --config.target=<a trained LM workdir> --workdir=/tmp/eagle3   # CI smoke, seconds

On a device mesh the training step runs data- and tensor-parallel (`--config.mesh.data=4
--config.mesh.model=2` on 8 devices; train.batch_size must divide by mesh.data); the target
is loaded onto the mesh, and its self-distillation and stored features are computed on it
(with several processes, process 0 writes them to the shared workdir).

Knobs of the drafter: `--config.head.draft_vocab_size=512` (EAGLE-3's reduced draft
vocabulary), `--config.head.intermediate_size=512` (the drafter layer's MLP width; 0 = the
target's: on the quickstart pair 512 or 256 made a step cheaper and tau lower, a wash;
BENCHMARKS.md "An Intel Xeon"), `--config.head.tap_layers='(1, 3, 4)'`.

The target is any directory `sj.load_model` loads (an HF checkpoint or a train_lm workdir).
Then decode with the drafter:

    drafter = sj.load_draft("workdirs/eagle3")
    sj.generate(target, prompts, 64, speculative_config={"method": "eagle3", "model": drafter,
                "num_speculative_tokens": 4})

Variants (`arg`):
  default  EAGLE-3 on the target's own greedy continuations (self-distillation, the rows
           train_medusa makes: 128 prompts a category of 32 tokens + 96 generated at T=0),
           7 TTT steps, the full target vocabulary (the quickstart's V = 2048 is small
           already), 300 steps of 8 rows at lr 1e-3; the target's features (last hidden +
           3 taps, 205 MB for the 272 rows) computed once and stored, which saves the
           target forward (~15% of a step) at every step.
           Measured on the dev box (2-core VM) with the quickstart target (6x384, V = 2048,
           taps 1, 3, 4; drafter 3.0M parameters): 1.6 s a step alone on the machine
           (~650 tokens/s over 40 steps: ~9 min for 300, an estimate); the 300-step run
           below took 17 min beside a running quickstart (3.3 s a step, load ~6);
           held-out top-1 by drafting step (k = 0..6, each given the true earlier tokens)
           0.79 / 0.74 / 0.76 / 0.75 / 0.76 / 0.74 / 0.74 after 100 steps, 0.84 / 0.84 /
           0.83 / 0.85 / 0.84 / 0.84 / 0.82 after 200, 0.86 / 0.85 / 0.86 / 0.86 / 0.86 /
           0.85 / 0.84 after 300 (its greedy rows repeat a lot: Medusa's head 0 reaches
           0.86 on them too).
  tiny     2 TTT steps, 8 prompts a category, 30 steps, features live: the CI smoke
           setting (seconds).

`--config.method=eagle` trains EAGLE-1 with the same data and loop (its loss: SmoothL1 on
the next feature + 0.1 CE, uniform feature noise 0.1; its eval unrolls `ttt_steps` drafting
steps too, feeding back its own features).
"""

from specjax.train.eagle import default_config


def get_config(arg=None):
    """The train_eagle config, variant `arg` ("default" when None)."""
    variant = arg or "default"
    if variant not in ("default", "tiny"):
        raise ValueError(f"configs/train_eagle.py: unknown variant {variant!r}; use default, tiny")
    config = default_config()
    config.method = "eagle3"
    config.features.precompute = True
    config.train.update(num_steps=300, eval_every=100, checkpoint_every=100)
    if variant == "tiny":
        config.data.update(num_prompts=8, eval_prompts=2, prompt_tokens=16, new_tokens=16,
                           max_chars=100_000, generate_batch_size=8)  # fmt: skip
        config.features.precompute = False
        config.ttt_steps = 2
        config.train.update(num_steps=30, warmup_steps=5, log_every=5, eval_every=15,
                            eval_batches=2, checkpoint_every=15)  # fmt: skip
    return config
