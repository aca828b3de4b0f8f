"""Model manifests (models/*.toml) and the offline, idempotent build that turns them into model folders (the
router's training itself is `appliance.router`'s); tiny test LLMs and AWQ quantization. torch, transformers and
autoawq are imported only by the functions that need them."""
from .build import BuildReport, build_folder, build_models
from .manifest import Convert, Manifest, load_manifests
from .quantize import default_calibration_texts, quantize_awq
from .tiny import build_tiny_llm

__all__ = ["BuildReport", "Convert", "Manifest", "build_folder", "build_models", "build_tiny_llm",
           "default_calibration_texts", "load_manifests", "quantize_awq"]
