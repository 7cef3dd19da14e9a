"""speculative_config validation: every bad input is refused by name before anything compiles.

Each case calls `sj.generate` with a bad config and checks the exception type, that the
message names the key and the offending value, and that `engine.trace_count()` did not move.
"""

import pytest

import specjax as sj
from specjax.decoding import engine, spec_config
from specjax.decoding.speculative import build_plan
from specjax.io.tokenizer import train_bpe
from specjax.models import as_model

PROMPT = [[1, 2, 3, 4]]
T1 = sj.SamplingParams(temperature=1.0)


def _refused(target, cfg, exc, match, sampling=None, prompts=PROMPT, max_new=8):
    before = engine.trace_count()
    with pytest.raises(exc, match=match):
        sj.generate(target, prompts, max_new, sampling, speculative_config=cfg)
    assert engine.trace_count() == before, "an invalid config reached the compiler"


def _draft(target, **kw):
    return {"method": "draft_model", "model": target, "num_speculative_tokens": 3, **kw}


def _ngram(**kw):
    return {"method": "ngram", "num_speculative_tokens": 3, **kw}


# --------------------------------------------------------------------------- method, keys


@pytest.mark.parametrize(
    "cfg,match",
    [
        ("ngram", "must be a dict"),
        ({"num_speculative_tokens": 2}, r"\['method'\]=None is invalid"),
        ({"method": "speculative", "num_speculative_tokens": 2}, "'speculative' is invalid"),
        ({"method": "Ngram", "num_speculative_tokens": 2}, "'Ngram' is invalid"),
        (_ngram(num_spec_tokens=2), r"unknown keys \['num_spec_tokens'\]"),
        (_ngram(draft_model="x"), r"unknown keys \['draft_model'\]"),
    ],
)
def test_bad_method_or_unknown_key(target, cfg, match):
    _refused(target, cfg, ValueError, match)


# ------------------------------------------------------------------ num_speculative_tokens


@pytest.mark.parametrize(
    "value,match",
    [
        (0, r"\['num_speculative_tokens'\]=0 is out of range: must be \[1, 16\]"),
        (-2, r"=-2 is out of range"),
        (17, r"\['num_speculative_tokens'\]=17 is out of range: must be \[1, 16\]"),
        (2.5, r"\['num_speculative_tokens'\]=2.5 must be an integer"),
        ("3", r"\['num_speculative_tokens'\]='3' must be an integer"),
        (True, r"=True must be an integer"),
        (None, r"=None must be an integer"),
    ],
)
def test_bad_num_speculative_tokens(target, value, match):
    _refused(target, _ngram(num_speculative_tokens=value), ValueError, match)
    _refused(target, _draft(target, num_speculative_tokens=value), ValueError, match)


def test_missing_num_speculative_tokens(target):
    _refused(target, {"method": "ngram"}, ValueError, "'num_speculative_tokens'.* is required")


# ------------------------------------------------------------------------- ngram lookup


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"prompt_lookup_min": 3, "prompt_lookup_max": 2}, "prompt_lookup_min'.*=3 must be <="),
        ({"prompt_lookup_min": 0}, r"\['prompt_lookup_min'\]=0 is out of range: must be >= 1"),
        ({"prompt_lookup_max": 0}, r"\['prompt_lookup_max'\]=0 is out of range"),
        ({"prompt_lookup_min": 1.5}, r"\['prompt_lookup_min'\]=1.5 must be an integer"),
    ],
)
def test_bad_prompt_lookup(target, kw, match):
    _refused(target, _ngram(**kw), ValueError, match)


# ------------------------------------------------------------------------------ the draft


def test_model_required_for_draft_model(target):
    cfg = {"method": "draft_model", "num_speculative_tokens": 3}
    _refused(target, cfg, ValueError, r"\['model'\] is required for method='draft_model'")
    _refused(target, {**cfg, "model": None}, ValueError, r"\['model'\] is required")


