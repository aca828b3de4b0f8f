"""rag-appliance: offline, single-box RAG answer server."""
# onnxruntime must be loaded before usearch: usearch 2.26.2-2.26.6 segfault the other way round (MODELS.md).
try:
    import onnxruntime as _onnxruntime  # noqa: F401
except ImportError:  # a box without the encoder runtime still gets clear errors from load_encoder
    pass

__version__ = "0.1.0"
