"""A partition on disk: USearch HNSW (f16), bm25s, token-vector shards, texts; versioned and swapped atomically."""
from .builder import NewChunks, build_version, collect_garbage
from .snapshot import ChunkInfo, IndexFormatError, PartitionSnapshot, current_version, quantize

__all__ = ["ChunkInfo", "IndexFormatError", "NewChunks", "PartitionSnapshot", "build_version", "collect_garbage",
           "current_version", "quantize"]
