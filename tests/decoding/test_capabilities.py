"""Methods declare what they are (`Capabilities`); spec_config, api and the registry read it.

- the registry's methods and what they take, as declared (the lists spec_config once held);
- editing a declaration moves validation with it (a monkeypatched CAPABILITIES, a registered
  fake method), so no rule about a method lives outside its proposer;
- a malformed declaration is refused when its class is defined, a class that does not declare
  itself (or clashes with another) when it is registered;
- spec_config's code names no method.
"""

import ast
import dataclasses
import inspect

import pytest

from specjax.decoding import spec_config
from specjax.decoding.proposers import (
    PROPOSERS,
    Capabilities,
    MedusaProposer,
    NgramProposer,
    OwnKeys,
    register,
)


def _ngram(**kw):
    return {"method": "ngram", "num_speculative_tokens": 3, **kw}


def _medusa(**kw):
    return {"method": "medusa", "model": object(), "num_speculative_tokens": 3, **kw}


def test_the_registry_lists_what_each_method_declares():
    assert spec_config.METHODS == ("draft_model", "ngram", "medusa", "eagle", "eagle3", "lookahead")
    assert PROPOSERS["eagle"] is PROPOSERS["eagle3"]
    where = spec_config.methods_where
    assert where(lambda c: c.model != "none") == ("draft_model", "medusa", "eagle", "eagle3")
    assert where(lambda c: c.model == "draft_lm") == ("draft_model",)
    assert where(lambda c: c.sampled_drafts) == ("draft_model", "medusa", "eagle", "eagle3")
    assert where(lambda c: c.auto_probabilistic == "always") == ("draft_model",)
    assert where(lambda c: c.auto_probabilistic == "chains") == ("eagle", "eagle3")
    assert where(lambda c: "static" in c.trees) == ("draft_model", "medusa", "eagle", "eagle3")
    assert where(lambda c: "dynamic" in c.trees) == ("eagle", "eagle3")
    assert where(lambda c: c.extra_nodes) == ("lookahead",)
    assert spec_config.keys()[-7:] == (
        "prompt_lookup_min",
        "prompt_lookup_max",
        "lookahead_window",
        "ngram_size",
        "max_candidates",
        "seed_pool_from_prompt",
        "lookahead_advance",
    )


# --------------------------------------------------------------- editing a declaration


def test_validation_follows_an_edited_declaration(monkeypatch):
    tree = {"depth": 3, "width": 2}
    with pytest.raises(ValueError, match=r"draft_tree'\] is only supported for methods"):
        spec_config.parse(_ngram(draft_tree=tree), temperature=0.0)
    assert spec_config.parse(_medusa(), temperature=0.8).verification == "one_hot"
    caps = NgramProposer.CAPABILITIES
    monkeypatch.setattr(NgramProposer, "CAPABILITIES",
                        dataclasses.replace(caps, trees=("chain", "static")))  # fmt: skip
    monkeypatch.setattr(MedusaProposer, "CAPABILITIES",
                        dataclasses.replace(MedusaProposer.CAPABILITIES, depth="equal",
                                            auto_probabilistic="always"))  # fmt: skip
    cfg = spec_config.parse(_ngram(draft_tree=tree), temperature=0.0)
    assert (cfg.tree.max_depth, cfg.tree.num_drafts, cfg.is_chain) == (3, 14, False)
    # Medusa now drafts sampled chains by default at T > 0, and its tree depth must equal N.
    assert spec_config.parse(_medusa(), temperature=0.8).verification == "probabilistic"
    with pytest.raises(ValueError, match=r"depth 2 but num_speculative_tokens=3: method='medusa'"):
        spec_config.parse(_medusa(draft_tree={"depth": 2, "width": 2}), temperature=0.0)
    # The list of methods that take a dynamic tree is still read from the declarations.
    with pytest.raises(ValueError, match=r"only supported for methods \('eagle', 'eagle3'\), not "
                       r"'ngram'"):  # fmt: skip
        spec_config.parse(
            _ngram(draft_tree={"dynamic": {"top_k": 2, "total_tokens": 8}}), temperature=0.0
        )


class _FakeProposer:
    """A method that exists only in this test: draft heads, static trees, one own key."""

    @staticmethod
    def _keys(raw):
        knob = raw.get("fake_knob", 1)
        if knob not in (1, 2):
            raise ValueError(f"speculative_config['fake_knob']={knob!r} must be 1 or 2")
        return OwnKeys({})

    CAPABILITIES = Capabilities(
        methods=("fake",),
        model="heads",
        trees=("chain", "static"),
        depth="at_most",
        keys=("fake_knob",),
        parse_keys=_keys,
        keys_owner="the fake method",
    )
    extra_nodes = 0

    def build(self):  # the contract's members, never called here
        ...

    init = propose = commit = build


@pytest.fixture
def fake(monkeypatch):
    registry = dict(PROPOSERS)
    register(_FakeProposer, registry)
    monkeypatch.setitem(PROPOSERS, "fake", _FakeProposer)
    return _FakeProposer


