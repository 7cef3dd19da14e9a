"""Spec-Bench's questions as a benchmark workload (vendored under `spec_bench/`, Apache-2.0).

480 questions in 13 categories: MT-bench's 80 (8 categories, two turns each; the first turn is
the prompt) and translation, summarization, qa, math_reasoning and rag (80 each). A prompt is
the question's first turn rendered with the target's chat template when it has one (the way
a chat model is served), else the raw text. No training prompt of specjax's pipelines comes
from here, so every question is held out.
"""

from __future__ import annotations

import json
import logging
import zlib
from functools import cache
from pathlib import Path

import numpy as np

from specjax.validate import check_int

log = logging.getLogger(__name__)

QUESTIONS = Path(__file__).parent / "spec_bench" / "question.jsonl"
MT_BENCH = (
    "writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities",
)  # fmt: skip
CATEGORIES = (*MT_BENCH, "translation", "summarization", "qa", "math_reasoning", "rag")


@cache
def questions() -> tuple[dict, ...]:
    """Every question: {"question_id", "category", "turns"}, in the file's order."""
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    return tuple(rows)


def render(tokenizer, text: str) -> list[int]:
    """The ids of one user turn: through the chat template when the tokenizer has one."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.encode(tokenizer.chat(text))
    return tokenizer.encode(text)


def prompts_by_category(
    tokenizer,
    num_prompts: int,
    max_prompt_tokens: int,
    seed: int = 0,
    categories=None,
) -> dict[str, list[list[int]]]:
    """{category: prompt ids}: up to `num_prompts` questions of each category.

    Questions are taken in an order seeded by (seed, crc32(category)); one whose rendered
    prompt is longer than `max_prompt_tokens` is passed over (RAG and summarization prompts
    run to thousands of tokens), and a category left with none is skipped, both with a
    warning naming the counts.
    """
    check_int("num_prompts", num_prompts, 1)
    check_int("max_prompt_tokens", max_prompt_tokens, 1)
    wanted = CATEGORIES if categories is None else tuple(categories)
    unknown = sorted(set(wanted) - set(CATEGORIES))
    if unknown:
        raise ValueError(f"Spec-Bench categories {unknown} do not exist; they are {CATEGORIES}")
    by_category: dict[str, list[str]] = {}
    for q in questions():
        by_category.setdefault(q["category"], []).append(q["turns"][0])
    out: dict[str, list[list[int]]] = {}
    for category in sorted(wanted):
        texts = by_category[category]
        rng = np.random.default_rng([seed, zlib.crc32(category.encode())])
        chosen, too_long = [], 0
        for i in rng.permutation(len(texts)):
            ids = render(tokenizer, texts[i])
            if len(ids) > max_prompt_tokens:
                too_long += 1
                continue
            chosen.append(ids)
            if len(chosen) == num_prompts:
                break
        if len(chosen) < num_prompts:
            log.warning(
                "Spec-Bench %s: %d of %d prompts (%d questions longer than %d tokens)",
                category, len(chosen), num_prompts, too_long, max_prompt_tokens,
            )  # fmt: skip
        if chosen:
            out[category] = chosen
    return out
