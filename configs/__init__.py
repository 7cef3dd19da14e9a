"""Run configurations: each module has `get_config(arg=None)`; ablations/ add `get_sweep()`."""
