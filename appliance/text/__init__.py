"""Text handling shared by ingest and query: normalisation, chunking (sections and pages kept), BM25 tokenisation
(English and Chinese), follow-up questions (does one lean on the conversation; its expansion), and a question's
normal forms (the text to embed, the cache key)."""
from .chunking import Chunk, Placed, chunk_blocks, chunk_text
from .followup import Turn, depends_on_history, expand_question, history_query, salient_terms
from .language import (AUTO, HAN, LANGUAGES, QUESTION_WORDS_ZH, Language, content_chars, detect_language,
                       question_language)
from .normalise import (content_hash, fold, has_cjk, markdown_title, normalise_question, normalise_text, question_key,
                        strip_punctuation)
from .tokenize import ENGLISH_STOP_WORDS, BM25Tokenizer

__all__ = ["AUTO", "BM25Tokenizer", "ENGLISH_STOP_WORDS", "Chunk", "HAN", "LANGUAGES", "QUESTION_WORDS_ZH", "Language", "Placed",
           "Turn", "chunk_blocks", "chunk_text", "content_chars", "content_hash", "depends_on_history", "detect_language",
           "expand_question", "fold", "has_cjk", "history_query", "markdown_title", "normalise_question", "normalise_text",
           "question_key", "question_language", "salient_terms", "strip_punctuation"]
