"""Corpora and prompts: what training and benchmarks both read.

Every corpus is a `datasets.Dataset` with two string columns, `text` (one document a row)
and `category` (what kind of text it is; benchmarks report per category). Sources:

- "embedded" (the default, no network): text every Python install carries, found through
  the running interpreter. Category "code" is the standard library's `.py` source; category
  "prose" is `pydoc_data/topics.py`, the language reference's English text, one document
  per topic.
- "pair_cycle" (synthetic, no network, seconds to learn): windows of one cyclic sequence of
  six letters in which the next letter is a function of the last two and of no single one
  (`pair_cycle_records`). A tiny model learns it in about a hundred steps and continues
  any window deterministically, so drafters trained on it can be told apart from broken
  ones: a draft one offset off is right 1 time in 6.
- a local `.txt` file or a directory of text files (one document per file), a `.json` or
  `.jsonl` file (a configurable text field), through `datasets`' local builders;
- any other string is a hub dataset name, passed to `datasets.load_dataset` (needs network).

    ds = load_text_dataset("embedded")
    train_ds, eval_ds = split_dataset(ds, eval_fraction=0.05, seed=0)
    prompts = held_out_prompts(eval_ds, tok, num_prompts=8, prompt_tokens=64, seed=0)
    chats = instruction_prompts(train_ds, tok, num_prompts=8, prompt_tokens=64, seed=0)

The trainers pack the train split into rows (`specjax.train.batching`); the benchmark and the
picker take held-out prompts from the eval split (`specjax.bench.workload`); the heads'
self-distillation asks the target to answer instruction prompts. Spec-Bench's questions are
the benchmark's own workload (`specjax.bench.spec_bench`): nothing trains on them.

Determinism: the split hashes document content (sha256 with the seed), so it is the same in
every process and does not move when documents are added elsewhere; prompts are drawn by
generators seeded by (seed, category).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import os
import sysconfig
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import datasets
import numpy as np

from specjax.validate import check_int, check_real

log = logging.getLogger(__name__)

CODE, PROSE = "code", "prose"

# Standard-library directories that are not ordinary library source: installed packages,
# test suites (with deliberately broken files), the IDLE app, generated codec tables and
# build configuration.
_EXCLUDED_DIRS = frozenset(
    {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idlelib", "encodings"}
)
_TEXT_SUFFIXES = (".txt", ".text", ".md", ".rst")
_JSON_SUFFIXES = (".json", ".jsonl")


# ------------------------------------------------------------------- the embedded corpus


def _stdlib_dir() -> Path:
    stdlib = sysconfig.get_path("stdlib")
    return Path(stdlib) if stdlib else Path(os.__file__).parent


def embedded_corpus_files() -> dict[str, list[Path]]:
    """The files of the embedded corpus, found through the running interpreter.

    Returns:
      {"code": the standard library's `.py` files (sorted by relative path; excluding
       site-packages, test suites, idlelib, generated `encodings` tables, `config-*` and
       `_sysconfigdata*`, and `pydoc_data`), "prose": [pydoc_data/topics.py]}.
    """
    import pydoc_data.topics

    stdlib = _stdlib_dir()
    code = []
    for path in stdlib.rglob("*.py"):
        rel = path.relative_to(stdlib)
        dirs = rel.parts[:-1]
        if any(d in _EXCLUDED_DIRS or d.startswith("config-") for d in dirs):
            continue
        if dirs[:1] == ("pydoc_data",) or rel.name.startswith("_sysconfigdata"):
            continue
        code.append(path)
    code.sort(key=lambda p: p.relative_to(stdlib).as_posix())
    return {CODE: code, PROSE: [Path(pydoc_data.topics.__file__)]}


@functools.lru_cache(maxsize=1)
def _embedded_records() -> tuple[tuple[str, str], ...]:
    """(text, category) of every embedded document: empty and duplicate texts dropped.

    Cached: the standard library does not change while the process runs.
    """
    import pydoc_data.topics

    files = embedded_corpus_files()
    texts = [(p.read_text(encoding="utf-8", errors="replace"), CODE) for p in files[CODE]]
    topics = pydoc_data.topics.topics
    texts += [(topics[name], PROSE) for name in sorted(topics)]
    # Duplicates (identical small __init__.py files) would straddle the train/eval split.
    unique = dict.fromkeys(r for r in texts if r[0].strip())
    return tuple(unique)


# ------------------------------------------------------------------- the pair-cycle corpus

PAIR_CYCLE = "pair_cycle"
PAIR_LETTERS = "abcdef"


def pair_cycle(m: int) -> list[int]:
    """A cyclic sequence over m symbols holding each ordered pair exactly once a period (m * m).

    The pair map (a, b) -> (b, perm_b[a]) is a bijection on pairs; the sequence follows it
    from (0, 0) under the first seed whose map is one cycle through all m * m pairs. Two
    symbols then fix the next one, and one fixes nothing (each symbol is followed by each of
    the m, once a period).
    """
    check_int("m", m, 2)
    for seed in itertools.count():
        rng = np.random.default_rng(seed)
        perms = rng.permuted(np.tile(np.arange(m), (m, 1)), axis=1)  # perms[b]: a -> next
        seq, a, b = [], 0, 0
        while True:
            seq.append(a)
            a, b = b, int(perms[b][a])
            if (a, b) == (0, 0):
                break
        if len(seq) == m * m:
            return seq
    raise AssertionError("unreachable")


def pair_cycle_text(start: int, length: int) -> str:
    """`length` letters of the six-letter pair cycle from offset `start`, each after a space
    (" c a f ..."): a byte-level BPE makes every letter one token, the same wherever it is."""
    cycle = _six_letter_cycle()
    return "".join(" " + PAIR_LETTERS[cycle[(start + j) % len(cycle)]] for j in range(length))


@functools.lru_cache(maxsize=1)
def _six_letter_cycle() -> tuple[int, ...]:
    return tuple(pair_cycle(len(PAIR_LETTERS)))


def pair_cycle_records(
    num_documents: int = 300, min_letters: int = 48, max_letters: int = 160, seed: int = 0
) -> tuple[tuple[str, str], ...]:
    """(text, category "pair_cycle") of the synthetic corpus: windows of the pair cycle.

    Document i starts at a random offset of the 36-letter cycle and runs a random length
    in [min_letters, max_letters] (a seeded generator), so documents are long enough that a
    packed training row rarely crosses a document end; duplicates are dropped (the split
    hashes content).
    """
    rng = np.random.default_rng([seed, zlib.crc32(PAIR_CYCLE.encode())])
    period = len(PAIR_LETTERS) ** 2
    texts = [
        pair_cycle_text(int(rng.integers(period)), int(rng.integers(min_letters, max_letters + 1)))
        for _ in range(num_documents)
    ]
    return tuple((text, PAIR_CYCLE) for text in dict.fromkeys(texts))


# ------------------------------------------------------------------- loading


def load_text_dataset(
    source: str | Path = "embedded",
    *,
    text_field: str = "text",
    category: str | None = None,
    category_field: str = "category",
    sample_by: str = "document",
    split: str = "train",
    hub_config: str | None = None,
    max_documents: int | None = None,
    max_chars: int | None = None,
    cache_dir: str | Path | None = None,
) -> datasets.Dataset:
    """Loads a corpus as a Dataset with string columns `text` and `category`.

    Args:
      source: "embedded"; "pair_cycle" (synthetic, `pair_cycle_records`); a `.txt` file
        or a directory of text files (`.txt`, `.text`, `.md`, `.rst`, searched
        recursively; by default one document per file); a `.json`/`.jsonl` file; otherwise
        a hub dataset name.
      text_field: the column holding the text (json and hub sources).
      category: the category of every row (overrides any category column); default: the
        `category_field` column where the source has one, else the file stem, directory
        name or hub name.
      category_field: the column read as the category where present (json and hub).
      sample_by: what one row of a text file is: "document" (the whole file), "paragraph"
        (blocks separated by blank lines: a single-file corpus such as tinyshakespeare
        then splits into train and eval) or "line".
      split: the hub split to load.
      hub_config: the hub dataset's configuration name.
      max_documents: keep at most this many documents of each category (in order).
      max_chars: keep at most this many characters of each category: documents in order,
        the one that crosses the budget truncated. Limits are per category so that a small
        run still has every category.
      cache_dir: where `datasets` caches what its builders prepare (default: its own).

    Returns:
      The Dataset, empty documents dropped.
    """
    _check_limit("max_documents", max_documents)
    _check_limit("max_chars", max_chars)
    if sample_by not in ("document", "paragraph", "line"):
        raise ValueError(f"sample_by={sample_by!r} is not one of 'document', 'paragraph', 'line'")
    if str(source) in ("embedded", PAIR_CYCLE):
        records = _embedded_records() if str(source) == "embedded" else pair_cycle_records()
        if category is not None:
            records = tuple((text, category) for text, _ in records)
        return _from_records(_limit_records(records, max_documents, max_chars))

    path = Path(source)
    cache_dir = None if cache_dir is None else str(cache_dir)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _TEXT_SUFFIXES)
        if not files:
            raise ValueError(f"no text files ({', '.join(_TEXT_SUFFIXES)}) under {path}")
        ds = _load_text_files(files, sample_by, cache_dir)
        default_category = path.resolve().name
    elif path.is_file() and path.suffix in _JSON_SUFFIXES:
        ds = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=cache_dir)
        default_category = path.stem
    elif path.is_file():
        ds = _load_text_files([path], sample_by, cache_dir)
        default_category = path.stem
    elif path.suffix in _TEXT_SUFFIXES + _JSON_SUFFIXES:
        raise FileNotFoundError(f"dataset file not found: {path}")
    else:
        ds = _load_hub(str(source), hub_config, split, cache_dir)
        default_category = str(source)
    if category is not None:
        category_field, default_category = None, category
    ds = _normalise_columns(ds, text_field, category_field, default_category)
    if max_documents is None and max_chars is None:
        return ds
    records = tuple(zip(ds["text"], ds["category"], strict=True))
    return _from_records(_limit_records(records, max_documents, max_chars))


def _load_text_files(
    files: Sequence[Path], sample_by: str, cache_dir: str | None
) -> datasets.Dataset:
    return datasets.load_dataset(
        "text",
        data_files=[str(f) for f in files],
        sample_by=sample_by,
        split="train",
        cache_dir=cache_dir,
    )


def _load_hub(name: str, config: str | None, split: str, cache_dir: str | None):
    try:
        return datasets.load_dataset(name, config, split=split, cache_dir=cache_dir)
    except Exception as e:
        raise RuntimeError(
            f"could not load dataset {name!r} (config={config!r}, split={split!r}) from the "
            "Hugging Face hub; this needs network access or a warm `datasets` cache. "
            "Offline, pass source='embedded', a local .txt/.json/.jsonl file or a directory "
            f"of text files. Cause: {type(e).__name__}: {e}"
        ) from e


def _normalise_columns(
    ds: datasets.Dataset, text_field: str, category_field: str | None, default_category: str
) -> datasets.Dataset:
    if text_field not in ds.column_names:
        raise ValueError(
            f"text_field={text_field!r} is not a column of the dataset; columns: {ds.column_names}"
        )
    keep = [text_field] + ([category_field] if category_field in ds.column_names else [])
    ds = ds.select_columns(keep)
    if text_field != "text":
        ds = ds.rename_column(text_field, "text")
    if category_field in ds.column_names and category_field != "category":
        ds = ds.rename_column(category_field, "category")
    if "category" not in ds.column_names:
        ds = ds.add_column("category", [default_category] * len(ds))
    if ds.features["category"] != datasets.Value("string"):  # e.g. integer labels
        ds = ds.cast_column("category", datasets.Value("string"))
    return ds.filter(lambda batch: [bool(t and t.strip()) for t in batch["text"]], batched=True)


def _check_limit(name: str, value: int | None) -> None:
    if value is not None:
        check_int(name, value, 1, note="None = no limit")


def _limit_records(
    records: Iterable[tuple[str, str]], max_documents: int | None, max_chars: int | None
) -> list[tuple[str, str]]:
    """Keeps, per category and in order, at most max_documents documents and max_chars chars."""
    docs: dict[str, int] = {}
    chars: dict[str, int] = {}
    kept = []
    for text, category in records:
        n_docs, n_chars = docs.get(category, 0), chars.get(category, 0)
        if max_documents is not None and n_docs >= max_documents:
            continue
        if max_chars is not None:
            if n_chars >= max_chars:
                continue
            text = text[: max_chars - n_chars]
        docs[category], chars[category] = n_docs + 1, n_chars + len(text)
        kept.append((text, category))
    return kept


def _from_records(records: Sequence[tuple[str, str]]) -> datasets.Dataset:
    string = datasets.Value("string")
    features = datasets.Features({"text": string, "category": string})
    return datasets.Dataset.from_dict(
        {"text": [t for t, _ in records], "category": [c for _, c in records]}, features=features
    )


# ------------------------------------------------------------------- splitting


def split_dataset(
    ds: datasets.Dataset, eval_fraction: float, seed: int = 0
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Splits into (train, eval), stratified by category, by hashing document content.

    Each document's score is sha256(seed, text); within a category the round(fraction * n)
    lowest scores go to eval (at least one and at most n - 1 when n >= 2, so every
    category with two or more documents is in both). The split is the same in every
    process and on every machine, and a document's side depends only on its own text and
    its category's ranks. Identical documents score alike; dedupe first for a strictly
    disjoint split by content (the embedded corpus is deduplicated).

    Returns:
      (train, eval), each in the original row order.
    """
    check_real("eval_fraction", eval_fraction, 0.0, 1.0, lo_open=True)
    if eval_fraction == 1.0:
        raise ValueError("eval_fraction=1.0 is out of range: must be in (0, 1)")
    by_category: dict[str, list[tuple[int, int]]] = {}
    for i, (text, category) in enumerate(zip(ds["text"], ds["category"], strict=True)):
        digest = hashlib.sha256(f"{seed}\0{text}".encode("utf-8", "surrogatepass")).digest()
        by_category.setdefault(category, []).append((int.from_bytes(digest[:8], "big"), i))
    eval_idx = []
    for scored in by_category.values():
        n = len(scored)
        k = min(max(round(eval_fraction * n), 1), n - 1) if n >= 2 else 0
        eval_idx += [i for _, i in sorted(scored)[:k]]
    eval_set = set(eval_idx)
    train_idx = [i for i in range(len(ds)) if i not in eval_set]
    return ds.select(train_idx), ds.select(sorted(eval_idx))


