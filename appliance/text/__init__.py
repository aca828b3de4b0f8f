"""Text handling shared by ingest and query: normalisation, chunking and BM25 tokenisation (English and Chinese)."""
from .chunking import chunk_text
from .normalise import content_hash, has_cjk, markdown_title, normalise
from .tokenize import BM25Tokenizer

__all__ = ["BM25Tokenizer", "chunk_text", "content_hash", "has_cjk", "markdown_title", "normalise"]
