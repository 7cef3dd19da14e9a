"""Ablation studies: `get_config(arg)` for the base run and `get_sweep()` for its grid."""