# ------------------------------------------------------------------- held-out prompts


def held_out_prompts(
    eval_ds: datasets.Dataset, tokenizer, num_prompts: int, prompt_tokens: int, seed: int = 0
) -> list[tuple[str, list[int]]]:
    """Picks num_prompts prompts of each category from the eval split.

    For each category (sorted by name) a generator seeded by (seed, crc32(category)) orders
    the documents; those with at least prompt_tokens tokens are taken in that order (up
    to num_prompts of them), and prompt j is a prompt_tokens window at a random offset of
    the (j mod count)-th one, so a category with few documents still gives num_prompts
    prompts. A category with no document that long is skipped with a warning.

    Returns:
      [(category, token ids of length prompt_tokens)], grouped by category.
    """
    check_int("num_prompts", num_prompts, 1)
    check_int("prompt_tokens", prompt_tokens, 1)
    by_category: dict[str, list[str]] = {}
    for text, category in zip(eval_ds["text"], eval_ds["category"], strict=True):
        by_category.setdefault(category, []).append(text)
    prompts = []
    for category in sorted(by_category):
        texts = by_category[category]
        rng = np.random.default_rng([seed, zlib.crc32(category.encode())])
        docs = []
        for i in rng.permutation(len(texts)):
            ids = tokenizer.encode(texts[i])
            if len(ids) >= prompt_tokens:
                docs.append(ids)
                if len(docs) == num_prompts:
                    break
        if not docs:
            log.warning("no %r document has %d tokens; no prompts from it", category, prompt_tokens)
            continue
        for j in range(num_prompts):
            ids = docs[j % len(docs)]
            start = int(rng.integers(0, len(ids) - prompt_tokens + 1))
            prompts.append((category, list(ids[start : start + prompt_tokens])))
    if not prompts:
        raise ValueError(f"no eval document has prompt_tokens={prompt_tokens} tokens")
    return prompts


