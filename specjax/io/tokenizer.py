"""Tokenizers: a thin wrapper over HF `tokenizers` and BPE training.

Models trained from scratch use a byte-level BPE trained here on the corpus (any text
round-trips exactly); imported models use their checkpoint's own `tokenizer.json`. Either
way the rest of specjax sees one `Tokenizer` class with plain `list[int]` ids and the special
ids the decoder needs (`eos_token_ids` stop generation; `bos_token_id`, `pad_token_id`).

`save(dir)` writes `tokenizer.json` plus a minimal `tokenizer_config.json`, so
`transformers.PreTrainedTokenizerFast.from_pretrained(dir)` loads the same tokenizer.

Streaming detokenisation is the library's own `tokenizers.decoders.DecodeStream` over
`Tokenizer.backend`: `stream.step(tok.backend, id)` returns the text an id completes (None
while a multi-byte character is open), and the pieces concatenate to `decode(ids)`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from specjax.validate import check_int

EOS_TOKEN = "<|endoftext|>"

# Special-token spellings used to detect roles when no config names them, in priority order.
_EOS_CANDIDATES = (
    "<|endoftext|>",
    "</s>",
    "<|end_of_text|>",
    "<eos>",
    "<|eot_id|>",
    "<|im_end|>",
)
_BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>")
_PAD_CANDIDATES = ("<pad>", "<|pad|>", "[PAD]", "<|padding|>")

_NUM_BYTES = 256  # byte-level BPE starts from one symbol per byte value

if TYPE_CHECKING:
    import tokenizers


class VocabStrings(NamedTuple):
    """A vocabulary as strings, to compare two tokenizers (draft vs target).

    tokens: tokens[i] is the string of id i (None where the id is unused).
    special: the strings of the special (added, special=True) tokens.
    """

    tokens: list[str | None]
    special: frozenset[str]


class Tokenizer:
    """A `tokenizers.Tokenizer` plus the special-token ids specjax needs.

    Args:
      backend: the wrapped `tokenizers.Tokenizer`.
      eos_token_ids: ids that end a sequence; detected from the special tokens if None.
      bos_token_id: id prepended by callers that want one; detected if not given.
      pad_token_id: id used for padding; detected if not given.
      chat_template: the model's Jinja chat template (`tokenizer_config.json`'s
        `chat_template`, or a GGUF's `tokenizer.chat_template`); used by `apply_chat_template`.
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        eos_token_ids: Iterable[int] | int | None = None,
        bos_token_id: int | None = None,
        pad_token_id: int | None = None,
        chat_template: str | None = None,
    ):
        self.backend = backend
        self.chat_template = chat_template
        special = self._special_tokens()
        detect = lambda names: next((special[n] for n in names if n in special), None)
        if eos_token_ids is None:
            eos = detect(_EOS_CANDIDATES)
            eos_token_ids = () if eos is None else (eos,)
        self.eos_token_ids = eos_token_ids
        self.bos_token_id = detect(_BOS_CANDIDATES) if bos_token_id is None else bos_token_id
        self.pad_token_id = detect(_PAD_CANDIDATES) if pad_token_id is None else pad_token_id

    # ---------------------------------------------------------------- loading / saving

    @classmethod
    def from_file(cls, path: str | Path, **special_ids) -> Tokenizer:
        """Loads a `tokenizer.json`; `special_ids` override the detected special ids."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file not found: {path}")
        import tokenizers  # here, not at the top: `import specjax` must not need it

        try:
            backend = tokenizers.Tokenizer.from_file(str(path))
        except Exception as e:  # the Rust side raises a bare Exception
            raise ValueError(f"cannot parse tokenizer file {path}: {e}") from e
        return cls(backend, **special_ids)

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        """Loads an HF checkpoint dir: `tokenizer.json` and, if present, the special tokens.

        eos ids are the union, in this order, of `tokenizer_config.json`'s `eos_token`,
        `config.json`'s and `generation_config.json`'s `eos_token_id` (an int or a list: chat
        models stop on several). bos/pad come from the same files; anything still unnamed is
        detected from the special tokens.
        """
        path = Path(path)
        tok = cls.from_file(path / "tokenizer.json")
        tok_config = _read_json(path / "tokenizer_config.json")
        model_configs = [_read_json(path / n) for n in ("config.json", "generation_config.json")]

        eos: list[int] = []
        token_id = lambda key: tok._config_token_id(tok_config.get(key))
        if (i := token_id("eos_token")) is not None:
            eos.append(i)
        for config in model_configs:
            value = config.get("eos_token_id")
            eos.extend([value] if isinstance(value, int) else value or [])
        if eos:
            tok.eos_token_ids = eos
        template = tok_config.get("chat_template")
        if isinstance(template, str):
            tok.chat_template = template
        elif (path / "chat_template.jinja").is_file():
            tok.chat_template = (path / "chat_template.jinja").read_text()
        for role in ("bos", "pad"):
            ids = [token_id(f"{role}_token")]
            ids += [c.get(f"{role}_token_id") for c in model_configs]
            found = next((i for i in ids if isinstance(i, int)), None)
            if found is not None:
                setattr(tok, f"{role}_token_id", found)
        return tok

    def save(self, directory: str | Path) -> Path:
        """Writes `tokenizer.json` and a minimal `tokenizer_config.json`; returns the dir."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(directory / "tokenizer.json"))
        name = lambda i: None if i is None else self.id_to_token(i)
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": name(self.eos_token_id),
            "bos_token": name(self.bos_token_id),
            "pad_token": name(self.pad_token_id),
            # HF's default clean-up rewrites " ," etc. on decode; keep decode exact.
            "clean_up_tokenization_spaces": False,
        }
        if self.chat_template is not None:
            config["chat_template"] = self.chat_template
        (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
        return directory

    # ---------------------------------------------------------------- chat

    def apply_chat_template(
        self,
        messages: Sequence[dict],
        *,
        add_generation_prompt: bool = True,
        tokenize: bool = False,
        **variables,
    ) -> str | list[int]:
        """Render `messages` ([{"role": ..., "content": ...}]) with the model's chat template.

        The template is rendered as transformers renders it (Jinja, sandboxed, with
        `bos_token`, `eos_token`, `add_generation_prompt` and `raise_exception`); the text holds
        the special tokens spelled out, so `encode` of it gives the ids the model was tuned on.
        `tokenize=True` returns those ids instead of the text.
        """
        if self.chat_template is None:
            raise ValueError(
                "this tokenizer has no chat template (tokenizer_config.json's chat_template or a "
                "GGUF's tokenizer.chat_template); pass plain prompts instead"
            )
        if isinstance(messages, (str, dict)) or not all(
            isinstance(m, dict) and "role" in m and "content" in m for m in messages
        ):
            raise ValueError(
                "messages must be a list of {'role': ..., 'content': ...} dicts, got "
                f"{messages!r:.200}"
            )
        text = _render_chat(
            self.chat_template,
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=_token_or_empty(self, self.bos_token_id),
            eos_token=_token_or_empty(self, self.eos_token_id),
            **variables,
        )
        return self.encode(text) if tokenize else text

    def chat(self, prompt: str, system: str | None = None) -> str:
        """One user turn (and an optional system turn) rendered with the chat template."""
        messages = [] if system is None else [{"role": "system", "content": system}]
        return self.apply_chat_template([*messages, {"role": "user", "content": prompt}])

    # ---------------------------------------------------------------- special ids

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Every id that ends a sequence (deduplicated, first is the primary one)."""
        return self._eos_token_ids

    @eos_token_ids.setter
    def eos_token_ids(self, ids: Iterable[int] | int) -> None:
        ids = (ids,) if isinstance(ids, int) else tuple(int(i) for i in ids)
        for i in ids:
            self._check_id(i, "eos_token_ids")
        self._eos_token_ids = tuple(dict.fromkeys(ids))

    @property
    def eos_token_id(self) -> int | None:
        """The primary eos id (the one written between packed documents), or None."""
        return self._eos_token_ids[0] if self._eos_token_ids else None

    @property
    def bos_token_id(self) -> int | None:
        return self._bos_token_id

    @bos_token_id.setter
    def bos_token_id(self, i: int | None) -> None:
        self._bos_token_id = None if i is None else self._check_id(int(i), "bos_token_id")

    @property
    def pad_token_id(self) -> int | None:
        return self._pad_token_id

    @pad_token_id.setter
    def pad_token_id(self, i: int | None) -> None:
        self._pad_token_id = None if i is None else self._check_id(int(i), "pad_token_id")

    # ---------------------------------------------------------------- encode / decode

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included (the model's V must be at least this)."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Text -> ids. Special tokens (bos, template) are added only when asked."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = False
    ) -> list[list[int]]:
        """Like `encode` over many texts, in parallel on the Rust side."""
        encodings = self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [e.ids for e in encodings]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Ids -> text. Invalid UTF-8 (a cut multi-byte character) decodes to U+FFFD."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str | None:
        return self.backend.id_to_token(int(i))

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def vocab_strings(self) -> VocabStrings:
        """Every id's token string and the special-token set (see `VocabStrings`)."""
        vocab = self.backend.get_vocab(with_added_tokens=True)  # {token: id}
        size = max(self.vocab_size, max(vocab.values(), default=-1) + 1)
        tokens: list[str | None] = [None] * size
        for token, i in vocab.items():
            tokens[i] = token
        return VocabStrings(tokens, frozenset(self._special_tokens()))

    def __repr__(self) -> str:
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, eos_token_ids={self.eos_token_ids}, "
            f"bos_token_id={self.bos_token_id}, pad_token_id={self.pad_token_id})"
        )

    # ---------------------------------------------------------------- helpers

    def _special_tokens(self) -> dict[str, int]:
        added = self.backend.get_added_tokens_decoder()  # {id: AddedToken}
        return {t.content: i for i, t in sorted(added.items()) if t.special}

    def _config_token_id(self, entry) -> int | None:
        # tokenizer_config.json spells a token as a string or as an AddedToken dict.
        if isinstance(entry, dict):
            entry = entry.get("content")
        return self.token_to_id(entry) if isinstance(entry, str) else None

    def _check_id(self, i: int, name: str) -> int:
        return check_int(name, i, 0, self.vocab_size - 1)


