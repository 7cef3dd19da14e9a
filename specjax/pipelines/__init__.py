"""Pipelines: runs that train and then benchmark, above both `specjax.train` and `specjax.bench`.

`quickstart.py` is the one pipeline: train a target LM (or load a given one, e.g. a GGUF),
a draft LM, Medusa heads and an EAGLE-3 drafter, then run the benchmark and write the report
(`configs/quickstart.py` with the embedded corpus, `configs/smollm2.py` with a real model).

The arrows run one way: a pipeline imports `train` and `bench`; neither of them imports the
other or a pipeline, and nothing in the library imports this package (the launcher, configs,
experiments and tests do). `tests/test_layout.py` checks it.
"""