def test_a_registered_method_is_validated_by_its_declaration(fake):
    raw = {"method": "fake", "num_speculative_tokens": 2}
    with pytest.raises(ValueError, match=r"'model'\] is required for method='fake' \(draft heads"):
        spec_config.parse(raw, temperature=0.0)
    raw["model"] = object()
    cfg = spec_config.parse({**raw, "draft_tree": "chain_2", "fake_knob": 2}, temperature=0.0)
    assert (cfg.method, cfg.tree.max_depth) == ("fake", 2)
    with pytest.raises(ValueError, match=r"\['fake_knob'\]=3 must be 1 or 2"):
        spec_config.parse({**raw, "fake_knob": 3}, temperature=0.0)
    with pytest.raises(ValueError, match=r"depth 3, deeper than num_speculative_tokens=2"):
        spec_config.parse({**raw, "draft_tree": "chain_3"}, temperature=0.0)
    with pytest.raises(ValueError, match=r"\['fake_knob'\] are the fake method's; method='ngram'"):
        spec_config.parse(_ngram(fake_knob=1), temperature=0.0)
    with pytest.raises(ValueError, match=r"\['prompt_lookup_min'\] are prompt lookup's"):
        spec_config.parse({**raw, "prompt_lookup_min": 1}, temperature=0.0)
    assert "fake_knob" in spec_config.keys()
    with pytest.raises(ValueError, match=r"'method'\]='fakes' is invalid; allowed: .*'fake'"):
        spec_config.parse({**raw, "method": "fakes"}, temperature=0.0)


# ------------------------------------------------------------------- malformed declarations


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"methods": ()}, r"Capabilities.methods=\(\): a proposer serves at least one"),
        ({"methods": ("x", "x")}, r"Capabilities.methods=\('x', 'x'\): names one entry twice"),
        ({"methods": "x"}, r"Capabilities.methods='x': must be a tuple"),
        ({"model": "lm"}, r"Capabilities.model='lm': must be one of \('none', 'draft_lm'"),
        ({"trees": ("forest",)}, r"Capabilities.trees=\('forest',\): \['forest'\] not in"),
        ({"depth": "any"}, r"Capabilities.depth='any': must be one of"),
        ({"sampled_drafts": 1}, r"Capabilities.sampled_drafts=1: must be True or False"),
        ({"auto_probabilistic": "always"}, r"auto_probabilistic='always': needs sampled_drafts"),
        (
            {"sampled_drafts": True, "auto_probabilistic": "always", "trees": ("chain", "dynamic")},
            r"'always': but trees=\('chain', 'dynamic'\) include a per-step tree",
        ),
        (
            {"sampled_drafts": True, "auto_probabilistic": "chains", "trees": ("static",)},
            r"'chains': but trees=\('static',\) has no 'chain'",
        ),
        ({"trees": ("static",)}, r"Capabilities.trees=\('static',\): must include 'chain'"),
        ({"trees": ("chain", "trie")}, r"Capabilities.depth='equal': with trees="),
        (
            {
                "trees": ("trie", "static"),
                "depth": "own_keys",
                "keys": ("k",),
                "parse_keys": OwnKeys,
                "keys_owner": "x",
            },
            r"own keys fix its tree takes no draft_tree",
        ),
        ({"keys": ("k",), "keys_owner": "x"}, r"parse_keys=None: with keys=\('k',\): own keys"),
        ({"keys": ("k",), "parse_keys": 3, "keys_owner": "x"}, r"parse_keys=3: must be callable"),
        ({"keys": ("k",), "parse_keys": OwnKeys}, r"keys_owner='': must name the owner"),
    ],
)
def test_a_malformed_declaration_is_refused_when_its_class_is_defined(kw, match):
    kw = {"methods": ("bad",), **kw}
    with pytest.raises(ValueError, match=match):

        class BadProposer:
            CAPABILITIES = Capabilities(**kw)


def test_registration_refuses_an_undeclared_or_clashing_class():
    registry = dict(PROPOSERS)

    class Undeclared:
        build = init = propose = commit = _FakeProposer.build

    with pytest.raises(TypeError, match=r"Undeclared must declare CAPABILITIES = Capabilities"):
        register(Undeclared, registry)

    def declared(extra_nodes=0, **kw):
        caps = dataclasses.replace(_FakeProposer.CAPABILITIES, **kw)
        return type("Other", (_FakeProposer,), {"CAPABILITIES": caps, "extra_nodes": extra_nodes})

    with pytest.raises(ValueError, match=r"method 'ngram' of Other is already served by Ngram"):
        register(declared(methods=("ngram",)), registry)
    with pytest.raises(ValueError, match=r"Other declares keys \['ngram_size'\], Lookahead"):
        register(declared(keys=("ngram_size",)), registry)
    with pytest.raises(ValueError, match=r"CAPABILITIES.extra_nodes=False but the class's extra"):
        register(declared(extra_nodes=4), registry)
    with pytest.raises(TypeError, match=r"lacks the proposer contract's \['propose'\]"):
        register(type("Other", (_FakeProposer,), {"propose": None}), registry)
    assert registry == PROPOSERS  # nothing was added by a refused class


def test_spec_config_names_no_method():
    """Its rules come from the declarations: no string in its code is a method's name."""
    tree = ast.parse(inspect.getsource(spec_config))
    doc = ast.get_docstring(tree, clean=False)
    names = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value != doc
    }
    assert not names & set(PROPOSERS)
