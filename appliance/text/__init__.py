"""Text handling shared by ingest and query: normalisation, chunking, BM25 tokenisation (English and Chinese), and
the question features and weights file of the router."""
from .followup import Turn, depends_on_history, expand_question, history_query, salient_terms
from .chunking import Chunk, Placed, chunk_blocks, chunk_text
from .normalise import content_hash, has_cjk, markdown_title, normalise_text
from .question import QuestionFeatures, normalise_question, question_features, question_key
from .router_weights import RouterWeights
from .tokenize import BM25Tokenizer

__all__ = ["BM25Tokenizer", "Turn", "depends_on_history", "expand_question", "history_query", "salient_terms", "Chunk", "Placed", "chunk_blocks", "QuestionFeatures", "RouterWeights", "chunk_text", "content_hash", "has_cjk",
           "markdown_title", "normalise_question", "normalise_text", "question_features", "question_key"]
