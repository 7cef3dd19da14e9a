"""Flax NNX decoders and the runtime `Model`. The axis legend of every shape comment: `axes.py`."""

from specjax.models.config import ModelConfig, config_from_hf, config_to_hf
from specjax.models.decoder import Decoder, ForwardOutput, export_state, hf_param_names
from specjax.models.model import Model, as_model, check_same_vocabulary

__all__ = [
    "Decoder",
    "ForwardOutput",
    "Model",
    "ModelConfig",
    "as_model",
    "check_same_vocabulary",
    "config_from_hf",
    "config_to_hf",
    "export_state",
    "hf_param_names",
]