# Instructions made from a corpus window, covering Spec-Bench's task types (writing, roleplay,
# reasoning, math, coding, extraction, stem, humanities, translation, summarization, qa, rag),
# so that heads trained on a chat model's answers see the kinds of requests it serves without
# a single Spec-Bench question among them.
INSTRUCTIONS = (
    "Summarize the following text in a few sentences.\n\n{text}",
    "Explain what the following passage is about, as if to a student.\n\n{text}",
    "Continue the following text for a paragraph, in the same style.\n\n{text}",
    "Translate the following text into French.\n\n{text}",
    "Translate the following text into German.\n\n{text}",
    "List the key facts stated in the following text as bullet points.\n\n{text}",
    "Read the following text, then answer: what is its main point?\n\n{text}",
    "Write a short story inspired by the following text.\n\n{text}",
    "Pretend you are the author of the following text and explain why you wrote it.\n\n{text}",
    "Write a Python function related to the following text, and explain it.\n\n{text}",
    "Explain this step by step, then say what could go wrong.\n\n{text}",
    "Using only the document below, answer: what does it describe?\n\nDocument:\n{text}",
    "Solve step by step: a shop sells {a} items a day for {b} days, then {c} a day for {d} "
    "days. How many items does it sell in all?",
    "If a train travels {a} km in {b} hours, then {c} km in {d} hours, what is its average "
    "speed over the whole trip? Show your reasoning.",
)


