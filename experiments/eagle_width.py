"""EAGLE-3 drafters with a narrower MLP, trained as the quickstart trains its own.

For each width in `--widths`, the quickstart's EAGLE-3 stage (`configs/quickstart.py`'s
`eagle3` section as it stands; the recorded runs were 240 steps at 3e-3 of a 3-step
training-time test, 512 draft ids, the section until 2026-12-07 (6)) on a finished
quickstart workdir's target and its shared self-distilled rows (`<workdir>/distill`, so no row
is generated again), with `head.intermediate_size` set (0 = the target's width), into
`<out>/e3_f<width>`. Compare the drafters with `heads_ab.py --depth 3 --dynamic 4,2,6`.

    python experiments/eagle_width.py --workdir workdirs/qs --widths 512 256 --out workdirs
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's configs/

from configs import quickstart  # noqa: E402
from specjax import load_model  # noqa: E402
from specjax.train.eagle import train_eagle  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True, help="a finished quickstart workdir")
    ap.add_argument("--widths", type=int, nargs="+", default=[512, 256])
    ap.add_argument("--out", default="workdirs")
    args = ap.parse_args()
    w = Path(args.workdir)
    target = load_model(w / "target" / "hf")
    for width in args.widths:
        config = quickstart.get_config().eagle3.copy_and_resolve_references()
        config.target = str(w / "target" / "hf")
        config.data.cache_dir = str(w / "distill")
        config.head.intermediate_size = width
        t = time.time()
        summary = train_eagle(config, Path(args.out) / f"e3_f{width}", target=target)
        print(f"width {width}: {time.time() - t:.0f} s, held-out top-1 {summary.get('top1')}")


if __name__ == "__main__":
    main()