@pytest.mark.parametrize("value", ["float16", "bf16", 16, True])
def test_bad_draft_weight_dtype(target, value):
    _refused(
        target,
        _draft(target, draft_weight_dtype=value),
        ValueError,
        rf"\['draft_weight_dtype'\]={value!r} is not one of \(None, 'bfloat16'\)",
    )


def test_draft_weight_dtype_refused_without_a_draft_model(target):
    _refused(target, _ngram(draft_weight_dtype="bfloat16"), ValueError, "method='ngram' has none")


def test_model_refused_for_ngram(target):
    _refused(target, _ngram(model=target), ValueError, r"\['model'\] must be unset.*'ngram'")


def test_model_of_wrong_type(target):
    _refused(target, _draft(42), ValueError, r"\['model'\] must be a specjax Model.*got int")


def test_draft_vocab_size_mismatch(target, tiny_config):
    draft = sj.Decoder(tiny_config.replace(vocab_size=48), seed=1)
    _refused(target, _draft(draft), ValueError, "draft vocab_size=48 differs.*vocab_size=32")


def test_draft_with_too_few_positions(target, tiny_config):
    """The draft's own max_position_embeddings bounds prompt + max_new_tokens too."""
    draft = sj.Decoder(tiny_config.replace(max_position_embeddings=16), seed=1)
    _refused(
        target, _draft(draft), ValueError, "draft model's max_position_embeddings=16", max_new=13
    )


@pytest.fixture(scope="module")
def tokenized_pair(tiny_config):
    """Target and draft whose BPE vocabularies agree on the bytes and differ in the merges."""
    target_tok = train_bpe(["the quick brown fox jumps over the lazy dog. " * 40], 300)
    draft_tok = train_bpe(["lorem ipsum dolor sit amet, consectetur adipiscing. " * 40], 300)
    config = tiny_config.replace(vocab_size=300)
    target = sj.Model(sj.Decoder(config, seed=0), target_tok)
    draft = sj.Model(sj.Decoder(config, seed=1), draft_tok)
    same = sj.Model(sj.Decoder(config, seed=2), target_tok)
    t, d = target_tok.vocab_strings().tokens, draft_tok.vocab_strings().tokens
    first = next(i for i in range(max(len(t), len(d))) if t[i : i + 1] != d[i : i + 1])
    return target, draft, same, first, t[first], d[first]


def test_draft_tokenizer_differs(tokenized_pair):
    target, draft, same, first, t_tok, d_tok = tokenized_pair
    assert first >= 257  # the 256 byte symbols and the eos agree; the first merge differs
    match = f"differ first at id {first}: target {t_tok!r} vs draft {d_tok!r}"
    _refused(target, _draft(draft), ValueError, match.replace("(", r"\(").replace(")", r"\)"))
    # The same tokenizer passes the check (build_plan compiles nothing).
    plan, _ = build_plan(_draft(same), target, None)
    assert plan.config.method == "draft_model"


# ----------------------------------------------------------------------- verification


@pytest.mark.parametrize(
    "cfg_fn,sampling,match",
    [
        (lambda t: _draft(t, verification="fancy"), None, r"\['verification'\]='fancy' is invalid"),
        (lambda t: _draft(t, verification="typical"), T1, "'typical' is lossy.*allow_lossy=True"),
        (lambda t: _draft(t, verification="greedy"), T1, "'greedy' needs temperature=0, got 1.0"),
        (lambda t: _ngram(verification="greedy"), T1, "'greedy' needs temperature=0"),
        (lambda t: _ngram(verification="probabilistic"), T1, "'probabilistic' needs sampled"),
        (lambda t: _ngram(verification="probabilistic"), None, "method='ngram' drafts"),
        (lambda t: _draft(t, allow_lossy="yes"), None, r"\['allow_lossy'\]='yes' must be True"),
        (
            lambda t: _draft(t, typical_epsilon=-0.1),
            None,
            r"\['typical_epsilon'\]=-0.1 is out of range: must be >= 0",
        ),
        (lambda t: _draft(t, typical_delta=float("nan")), None, r"\['typical_delta'\]=nan"),
    ],
)
def test_bad_verification(target, cfg_fn, sampling, match):
    _refused(target, cfg_fn(target), ValueError, match, sampling=sampling)


