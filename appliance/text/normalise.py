"""Unicode normalisation, the normal forms of a question (to embed; the cache key) and content hashing."""
from __future__ import annotations

import hashlib
import re
import unicodedata

# Kana, CJK ideographs (extension A, unified, compatibility) and Hangul: scripts written without spaces.
CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK = re.compile(f"[{CJK_CHARS}]")
_SPACE = re.compile(r"\s+")


def normalise_text(text: str) -> str:
    """NFKC (full-width to half-width), collapsed whitespace."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def _punctuation_table() -> dict[int, str | None]:
    # BMP only (17 ms at import; the whole range takes 0.3 s): punctuation -> space, format chars (zero-width
    # spaces etc.) deleted. '.' and ',' are handled by _LOOSE_SEP so that 3.5 and 1,000 stay one number.
    table: dict[int, str | None] = {}
    for i in range(0x10000):
        cat = unicodedata.category(chr(i))
        if cat == "Cf":
            table[i] = None
        elif cat[0] == "P" and chr(i) not in ".,":
            table[i] = " "
    return table


_PUNCT = _punctuation_table()
_LOOSE_SEP = re.compile(r"[.,](?:(?!\d)|(?<!\d.))")  # a '.' or ',' that is not inside a number
_SPACE_NEAR_CJK = re.compile(f"(?<=[{CJK_CHARS}]) | (?=[{CJK_CHARS}])")


def fold(text: str) -> str:
    """NFKC (full-width to half-width) and case-folded."""
    return unicodedata.normalize("NFKC", text).casefold()


def strip_punctuation(folded: str) -> str:
    """Punctuation out (kept inside numbers), whitespace collapsed."""
    return " ".join(_LOOSE_SEP.sub(" ", folded.translate(_PUNCT)).split())


def normalise_question(text: str) -> str:
    """NFKC, case-fold, punctuation out (kept inside numbers), whitespace collapsed: the text to embed and to
    compute features from, so that "What is X?" and "what is x" are one question."""
    return strip_punctuation(fold(text))


def question_key(text: str) -> str:
    """The cache's normal form: `normalise_question` without the spaces next to CJK characters (which has none),
    so "RAG系统", "rag 系统" and "ＲＡＧ系统？" are one key; punctuation inside numbers stays ("3.5" is not "35")."""
    return _SPACE_NEAR_CJK.sub("", normalise_question(text))


def has_cjk(text: str, share: float = 0.2) -> bool:
    """True when at least `share` of the non-space characters are CJK."""
    chars = len(text) - text.count(" ")
    return chars > 0 and len(_CJK.findall(text)) / chars >= share


def content_hash(title: str, text: str, metadata_json: str) -> str:
    digest = hashlib.sha256()
    for part in (title, text, metadata_json):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def markdown_title(text: str, fallback: str) -> str:
    """The first level-one heading of a Markdown text, else `fallback`."""
    for line in text.splitlines()[:20]:
        if line.startswith("# "):
            return line[2:].strip() or fallback
    return fallback
