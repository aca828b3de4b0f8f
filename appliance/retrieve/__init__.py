"""Retrieval: partition selection, parallel BM25 + HNSW, Reciprocal Rank Fusion, late-interaction prefilter."""
from .fusion import rrf
from .hybrid import Hit, HybridSearcher, Target, Timings
from .late import maxsim
from .partitions import PartitionFilter, select_partitions

__all__ = ["Hit", "HybridSearcher", "PartitionFilter", "Target", "Timings", "maxsim", "rrf",
           "select_partitions"]
