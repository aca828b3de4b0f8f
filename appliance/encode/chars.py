"""Character vectors for Chinese late interaction: every CJK character embedded alone by the multilingual encoder.

No package ships a Chinese token model fast enough to index with (MODELS.md), and USE has no token vectors. A
character's vector alone is static, so a passage's "token vectors" are its characters' rows of one table, looked up
at query time: nothing is stored per chunk. The table fills as characters are met (a few thousand cover almost all
text; the 3,755 most common are embedded at warm-up) and never shrinks: at most 20,992 rows of 512 floats.
"""
from __future__ import annotations

import threading

import numpy as np

from ..text import HAN, content_chars
from .base import Encoder


class CharVectors:
    def __init__(self, encoder: Encoder, batch: int = 256):
        self._encoder, self._batch = encoder, batch
        self._rows: dict[str, int] = {}
        self._table = np.zeros((0, encoder.dim), np.float32)
        self._lock = threading.Lock()  # searches add characters from several threads

    def __len__(self) -> int:
        return len(self._rows)

    def question(self, text: str) -> np.ndarray | None:
        """The question's content characters' vectors (each once), or None when it has none."""
        chars = content_chars(text)
        return self.vectors(chars) if chars else None

    def passages(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The passages' distinct characters' vectors (each once over all passages: they share most), where each
        passage's characters are among them (each character once per passage, passages one after the other), and
        how many each passage has."""
        per_text = [list(dict.fromkeys(HAN.findall(text))) or [" "] for text in texts]
        lengths = np.array([len(chars) for chars in per_text], np.int64)
        distinct = list(dict.fromkeys(c for chars in per_text for c in chars))
        position = {c: i for i, c in enumerate(distinct)}
        where = np.array([position[c] for chars in per_text for c in chars], np.int64)
        return self.vectors(distinct), where, lengths

    def vectors(self, chars: list[str]) -> np.ndarray:
        missing = [c for c in dict.fromkeys(chars) if c not in self._rows]
        if missing:
            self._add(missing)
        with self._lock:  # the rows and the table they index, as one pair (another thread may be appending)
            rows, table = [self._rows[c] for c in chars], self._table
        return table[rows]

    def warm_up(self) -> None:
        """Embed the 3,755 most common characters (GB2312 level 1), so first questions pay for few."""
        common = [bytes([hi, lo]).decode("gb2312") for hi in range(0xB0, 0xD8) for lo in range(0xA1, 0xFF)
                  if not (hi == 0xD7 and lo > 0xF9)]
        self.vectors(common)

    def _add(self, chars: list[str]) -> None:
        encoded = [self._encoder.encode(chars[i:i + self._batch]).dense for i in range(0, len(chars), self._batch)]
        with self._lock:
            fresh = [(c, v) for c, v in zip(chars, np.vstack(encoded)) if c not in self._rows]
            if fresh:
                start = len(self._table)
                self._table = np.vstack([self._table, np.stack([v for _, v in fresh]).astype(np.float32)])
                self._rows.update((c, start + i) for i, (c, _) in enumerate(fresh))


def char_maxsim(question: np.ndarray, distinct: np.ndarray, where: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Mean over the question's characters of the best cosine with any character of each passage (`distinct`,
    `where`, `lengths` as `CharVectors.passages` gives them): one product over the distinct characters."""
    if not len(lengths):
        return np.zeros(0, np.float32)
    sims = (question @ distinct.T)[:, where]  # (question chars, every passage's characters in turn)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.maximum.reduceat(sims, starts, axis=1).mean(axis=0)
