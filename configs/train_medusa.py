r"""Train Medusa heads on a frozen target (Medusa-1), or jointly with it (Medusa-2).

    python -m launch.main --config=configs/train_medusa.py \
        --config.target=workdirs/quickstart/target --workdir=workdirs/medusa
    python -m launch.main --config=configs/train_medusa.py:joint \
        --config.target=workdirs/quickstart/target --workdir=workdirs/medusa2
    python -m launch.main --config=configs/train_medusa.py:tiny \
        --config.target=<a trained LM workdir> --workdir=/tmp/medusa   # CI smoke, seconds

On a device mesh the training step runs data- and tensor-parallel (`--config.mesh.data=4
--config.mesh.model=2` on 8 devices; train.batch_size must divide by mesh.data); the target
is loaded onto the mesh, and its self-distillation and stored features are computed on it
(with several processes, process 0 writes them to the shared workdir).

The target is any directory `sj.load_model` loads (an HF checkpoint or a train_lm workdir).
Then decode with the heads:

    heads = sj.load_draft("workdirs/medusa")
    sj.generate(target, prompts, 64, speculative_config={"method": "medusa", "model": heads,
                "num_speculative_tokens": 4, "draft_tree": "mc_sim_7b_63"})

Variants (`arg`):
  default  4 heads x 1 block on the target's own continuations (self-distillation: 128 prompts
           a category of 32 tokens + 96 generated at T=0), 400 steps of 8 rows at lr 1e-3.
  joint    Medusa-2: 100 heads-only steps, then the backbone joins at lr 1e-4 (own warm-up),
           loss LM + 0.2 Medusa, KL to the original target's logits (weight 1), on rows the
           target *samples* (T=1): on its greedy rows the LM term pulls the target towards
           its own argmax (experiments/LOG.md 2026-11-30, Medusa on tinyshakespeare: +0.28
           nats held-out loss with greedy rows, +0.007 with sampled ones).
  tiny     2 heads on 8 prompts a category, 30 steps: the CI smoke setting.
"""

from specjax.train.heads import default_config


def get_config(arg=None):
    """The train_heads config for Medusa, variant `arg` ("default" when None)."""
    variant = arg or "default"
    if variant not in ("default", "joint", "tiny"):
        raise ValueError(
            f"configs/train_medusa.py: unknown variant {variant!r}; use default, joint, tiny"
        )
    config = default_config()
    config.method = "medusa"
    if variant == "joint":
        config.joint.update(enabled=True, kl_weight=1.0)
        config.data.temperature = 1.0
    if variant == "tiny":
        config.data.update(num_prompts=8, eval_prompts=2, prompt_tokens=16, new_tokens=16,
                           max_chars=100_000, generate_batch_size=8)  # fmt: skip
        config.heads.num_heads = 2
        config.train.update(num_steps=30, warmup_steps=5, log_every=5, eval_every=15,
                            eval_batches=2, checkpoint_every=15)  # fmt: skip
    return config
