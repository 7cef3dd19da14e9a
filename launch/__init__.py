"""Entry points: `launch.main` (one run of a config) and `launch.sweep` (a config's sweep).

Run from the repository root (`python -m launch.main ...`, where `configs` is importable).
The installed copy is `specjax_launch`, behind the `specjax` console script, never a
top-level `launch`; imports inside this package are relative, so both names work.
"""
