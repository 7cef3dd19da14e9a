"""EAGLE-3 drafters trained as the quickstart trains its own, one config change per variant.

For each `--variant name="key=value ..."` (dotted keys of `configs/quickstart.py`'s `eagle3`
section, values as Python literals), the quickstart's EAGLE-3 stage on a finished quickstart
workdir's target and its shared self-distilled rows (`<workdir>/distill`, so no row is
generated again), into `<out>/e3_<name>`; prints each run's seconds and held-out top-1.
Compare the drafters with `heads_ab.py`.

    python experiments/eagle_budget.py --workdir workdirs/qs --out workdirs \
        --variant s480="train.num_steps=480" ttt4="ttt_steps=4 train.num_steps=360"
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's configs/

from configs import quickstart  # noqa: E402
from specjax import load_model  # noqa: E402
from specjax.train.eagle import train_eagle  # noqa: E402


def apply(config, assignments: str):
    """Set `a.b=value` items (space separated) on an ml_collections config, refusing new keys."""
    for item in assignments.split():
        key, _, raw = item.partition("=")
        *path, leaf = key.split(".")
        node = config
        for part in path:
            node = node[part]
        if leaf not in node:
            raise SystemExit(f"{key}: no such key in the quickstart's eagle3 config")
        node[leaf] = ast.literal_eval(raw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True, help="a finished quickstart workdir")
    ap.add_argument("--variant", nargs="+", required=True, help='name="key=value ..."')
    ap.add_argument("--out", default="workdirs")
    args = ap.parse_args()
    w = Path(args.workdir)
    target = load_model(w / "target" / "hf")
    for spec in args.variant:
        name, _, assignments = spec.partition("=")
        config = quickstart.get_config().eagle3.copy_and_resolve_references()
        config.target = str(w / "target" / "hf")
        config.data.cache_dir = str(w / "distill")
        apply(config, assignments.strip('"'))
        t = time.time()
        summary = train_eagle(config, Path(args.out) / f"e3_{name}", target=target)
        print(f"{name} ({assignments}): {time.time() - t:.0f} s, top-1 {summary.get('top1')}")


if __name__ == "__main__":
    main()
