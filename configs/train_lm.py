r"""Train a small Llama-family LM from scratch on the embedded corpus (stdlib code + pydoc prose).

    python -m launch.main --config=configs/train_lm.py:target --workdir=workdirs/target
    python -m launch.main --config=configs/train_lm.py:draft --workdir=workdirs/draft \
        --config.tokenizer.path=workdirs/target/tokenizer
    python -m launch.main --config=configs/train_lm.py:tiny --workdir=/tmp/lm   # seconds
    # On 8 devices: rows over 4 data shards, heads / MLP / vocabulary over 2 model shards
    # (`config.mesh`; 1 x 1 is one device; `--config.mesh.fsdp=True` also splits D over data).
    python -m launch.main --config=configs/train_lm.py:target --workdir=workdirs/target \
        --config.mesh.data=4 --config.mesh.model=2

Variants (`arg`):
  target  6 layers, D=384, 6 heads (2 kv), F=1024, V=2048: 11.0M parameters; 400 steps of
          8x128 tokens at peak lr 1.5e-3 (600 until 2026-12-01: cut to fit the quickstart's
          head trainers). The quickstart's target: its decode step costs ~13x the draft's on
          a 2-core CPU (3.24 vs 0.24 ms per token at batch 1).
  draft   2 layers, D=128, 4 heads (2 kv), F=384: 0.92M parameters; 400 steps of 16x128 at
          3e-3. Train it with the target's tokenizer
          (`--config.tokenizer.path=<target workdir>`).
  tiny    2 layers, D=32 on 100k characters per category, 40 steps: the CI smoke setting.

Measured on a 2-core x86 VM (jax 0.10.2 CPU, idle): target 400 steps 5.9 min, eval loss
4.42 (perplexity 83; 600 steps: ~7-11 min by the VM's speed, 4.16); draft 400 steps ~1.3
min, eval loss 3.78 (perplexity 44; 300 steps as the quickstart runs it: 4.04); tiny ~10 s,
eval loss ~5.3. Learning rate of the target (eval loss after 150 of 600 steps): 6e-3 5.43, 3e-3 5.28,
1.5e-3 5.11, 1e-3 5.16; the wider model wants a smaller step than the draft.
An interrupted run resumes from its latest checkpoint when started again with the same
workdir (same seed -> the same parameters as an uninterrupted run).
"""

from specjax.train.lm import default_config

MODELS = {
    "target": dict(
        num_layers=6,
        hidden_size=384,
        num_heads=6,
        num_kv_heads=2,
        head_dim=64,
        intermediate_size=1024,
    ),
    "draft": dict(
        num_layers=2,
        hidden_size=128,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        intermediate_size=384,
    ),
    "tiny": dict(
        num_layers=2,
        hidden_size=32,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        intermediate_size=64,
        max_position_embeddings=256,
    ),
}

TRAIN = {
    "target": dict(
        batch_size=8,
        num_steps=400,
        learning_rate=1.5e-3,
        warmup_steps=40,
        eval_every=200,
        checkpoint_every=200,
    ),
    "draft": dict(num_steps=400, learning_rate=3e-3, warmup_steps=40),
    "tiny": dict(
        seq_len=32,
        batch_size=8,
        num_steps=40,
        warmup_steps=5,
        log_every=5,
        eval_every=20,
        eval_batches=2,
        checkpoint_every=20,
    ),
}


def get_config(arg=None):
    """The train_lm config for variant `arg` ("target" when None)."""
    variant = arg or "target"
    if variant not in MODELS:
        raise ValueError(f"configs/train_lm.py: unknown variant {variant!r}; use {sorted(MODELS)}")
    config = default_config()
    config.model.update(MODELS[variant])
    config.train.update(TRAIN[variant])
    if variant == "tiny":
        config.data.max_chars = 100_000
        config.tokenizer.vocab_size = 512
    return config
