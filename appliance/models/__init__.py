"""Model manifests (models/*.toml) and the offline, idempotent build that turns them into model folders."""
from .build import BuildReport, build_models, model_path
from .manifest import Manifest, load_manifests

__all__ = ["BuildReport", "Manifest", "build_models", "load_manifests", "model_path"]
