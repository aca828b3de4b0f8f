"""BM25 tokenisation: English words stemmed with stop words removed; Chinese segmented by jieba (search mode).

bm25s's own tokenizer does not segment Chinese, so a Chinese query would match nothing but whole sentences.
"""
from __future__ import annotations

import logging
import re
import threading
import unicodedata

import jieba
import Stemmer

jieba.setLogLevel(logging.WARNING)

_LATIN = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")  # Han only: what jieba segments
_CJK_PUNCT = re.compile(r"[\u3000-\u303f\uff00-\uffef]")

ENGLISH_STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both but
by can could did do does doing down during each few for from further had has have having he her here hers herself
him himself his how i if in into is it its itself just me more most my myself no nor not of off on once only or
other our ours ourselves out over own same she should so some such than that the their theirs them themselves then
there these they this those through to too under until up very was we were what when where which while who whom why
will with would you your yours yourself yourselves
""".split())

CHINESE_STOP_WORDS = frozenset("的 了 在 是 和 与 及 或 也 就 都 而 之 于 为 以 其 这 那 有 被 把 对 从 等 中 上 下 个 一 吗 呢 吧 啊".split())

_init_lock = threading.Lock()
_jieba_ready = False


class BM25Tokenizer:
    """Turns text into the terms BM25 indexes and queries with; the same instance serves both sides."""

    def __init__(self, stem: bool = True):
        self._stem = stem
        self._local = threading.local()  # PyStemmer objects are not thread-safe

    def __call__(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFKC", text).lower()
        terms: list[str] = []
        pos = 0
        for run in _CJK_RUN.finditer(text):
            terms.extend(self._latin(text[pos:run.start()]))
            terms.extend(_chinese(run.group()))
            pos = run.end()
        terms.extend(self._latin(text[pos:]))
        return terms

    def many(self, texts: list[str]) -> list[list[str]]:
        return [self(t) for t in texts]

    def _latin(self, text: str) -> list[str]:
        words = [w for w in _LATIN.findall(_CJK_PUNCT.sub(" ", text)) if w not in ENGLISH_STOP_WORDS]
        if not self._stem or not words:
            return words
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = self._local.stemmer = Stemmer.Stemmer("english")
        return stemmer.stemWords(words)


def _chinese(run: str) -> list[str]:
    global _jieba_ready
    if not _jieba_ready:
        with _init_lock:  # jieba builds its dictionary on first use; do it once, not in every thread
            if not _jieba_ready:
                jieba.initialize()
                _jieba_ready = True
    return [w for w in jieba.cut_for_search(run) if w.strip() and w not in CHINESE_STOP_WORDS]
