"""Pick a speculative method and N for a workload: measure alpha and c, predict, verify.

Command:

    python -m launch.main --config=configs/pick.py \
        --config.pick.target=workdirs/quickstart/target \
        --config.pick.draft=workdirs/quickstart/draft \
        --workdir=workdirs/pick

Your own prompts: `--config.pick.prompts_file=prompts.jsonl` (a "prompt" field a line, or a
.txt file with a prompt a line); sampled decoding: `--config.pick.temperature=1.0`; a
served batch of 8 rows: `--config.pick.batch_size=8` (the step costs, the verify curve and
the measured candidates at 8 rows; alpha per row at batch 1).
`--config=configs/pick.py:small` measures only the winner (one repeat, 32 new tokens).

Writes <workdir>/recommendation.md (the pick, a predicted-vs-measured table, alpha and c per
method) and recommendation.json. The prediction is Leviathan et al.'s
speedup = (1 - a^(N+1)) / ((1 - a)(N c + 1)) with alpha measured from acceptance by
position and c from timing the draft and the target generating alone (see
`specjax/picker.py`).

What to expect (this project's 2-core shared x86 box; pair Q of
docs/skill-spec-decode-picker.md: a 6x384 target from an earlier quickstart configuration,
300 steps, eval loss 4.41, and the 2x128 draft): 5-8 minutes. alpha 0.48 (draft_model), 0.56 (draft_tree), 0.57 (ngram) at T=0;
0.59 / 0.77 / 0.006 at T=1. c is at the edge of what a loaded 2-core box resolves (0.02-0.5
across runs). Predicted tau matches measured within 0.1-0.3; predicted speedups (1.0-2.3x)
exceed the measured ones (0.4-0.96x) by the step overhead the recommendation reports (0.5-2
target steps for chains), so it recommends not speculating on this CPU. See
docs/skill-spec-decode-picker.md.
"""

import ml_collections

from specjax import picker


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The picker config; arg "small" gives the quick variant.

    Args:
      arg: None or "small".
    Returns:
      ConfigDict with task="pick" and pick=`specjax.picker.default_config()`.
    """
    config = ml_collections.ConfigDict()
    config.task = "pick"
    config.pick = picker.default_config()
    if arg == "small":
        config.pick.measure_top = 1
        config.pick.repeats = 1
        config.pick.max_new_tokens = 32
    elif arg:
        raise ValueError(f"configs/pick.py: unknown variant {arg!r}; use '' or 'small'")
    return config
