"""Draft heads on disk: `load_draft(path)` detects the layout, `save_draft(heads, dir, layout)`.

Layouts, one entry each in `FORMATS` (how to detect, load and save it):

- ``specjax``: Medusa and EAGLE heads as the module's own arrays (`medusa`, `eagle`).
- ``vllm``: vLLM's Medusa (`medusa`) and EAGLE / EAGLE-3 drafters, import also the
  reference's (SafeAILab/EAGLE) EAGLE heads (`eagle_hf`).
- ``fasterdecoding``: FasterDecoding/Medusa's heads (`medusa`).
- ``speculators``: vllm-project/speculators' EAGLE-3 heads (`eagle_hf`).

Every refusal names the file, tensor or field and both values; a draft that does not fit the
target given to `load_draft` is refused by `specjax.heads.check_heads_fit`, naming the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from specjax.heads import HEAD_TYPES, MedusaHeads
from specjax.heads.eagle import EagleHead
from specjax.io.drafts import eagle, eagle_hf, medusa
from specjax.io.drafts.common import (
    HF_CONFIG,
    SPECJAX_CONFIG,
    SPECJAX_WEIGHTS,
    VLLM_WEIGHTS,
    Files,
    hf_config,
    read_json,
    write_files,
)
from specjax.io.drafts.eagle import check_d2t, eagle_arrays
from specjax.io.drafts.eagle_hf import SPECULATORS_TOKENS
from specjax.io.drafts.medusa import FD_PICKLE, FD_WEIGHTS, medusa_arrays

HEADS_DIR = "heads"  # where a head-training workdir exports its heads (specjax layout)
DRAFT_TYPES = {**HEAD_TYPES, "eagle": EagleHead, "eagle3": EagleHead}


class Format(NamedTuple):
    """How one layout is detected, loaded and saved.

    Attributes:
      detect: directory -> whether it holds this layout (tried in `FORMATS` order).
      load: (directory, target) -> the heads, refused unless they fit `target` (when given).
      save: head type -> heads (and keyword options) -> the files to write (`common.Files`).
      holds: what the layout holds, for refusals.
    """

    detect: Callable[[Path], bool]
    load: Callable[..., MedusaHeads | EagleHead]
    save: dict[type, Callable[..., Files]]
    holds: str


def _is_specjax(d: Path) -> bool:
    return (d / SPECJAX_CONFIG).is_file()


def _load_specjax(directory: Path, target=None):
    """The specjax layout: Medusa or EAGLE heads, by the `method` its JSON names."""
    where = directory / SPECJAX_CONFIG
    meta = read_json(where)
    method = meta.get("method")
    if method not in DRAFT_TYPES:
        raise ValueError(f"{where}: method={method!r} is not one of {sorted(DRAFT_TYPES)}")
    if DRAFT_TYPES[method] is EagleHead:
        return eagle.load_specjax(directory, meta, target)
    return medusa.load_specjax(directory, meta, target)


def _is_vllm(d: Path) -> bool:
    config = hf_config(d)
    if medusa.is_vllm_medusa(config):
        return True
    # FasterDecoding's marks (medusa_num_heads, its weights file) outrank an EAGLE look.
    return eagle_hf.eagle_kind(d, config) == "vllm" and not medusa.is_fasterdecoding(d, config)


def _load_vllm(directory: Path, target=None):
    """vLLM's layout: Medusa (model_type "medusa") or an EAGLE head (vLLM's or the reference's)."""
    if medusa.is_vllm_medusa(read_json(directory / HF_CONFIG)):
        return medusa.load_vllm(directory, target)
    return eagle_hf.load_hf(directory, target)


def _is_fasterdecoding(d: Path) -> bool:
    return medusa.is_fasterdecoding(d, hf_config(d))


def _is_speculators(d: Path) -> bool:
    return eagle_hf.eagle_kind(d, hf_config(d)) == "speculators"


def _load_speculators(directory: Path, target=None):
    return eagle_hf.load_hf(directory, target, speculators=True)


