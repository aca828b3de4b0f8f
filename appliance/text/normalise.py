"""Unicode normalisation and content hashing."""
from __future__ import annotations

import hashlib
import re
import unicodedata

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """NFKC (full-width to half-width), collapsed whitespace."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


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