def instruction_prompts(
    ds: datasets.Dataset, tokenizer, num_prompts: int, prompt_tokens: int, seed: int = 0
) -> list[tuple[str, list[int]]]:
    """Chat prompts made from the corpus: num_prompts per category of `ds`.

    Prompt j of a category wraps a window of at most `prompt_tokens` tokens of one of its
    documents (the `held_out_prompts` order) in instruction j mod len(INSTRUCTIONS), with
    numbers drawn from the same seeded generator, and renders it with the tokenizer's chat
    template when it has one (a chat model's own format), else as plain text.

    Returns:
      [(category, token ids)], grouped by category.
    """
    windows = held_out_prompts(ds, tokenizer, num_prompts, prompt_tokens, seed)
    rng = np.random.default_rng([seed, 7])
    prompts = []
    for j, (category, ids) in enumerate(windows):
        numbers = {k: int(v) for k, v in zip("abcd", rng.integers(2, 60, 4), strict=True)}
        text = INSTRUCTIONS[j % len(INSTRUCTIONS)].format(
            text=tokenizer.decode(ids).strip(), **numbers
        )
        if getattr(tokenizer, "chat_template", None):
            prompts.append((category, tokenizer.encode(tokenizer.chat(text))))
        else:
            prompts.append((category, tokenizer.encode(text)))
    return prompts