FORMATS = {
    "specjax": Format(
        _is_specjax,
        _load_specjax,
        {MedusaHeads: medusa.specjax_layout, EagleHead: eagle.specjax_layout},
        "Medusa and EAGLE heads",
    ),
    "vllm": Format(
        _is_vllm,
        _load_vllm,
        {MedusaHeads: medusa.vllm_layout, EagleHead: eagle_hf.vllm_layout},
        "Medusa and EAGLE heads",
    ),
    "fasterdecoding": Format(
        _is_fasterdecoding,
        medusa.load_fasterdecoding,
        {MedusaHeads: medusa.fasterdecoding_layout},
        "Medusa heads",
    ),
    "speculators": Format(
        _is_speculators,
        _load_speculators,
        {EagleHead: eagle_hf.speculators_layout},
        "EAGLE-3 heads",
    ),
}
LAYOUTS = tuple(FORMATS)
_KINDS = {MedusaHeads: "Medusa heads", EagleHead: "EAGLE heads"}


def _layout_of(d: Path) -> str | None:
    """The layout of directory `d`, None when it holds no draft heads at all."""
    for layout, fmt in FORMATS.items():
        if fmt.detect(d):
            return layout
    config = hf_config(d)
    if config is None:
        return None
    raise ValueError(
        f"{d / HF_CONFIG} describes no draft heads (model_type="
        f"{config.get('model_type')!r}); a draft LM loads with sj.load_model (an EAGLE head "
        "has an Eagle architecture, speculators_config, or one layer beside fc.weight)"
    )


def detect_layout(directory) -> str:
    """The layout of a heads directory: "specjax", "vllm", "fasterdecoding" or "speculators".

    "vllm" covers vLLM's Medusa, EAGLE (`EagleLlamaForCausalLM`) and EAGLE-3
    (`LlamaForCausalLMEagle3`) directories and the reference's (SafeAILab/EAGLE) EAGLE heads:
    a one-layer Llama config.json beside `fc.weight`.

    Raises:
      FileNotFoundError when the directory holds none of them (naming what was looked for);
      ValueError when its config.json describes something else (a language model).
    """
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"draft directory {d} does not exist")
    layout = _layout_of(d)
    if layout is None:
        raise FileNotFoundError(
            f"no draft heads in {d}: expected {SPECJAX_CONFIG} (specjax), or config.json with "
            "model_type 'medusa' (vLLM) or medusa_num_heads (FasterDecoding), an EAGLE "
            "architecture or speculators_config (EAGLE heads)"
        )
    return layout


def load_draft(path, *, target=None):
    """Load draft heads from a directory in any supported layout (detected).

    Args:
      path: a heads directory (specjax, vLLM, FasterDecoding, SafeAILab/EAGLE or speculators
        layout), or a head-training workdir (its exported `heads/`).
      target: optional Model/Decoder; when given, a hidden size, vocabulary or EAGLE-3 tap
        layer that does not fit the target is refused here rather than at `generate`.
        FasterDecoding's version-2 heads (no LM-head tensors: they share the base model's),
        EAGLE-3 heads whose config names no tap layers (vLLM then taps the target's
        (2, L//2, L-3)) and EAGLE heads that carry their own copy of the embedding (it must
        equal the target's) need it.
    Returns:
      The heads module (`specjax.heads.MedusaHeads` or `specjax.heads.eagle.EagleHead`), its
      `config.method` naming the speculative method it serves.
    Raises:
      FileNotFoundError for a missing directory or file (or PyTorch pickles only);
      ValueError for a config field, a missing, unexpected, misshapen or non-finite tensor,
      or a mismatch with `target`, naming the field or tensor and both values.
    """
    directory = Path(path)
    if directory.is_dir() and _layout_of(directory) is None and (directory / HEADS_DIR).is_dir():
        directory = directory / HEADS_DIR  # a training workdir
    return FORMATS[detect_layout(directory)].load(directory, target)


