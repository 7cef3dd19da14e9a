"""Entry points: `launch.main` (one run of a config) and `launch.sweep` (a config's sweep)."""
