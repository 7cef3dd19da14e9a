"""Proposers: each method is one small module behind the contract in `base.py`.

Beside them, what some of them draft with: `tree_drafting.py` (static trees, level by level:
draft_model, EAGLE), `eagle_tree.py` (EAGLE-2's dynamic tree), `ngram_trie.py` (lookahead's
candidate trie).
"""

from specjax.decoding.proposers.base import Context, Draft, Proposer, StepInput
from specjax.decoding.proposers.draft_model import DraftModelProposer
from specjax.decoding.proposers.eagle import EagleProposer
from specjax.decoding.proposers.lookahead import LookaheadProposer
from specjax.decoding.proposers.medusa import MedusaProposer
from specjax.decoding.proposers.ngram import NgramProposer

PROPOSERS = {
    "draft_model": DraftModelProposer,
    "ngram": NgramProposer,
    "medusa": MedusaProposer,
    "eagle": EagleProposer,
    "eagle3": EagleProposer,
    "lookahead": LookaheadProposer,
}

__all__ = [
    "PROPOSERS",
    "Context",
    "Draft",
    "DraftModelProposer",
    "EagleProposer",
    "LookaheadProposer",
    "MedusaProposer",
    "NgramProposer",
    "Proposer",
    "StepInput",
]
