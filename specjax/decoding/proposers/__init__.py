"""Proposers: each method is one small module behind the interface in `base.py`."""

from specjax.decoding.proposers.draft_model import DraftModelProposer
from specjax.decoding.proposers.ngram import NgramProposer

PROPOSERS = {
    "draft_model": DraftModelProposer,
    "ngram": NgramProposer,
}

__all__ = ["PROPOSERS", "DraftModelProposer", "NgramProposer"]
