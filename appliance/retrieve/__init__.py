"""Retrieval: partition selection, parallel BM25 + HNSW, Reciprocal Rank Fusion, late interaction, and the
retriever service that puts them behind one `search`."""
from .fusion import rrf
from .hybrid import Hit, HybridSearcher, Target
from .late import maxsim
from .partitions import PartitionFilter, select_partitions
from .service import PartitionSource, Retriever, SearchResult

__all__ = ["Hit", "HybridSearcher", "PartitionFilter", "PartitionSource", "Retriever", "SearchResult", "Target",
           "maxsim", "rrf", "select_partitions"]