def _token_or_empty(tok: Tokenizer, i: int | None) -> str:
    return "" if i is None else tok.id_to_token(i) or ""


def _render_chat(template: str, **variables) -> str:
    import jinja2.ext
    import jinja2.sandbox  # here: only chat rendering needs jinja2

    def raise_exception(message):
        raise ValueError(f"the chat template refused the messages: {message}")

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    try:
        compiled = env.from_string(template)
    except jinja2.TemplateError as e:
        raise ValueError(f"the chat template does not parse: {e}") from e
    return compiled.render(**variables)


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"cannot parse {path}: {e}") from e


def train_bpe(
    texts: Iterable[str],
    vocab_size: int,
    special_tokens: Sequence[str] = (EOS_TOKEN,),
    min_frequency: int = 2,
    show_progress: bool = False,
) -> Tokenizer:
    """Trains a byte-level BPE (GPT-2 style): every string round-trips exactly.

    Args:
      texts: the training documents.
      vocab_size: the most ids, specials included; a small corpus can stop below it.
        At least 256 (one per byte) plus the number of special tokens.
      special_tokens: added first (ids 0..); `<|endoftext|>`, if present, is the eos.
      min_frequency: pairs seen fewer times are not merged.
      show_progress: the trainer's own progress bar.

    Returns:
      The trained `Tokenizer`, eos detected from `special_tokens`.
    """
    special_tokens = list(special_tokens)
    low = _NUM_BYTES + len(special_tokens)
    note = f"{_NUM_BYTES} byte symbols + {len(special_tokens)} special tokens"
    vocab_size = check_int("vocab_size", vocab_size, low, note=note)
    min_frequency = check_int("min_frequency", min_frequency, 0)
    # Here, not at the top: `import specjax` must not need `tokenizers`.
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = tokenizers.Tokenizer(models.BPE())
    # No prefix space: the text a user typed is exactly what decodes back.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    return Tokenizer(backend)
