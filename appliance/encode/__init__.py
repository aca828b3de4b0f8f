"""Encoders (ONNX MiniLM with token vectors; multilingual USE), the query micro-batcher, and the set of encoders a
box runs (one per partition language)."""
from __future__ import annotations

from pathlib import Path

from .base import Encoded, Encoder
from .batcher import BatchStats, EncoderBusy, MicroBatcher, Query
from .chars import CharVectors, char_maxsim
from .onnx_graphs import GRAPH_SETTINGS, GraphChoice
from .registry import EncoderSet


def load_encoder(model: str, model_dir: Path, threads: int = 2, max_length: int = 256, graph: str = "auto") -> Encoder:
    """Open the encoder named in the settings from its built model folder (see `appliance models build`).
    `graph`: MiniLM's ONNX graph ("auto": the faster one measured at load; "int8"; "fp32")."""
    if not Path(model_dir).is_dir():
        raise FileNotFoundError(f"model folder {model_dir} is missing: run `appliance models build` first")
    if model == "minilm":
        from .onnx_encoder import OnnxEncoder  # onnxruntime is imported before usearch anywhere it matters
        return OnnxEncoder(model_dir, threads=threads, max_length=max_length, graph=graph)
    if model == "use":
        from .use_encoder import UseEncoder
        return UseEncoder(model_dir)
    raise ValueError(f"unknown encoder {model!r}")


__all__ = ["GRAPH_SETTINGS", "BatchStats", "CharVectors", "Encoded", "Encoder", "EncoderBusy", "EncoderSet",
           "GraphChoice", "MicroBatcher", "Query", "char_maxsim", "load_encoder"]
