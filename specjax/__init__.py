"""specjax: speculative decoding of language models in JAX/Flax.

One verifier, many proposers, one jitted loop. The public surface:

    import specjax as sj
    model = sj.load_model(path)
    out = sj.generate(model, prompts, max_new_tokens=64, sampling=sj.SamplingParams(...),
                      speculative_config={"method": "draft_model", "model": draft, ...})
    out.tokens, out.texts, out.stats
"""

from specjax.cache import KVCache
from specjax.decoding.engine import GenerateOutput, generate, generate_stream
from specjax.io.hf import Model, load_model, save_hf
from specjax.models import Decoder, ModelConfig
from specjax.sampling import SamplingParams

__version__ = "0.1.0"

__all__ = [
    "Decoder",
    "GenerateOutput",
    "KVCache",
    "Model",
    "ModelConfig",
    "SamplingParams",
    "generate",
    "generate_stream",
    "load_model",
    "save_hf",
]
