"""XLA's dump of the generate program, for the experiments that read compiled programs.

`generate_dump_dir(name)` must run before jax is imported: the first time, it re-runs the
script with XLA_FLAGS asking XLA to write the optimized generate programs as text into a new
temporary folder; in the re-run it returns that folder.
"""

from __future__ import annotations

import os
import sys
import tempfile


def generate_dump_dir(name: str) -> str:
    """The folder XLA dumps `*generate*` programs into for this script (`name` keys it)."""
    var = f"SPECJAX_{name.upper().replace('-', '_')}_DUMP"
    if var in os.environ:
        return os.environ[var]
    folder = tempfile.mkdtemp(prefix=f"{name}-")
    flags = f"--xla_dump_to={folder} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*generate.*"
    env = {**os.environ, var: folder}
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flags).strip()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)
