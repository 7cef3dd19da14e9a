"""The training rows of the draft-head trainers (Medusa's and EAGLE's): what `prepare_rows`
builds from `config.data`.

    train_rows, eval_rows = rows.prepare_rows(config, target, workdir)

`data.kind`: "self_distill" (the target answers prompts, `specjax.train.distill`), "corpus"
(the text itself, packed), or "mixed" (the self-distilled rows plus `data.corpus_rows`
windows of the corpus, `corpus_windows`). `data.prompt_style`: "window" (corpus windows a base
model continues), "instruction" (instructions made from them, `data.instruction_prompts`) or
"magpie" (user turns the chat target writes itself, `magpie_prompts`). Rows are
{"tokens" [N, T] int32, "mask" [N, T] int8}; self-distilled ones are stored under
`<workdir>/distill/` (or `data.cache_dir`) and reused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specjax import data
from specjax import sampling as sp
from specjax.models import Model
from specjax.train import batching, distill

DISTILL = "distill"
DATA_KINDS = ("self_distill", "corpus", "mixed")
PROMPT_STYLES = ("window", "instruction", "magpie")


def prepare_rows(config, target: Model, workdir: Path, mesh=None) -> tuple[dict, dict]:
    """(train rows, eval rows): {"tokens" [N, T] int32, "mask" [N, T] int8} each.

    `mesh`: the run's device mesh, on which self-distillation generates (None: one device).
    """
    d = config.data
    ds = data.load_text_dataset(
        d.source, max_documents=d.max_documents, max_chars=d.max_chars, sample_by=d.sample_by
    )
    train_ds, eval_ds = data.split_dataset(ds, d.eval_fraction, d.seed)
    tok = target.tokenizer
    if tok is None:
        raise ValueError("the target needs a tokenizer to tokenize the corpus (load it from a dir)")
    if d.kind == "corpus":
        rows = []
        for split in (train_ds, eval_ds):
            ids = batching.tokenize(split["text"], tok)
            packed = batching.pack(ids, d.seq_len, tok.eos_token_id)
            rows.append({"tokens": packed, "mask": np.ones(packed.shape, np.int8)})
        return rows[0], rows[1]
    temperatures = tuple(d.get("temperatures") or ()) or (float(d.temperature),)
    styles = {"window": data.held_out_prompts, "instruction": data.instruction_prompts}
    style = d.get("prompt_style", "window")
    cache = Path(d.cache_dir) if d.cache_dir else workdir / DISTILL
    out = []
    for split, count, seed in (
        (train_ds, d.num_prompts, d.seed),
        (eval_ds, d.eval_prompts, d.seed + 1),
    ):
        if style == "magpie":
            prompts = magpie_prompts(target, count, d.prompt_tokens, seed, cache,
                                     d.generate_batch_size, config.train.progress, mesh)  # fmt: skip
        else:
            made = styles[style](split, tok, count, d.prompt_tokens, seed)
            prompts = [ids for _, ids in made]
        parts = []
        for i, temperature in enumerate(temperatures):
            sampling = sp.SamplingParams(
                temperature=float(temperature), top_k=int(d.top_k), top_p=float(d.top_p),
                seed=int(config.seed),
            )  # fmt: skip
            share = prompts[i :: len(temperatures)]  # every category in every share
            if not share:
                continue
            rows = distill.self_distill(
                target, share, d.new_tokens, sampling, cache,
                batch_size=d.generate_batch_size, progress=config.train.progress, mesh=mesh,
            )  # fmt: skip
            parts.append(distill.as_rows(rows))
        out.append(_concat_rows(parts))
    if d.kind == "mixed":
        width = out[0]["tokens"].shape[1]
        extra = corpus_windows(train_ds, tok, d.corpus_rows, width, d.seed)
        out[0] = _concat_rows([out[0], {"tokens": extra, "mask": np.ones(extra.shape, np.int8)}])
    return out[0], out[1]


def corpus_windows(ds, tokenizer, count: int, width: int, seed: int = 0) -> np.ndarray:
    """`count` windows of `width` tokens from the corpus `ds`, int32 [count, width].

    The categories take turns (so a small one weighs as much as a large one), each walking its
    documents in a seeded order; a document gives as many disjoint windows as it holds, and
    only as many documents are tokenized as the windows need. Refuses a corpus too small.
    """
    rng = np.random.default_rng([seed, 11])
    by_category: dict[str, list[str]] = {}
    for text, category in zip(ds["text"], ds["category"], strict=True):
        by_category.setdefault(category, []).append(text)
    streams = {c: iter(rng.permutation(len(t))) for c, t in sorted(by_category.items())}
    pending: dict[str, list[np.ndarray]] = {c: [] for c in streams}
    out: list[np.ndarray] = []
    while len(out) < count and streams:
        for category in list(streams):
            if len(out) == count:
                break
            while not pending[category]:
                i = next(streams[category], None)
                if i is None:
                    del streams[category]
                    break
                ids = np.asarray(tokenizer.encode(by_category[category][i]), np.int32)
                pending[category] = [ids[s : s + width] for s in
                                     range(0, len(ids) - width + 1, width)]  # fmt: skip
            if pending[category]:
                out.append(pending[category].pop(0))
    if len(out) < count:
        raise ValueError(
            f"config.data.corpus_rows={count}: the corpus's train split holds only {len(out)} "
            f"windows of {width} tokens"
        )
    return np.stack(out)


def magpie_prompts(
    target: Model, count: int, max_tokens: int, seed: int, cache_dir, batch_size: int = 32,
    progress: bool = True, mesh=None,
) -> list[list[int]]:  # fmt: skip
    """`count` chat prompts whose user turns the target wrote itself (Magpie: Xu et al. 2024,
    "Alignment Data Synthesis from Scratch by Prompting Aligned LLMs with Nothing").

    The target continues its chat template's text up to where a user message begins (the
    default system turn included), at temperature 1 with a seed per prompt, for `max_tokens`
    tokens (`distill.self_distill`: generated once, stored under `cache_dir`); the text before
    its first end-of-turn id is the user's message, which is then rendered as a chat prompt.
    No corpus is read: the prompts follow what the model was tuned to be asked.

    Returns:
      [token ids] of the `count` prompts (a message that did not end within `max_tokens` is
      kept as cut; an empty one is replaced by the next prompt's draw).
    """
    tok = target.tokenizer
    if not getattr(tok, "chat_template", None):
        raise ValueError(
            "config.data.prompt_style='magpie' needs a target with a chat template (the model "
            "writes the user turns from it)"
        )
    marker = "\x00MAGPIE\x00"
    rendered = tok.chat(marker)
    prefix = tok.encode(rendered[: rendered.index(marker)])
    ends = set(tok.eos_token_ids)
    for name in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        if tok.token_to_id(name) is not None:
            ends.add(tok.token_to_id(name))
    sampling = sp.SamplingParams(temperature=1.0, seed=int(seed))
    prompts, drawn = [], 0
    while len(prompts) < count:
        want = count - len(prompts) + (4 if drawn else 0)  # a few spare after an empty draw
        rows = distill.as_rows(distill.self_distill(
            target, [prefix] * (drawn + want), max_tokens, sampling, cache_dir,
            batch_size=batch_size, progress=progress, mesh=mesh,
        ))  # fmt: skip
        for generated in rows["tokens"][drawn:, len(prefix) :].tolist():
            cut = next((i for i, t in enumerate(generated) if t in ends), len(generated))
            text = tok.decode(generated[:cut]).strip()
            if text and len(prompts) < count:
                prompts.append(tok.encode(tok.chat(text)))
        drawn += want
        if drawn > 4 * count + 16:
            raise ValueError(f"the target wrote {len(prompts)} non-empty user turns in {drawn}")
    return prompts


def _concat_rows(parts: list[dict]) -> dict:
    if len(parts) == 1:
        return parts[0]
    width = max(p["tokens"].shape[1] for p in parts)
    pad = lambda a: np.pad(a, ((0, 0), (0, width - a.shape[1])))  # noqa: E731
    return {k: np.concatenate([pad(p[k]) for p in parts]) for k in parts[0]}


def token_counts(rows: dict, vocab_size: int) -> np.ndarray:
    """[V] int64 counts of each target id among the rows' counted (mask = 1) tokens."""
    tokens = np.asarray(rows["tokens"])[np.asarray(rows["mask"]) > 0]
    return np.bincount(tokens.ravel(), minlength=vocab_size)[:vocab_size].astype(np.int64)
