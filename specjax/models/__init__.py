"""Flax NNX decoders. The axis legend used in every shape comment is in `axes.py`."""

from specjax.models.config import ModelConfig, config_from_hf, config_to_hf
from specjax.models.decoder import Decoder, ForwardOutput, hf_param_names

__all__ = [
    "Decoder",
    "ForwardOutput",
    "ModelConfig",
    "config_from_hf",
    "config_to_hf",
    "hf_param_names",
]