def _check_out_dir(out: Path, layout: str, files: Files) -> None:
    """Refuse to write vLLM/FasterDecoding/speculators heads over a model or beside other weights."""
    if layout == "specjax" or not out.is_dir():
        return
    config = hf_config(out)
    if config is not None:
        heads = (config.get("model_type") in (None, "medusa") or "medusa_num_heads" in config
                 or eagle_hf.eagle_kind(out, config) is not None)  # fmt: skip
        if not heads:
            raise ValueError(
                f"{out / HF_CONFIG} describes a model (model_type="
                f"{config.get('model_type')!r}); layout={layout!r} would overwrite it: "
                "choose an empty directory"
            )
    others = sorted(p.name for p in out.glob("*.safetensors") if p.name not in files)
    if others:
        raise ValueError(
            f"{out} already holds {others}; vLLM loads every *.safetensors of a draft "
            f"directory, so layout={layout!r} needs one without them"
        )


def _check_params(heads) -> None:
    """Refuse heads whose parameters hold NaN/inf, or (EAGLE-3) a bad draft vocabulary."""
    eagle_head = isinstance(heads, EagleHead)
    arrays = eagle_arrays(heads) if eagle_head else medusa.medusa_dict(heads)
    for name, array in arrays.items():
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            raise ValueError(f"heads parameter {name!r} holds {bad} non-finite values (NaN/inf)")
    if eagle_head and heads.config.method == "eagle3":
        check_d2t(arrays["d2t"], arrays["t2d"], heads.config.vocab_size, Path("heads parameter"))


def save_draft(
    heads, out_dir, layout: str = "specjax", *, speculative_tokens: int | None = None
) -> Path:
    """Write draft heads to `out_dir` in `layout`.

    Layouts: Medusa heads "specjax", "vllm", "fasterdecoding"; EAGLE heads (EagleHead)
    "specjax", "vllm" (`EagleLlamaForCausalLM` / `LlamaForCausalLMEagle3`) and, for EAGLE-3,
    "speculators" (vllm-project/speculators' config: vLLM enables speculation from the
    directory alone, loading the verifier named by `heads.config.base_model`).

    The vLLM layout loads in vLLM with speculative_config={"method": <medusa|eagle|eagle3>,
    "model": out_dir} beside the target written by `sj.save_hf`. `base_model_name_or_path` is
    written from `heads.config.base_model` when set.

    Args:
      heads: MedusaHeads or EagleHead.
      out_dir: the directory (created).
      layout: see above.
      speculative_tokens: "speculators" only: proposal_methods[0].speculative_tokens, the
        number of tokens vLLM drafts per step by default (3 when None).

    Raises:
      ValueError for an unknown layout or one the head type has not, something that is not
      draft heads, non-finite parameters, independent blocks with num_layers > 1 to
      "fasterdecoding", a biased EAGLE-1 fc or EAGLE-3 taps vLLM would reorder to "vllm" /
      "speculators", or a directory holding a model or other weights (all but "specjax").
    """
    if layout not in FORMATS:
        raise ValueError(f"layout={layout!r} is not one of {LAYOUTS}")
    kind = next((t for t in _KINDS if isinstance(heads, t)), None)
    if kind is None:
        raise ValueError(
            f"save_draft needs draft heads (MedusaHeads or EagleHead), got {type(heads).__name__}"
        )
    fmt = FORMATS[layout]
    if kind not in fmt.save:
        ours = tuple(name for name, f in FORMATS.items() if kind in f.save)
        raise ValueError(f"layout={layout!r} holds {fmt.holds}; {_KINDS[kind]} export to {ours}")
    if speculative_tokens is not None and layout != "speculators":
        raise ValueError(
            f"speculative_tokens={speculative_tokens!r} is a layout='speculators' option "
            f"(got layout={layout!r})"
        )
    _check_params(heads)
    options = {} if speculative_tokens is None else {"speculative_tokens": speculative_tokens}
    files = fmt.save[kind](heads, **options)
    out = Path(out_dir)
    _check_out_dir(out, layout, files)
    out.mkdir(parents=True, exist_ok=True)
    write_files(files, out)
    return out


__all__ = [
    "DRAFT_TYPES",
    "FD_PICKLE",
    "FD_WEIGHTS",
    "FORMATS",
    "HEADS_DIR",
    "LAYOUTS",
    "SPECJAX_CONFIG",
    "SPECJAX_WEIGHTS",
    "SPECULATORS_TOKENS",
    "VLLM_WEIGHTS",
    "detect_layout",
    "eagle_arrays",
    "load_draft",
    "medusa_arrays",
    "save_draft",
]
