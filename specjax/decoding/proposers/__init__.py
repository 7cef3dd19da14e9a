"""Proposers: each method is one small module behind the contract in `base.py`.

Each proposer class declares what it is as `CAPABILITIES` (`base.Capabilities`): the
speculative_config methods it serves, what its `model` holds, the trees it fills, its own keys.
`PROPOSERS` maps every declared method to its class; `spec_config` and `api` read the
declarations through it and name no method themselves. Adding a method: a proposer module
with its `CAPABILITIES`, one entry in `CLASSES`, a config and a test file.

Beside them, what some of them draft with: `tree_drafting.py` (static trees, level by level:
draft_model, EAGLE), `eagle_tree.py` (EAGLE-2's dynamic tree), `ngram_trie.py` (lookahead's
candidate trie).
"""

from specjax.decoding.proposers.base import (
    Capabilities,
    Context,
    Draft,
    OwnKeys,
    Proposer,
    StepInput,
)
from specjax.decoding.proposers.draft_model import DraftModelProposer
from specjax.decoding.proposers.eagle import EagleProposer
from specjax.decoding.proposers.lookahead import LookaheadProposer
from specjax.decoding.proposers.medusa import MedusaProposer
from specjax.decoding.proposers.ngram import NgramProposer

# In the order methods are listed (spec_config.METHODS, refusals).
CLASSES = (DraftModelProposer, NgramProposer, MedusaProposer, EagleProposer, LookaheadProposer)
_CONTRACT = ("build", "init", "propose", "commit")


def register(cls: type, registry: dict[str, type]) -> None:
    """Add `cls` under each method its `CAPABILITIES` declares, refusing a class that does not
    declare itself or the contract, or that claims a method or a key another class holds."""
    caps = getattr(cls, "CAPABILITIES", None)
    if not isinstance(caps, Capabilities):
        raise TypeError(
            f"{cls.__name__} must declare CAPABILITIES = Capabilities(...) on the class "
            f"(got {type(caps).__name__})"
        )
    missing = [name for name in _CONTRACT if not callable(getattr(cls, name, None))]
    if missing:
        raise TypeError(f"{cls.__name__} lacks the proposer contract's {missing} (base.Proposer)")
    extra = getattr(cls, "extra_nodes", None)
    if caps.extra_nodes != (isinstance(extra, property) or (isinstance(extra, int) and extra > 0)):
        raise ValueError(
            f"{cls.__name__}.CAPABILITIES.extra_nodes={caps.extra_nodes} but the class's "
            f"extra_nodes is {extra!r} (a positive count or a property when it adds nodes, 0 "
            "when it adds none)"
        )
    for method in caps.methods:
        if registry.get(method, cls) is not cls:
            raise ValueError(
                f"method {method!r} of {cls.__name__} is already served by "
                f"{registry[method].__name__}"
            )
    for other in dict.fromkeys(registry.values()):
        shared = sorted(set(caps.keys) & set(other.CAPABILITIES.keys))
        if other is not cls and shared:
            raise ValueError(f"{cls.__name__} declares keys {shared}, {other.__name__}'s already")
    registry.update(dict.fromkeys(caps.methods, cls))


PROPOSERS: dict[str, type] = {}
for _cls in CLASSES:
    register(_cls, PROPOSERS)

__all__ = [
    "CLASSES",
    "PROPOSERS",
    "Capabilities",
    "Context",
    "Draft",
    "DraftModelProposer",
    "EagleProposer",
    "LookaheadProposer",
    "MedusaProposer",
    "NgramProposer",
    "OwnKeys",
    "Proposer",
    "StepInput",
    "register",
]
