"""A partition on disk: USearch HNSW (f16), bm25s, token-vector shards, texts; versioned and swapped atomically."""
from .builder import NewChunks, build_version, collect_garbage, needs_recoding
from .snapshot import CURRENT, ChunkInfo, IndexFormatError, PartitionSnapshot, current_version, version_files
from .tokens import CODECS, Codebook, TokenBlock, TokenCodes, quantize, train_codebook

__all__ = ["CODECS", "CURRENT", "ChunkInfo", "Codebook", "IndexFormatError", "NewChunks", "PartitionSnapshot", "TokenBlock",
           "TokenCodes", "build_version", "collect_garbage", "current_version", "needs_recoding", "quantize",
           "train_codebook", "version_files"]
