"""rag-appliance: offline, single-box RAG answer server."""
import os

# onnxruntime >= 1.29 uploads telemetry to Microsoft on Linux (its device id on disk, DNS for its endpoint: seen
# from the network-less box) unless this is set before it initialises. Nothing leaves the box, so it is not a setting.
os.environ["ORT_DISABLE_TELEMETRY"] = "1"
# onnxruntime must be loaded before usearch: usearch 2.26.2-2.26.6 segfault the other way round (MODELS.md).
try:
    import onnxruntime as _onnxruntime  # noqa: F401
except ImportError:  # a box without the encoder runtime still gets clear errors from load_encoder
    pass

__version__ = "0.1.0"