def test_auto_verification_resolves_per_method(target):
    assert spec_config.parse(_ngram(), temperature=0.0).verification == "greedy"
    assert spec_config.parse(_ngram(), temperature=0.8).verification == "one_hot"
    assert spec_config.parse(_draft(target), temperature=0.8).verification == "probabilistic"
    lossy = spec_config.parse(
        _draft(target, verification="typical", allow_lossy=True), temperature=1
    )
    assert lossy.verification == "typical" and lossy.allow_lossy


# ------------------------------------------------------------------------------ draft_tree


@pytest.mark.parametrize(
    "tree,match",
    [
        ({"depth": 0, "width": 2}, r"\['draft_tree.depth'\]=0 is out of range"),
        ({"depth": 17, "width": 1}, r"\['draft_tree.depth'\]=17 is out of range"),
        ({"depth": 2, "width": 0}, r"\['draft_tree.width'\]=0 is out of range"),
        ({"depth": 2, "breadth": 2}, r"unknown keys \['breadth'\]"),
        ({"depth": 9, "width": 3}, "MAX_TREE_NODES"),
        ("no_such_tree", r"\['draft_tree'\]: tree='no_such_tree' is unknown"),
        ([(1,)], r"\['draft_tree'\]: choice \(1,\).*\(0,\) is missing"),
        ([(0,), (0, 1)], r"choice \(0, 1\).*\(0, 0\) is missing"),
        ([(0,), (0,)], r"choice \(0,\) appears more than once"),
        ([(0,), ()], "must be a non-empty sequence"),
        ("chain_17", "depth 17; at most 16"),
    ],
)
def test_bad_draft_tree(target, tree, match):
    _refused(target, _draft(target, draft_tree=tree), ValueError, match)


@pytest.mark.parametrize(
    "tree", ["topk_5x2", {"depth": 2, "width": 2}, "chain_4", [(0,), (1,), (0, 0)]]
)
def test_draft_model_tree_depth_must_match_num_speculative_tokens(target, tree):
    """ "topk_5x2" with num_speculative_tokens=3 would draft depth 5 while the user asked for 3:
    refused by name, not silently followed."""
    _refused(
        target,
        _draft(target, draft_tree=tree),
        ValueError,
        r"depth \d but num_speculative_tokens=3",
    )


def test_a_tree_that_is_not_breadth_first_is_refused(target):
    # node 2 (depth 2, child of 1) before node 3 (depth 1): topological but not breadth-first
    tree = sj.decoding.trees.Tree((-1, 0, 1, 0))
    _refused(target, _draft(target, num_speculative_tokens=2, draft_tree=tree), ValueError,
             "node 3 \\(depth 1\\) comes after node 2 \\(depth 2\\).*breadth-first")  # fmt: skip


@pytest.mark.parametrize(
    "cfg_fn,match",
    [
        (lambda t: _draft(t, prompt_lookup_min=2), r"\['prompt_lookup_min'\] are prompt lookup's"),
        (lambda t: {"method": "lookahead", "prompt_lookup_max": 3}, "prompt_lookup_max"),
        (lambda t: _draft(t, typical_epsilon=0.1), r"\['typical_epsilon'\] set Medusa's typical"),
        (lambda t: _ngram(typical_delta=0.2), r"typical_delta.*verification='greedy' ignores"),
    ],
)
def test_keys_a_method_ignores_are_refused(target, cfg_fn, match):
    _refused(target, cfg_fn(target), ValueError, match)


