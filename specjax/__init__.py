"""specjax: speculative decoding of language models in JAX/Flax.

One verifier, many proposers, one jitted loop. The public surface:

    import specjax as sj
    model = sj.load_model(path)
    out = sj.generate(model, prompts, max_new_tokens=64, sampling=sj.SamplingParams(...),
                      speculative_config={"method": "draft_model", "model": draft, ...})
    out.tokens, out.texts, out.stats
    heads = sj.load_draft(path)              # Medusa heads or an EAGLE drafter, any layout
    sj.save_draft(heads, out_dir, layout="vllm")
"""

from specjax.api import generate, generate_stream
from specjax.cache import KVCache
from specjax.decoding.engine import GenerateOutput
from specjax.heads import EagleConfig, EagleHead, MedusaConfig, MedusaHeads
from specjax.io.drafts import load_draft, save_draft
from specjax.io.gguf_file import save_gguf
from specjax.io.hf import load_model, save_hf
from specjax.models import Decoder, Model, ModelConfig
from specjax.sampling import SamplingParams

__version__ = "0.1.0"

__all__ = [
    "Decoder",
    "EagleConfig",
    "EagleHead",
    "GenerateOutput",
    "KVCache",
    "MedusaConfig",
    "MedusaHeads",
    "Model",
    "ModelConfig",
    "SamplingParams",
    "generate",
    "generate_stream",
    "load_draft",
    "load_model",
    "save_draft",
    "save_gguf",
    "save_hf",
]