def test_draft_tree_refused_for_ngram(target):
    cfg = _ngram(draft_tree={"depth": 2, "width": 2})
    _refused(
        target,
        cfg,
        ValueError,
        r"\['draft_tree'\] is only supported for methods \('draft_model', 'medusa', 'eagle', "
        r"'eagle3'\), not 'ngram'",
    )


def test_draft_window_shorter_than_the_tree_is_refused(target):
    """A tree's earlier levels sit in the draft's cache at slots past their positions; only a
    window shorter than the tree's depth could tell, so that case is refused, a chain is not."""
    mistral = sj.Decoder(target.config.replace(model_type="mistral", sliding_window=2), seed=1)
    _refused(
        target,
        _draft(mistral, draft_tree={"depth": 3, "width": 2}),
        ValueError,
        r"sliding_window=2 must exceed the draft tree's depth 3",
    )
    model = as_model(target)
    plan, _ = build_plan(_draft(mistral), model, None)  # a chain with the same window: fine
    assert plan.config.is_chain
    wide = sj.Decoder(target.config.replace(model_type="mistral", sliding_window=4), seed=1)
    plan, _ = build_plan(_draft(wide, draft_tree={"depth": 3, "width": 2}), model, None)
    assert plan.config.tree.max_depth == 3 and not plan.config.is_chain


# ------------------------------------------------------------------------- parsed once


def _count_parses(monkeypatch) -> list:
    calls = []
    parse = spec_config.parse

    def counted(raw, *, temperature):
        calls.append(raw.get("method") if isinstance(raw, dict) else raw)
        return parse(raw, temperature=temperature)

    monkeypatch.setattr(spec_config, "parse", counted)
    return calls


def test_a_config_naming_its_draft_by_path_is_parsed_once(target, tmp_path, monkeypatch):
    """`sj.generate` parses the dict once (before reading the heads' directory) into the
    `Speculative` the engine takes as is; the engine parses a raw dict once itself."""
    heads = sj.MedusaHeads.for_target(target, num_heads=2)
    out = sj.save_draft(heads, tmp_path / "heads")
    raw = {"method": "medusa", "model": str(out), "num_speculative_tokens": 2}
    calls = _count_parses(monkeypatch)
    by_path = sj.generate(target, PROMPT, 6, speculative_config=raw)
    assert calls == ["medusa"]
    loaded = {**raw, "model": heads}
    direct = engine.generate(target, PROMPT, 6, speculative_config=loaded)
    assert calls == ["medusa", "medusa"]
    assert by_path.tokens == direct.tokens and by_path.stats["method"] == "medusa"
    # A Speculative passed in is taken as is.
    spec = spec_config.resolve(loaded, temperature=0.0)
    assert sj.generate(target, PROMPT, 6, speculative_config=spec).tokens == direct.tokens
    assert calls == ["medusa"] * 3


def test_a_speculative_resolved_at_another_temperature_is_refused(target):
    cfg = _ngram()
    at_zero = spec_config.resolve(cfg, temperature=0.0)
    assert (at_zero.config.verification, at_zero.draft, at_zero.temperature) == ("greedy", None, 0)
    _refused(target, at_zero, ValueError, r"resolved at temperature=0.0 \(verification='greedy'\) "
             r"but this call samples at temperature=1.0", sampling=T1)  # fmt: skip
    sampled = spec_config.resolve(cfg, temperature=1.0)
    _refused(target, sampled, ValueError, r"resolved at temperature=1.0 \(verification='one_hot'\) "
             r"but this call samples at temperature=0.0")  # fmt: skip
    with pytest.raises(ValueError, match="resolved at temperature=0.0"):
        sj.generate_stream(target, PROMPT, 8, T1, speculative_config=at_zero)
    # Another T > 0 resolves "auto" the same way: accepted.
    assert spec_config.resolve(sampled, temperature=0.5) is sampled
