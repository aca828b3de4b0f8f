"""BM25 for a new version from the previous version's term statistics plus the delta, not from all texts again.

bm25s scores eagerly: each posting's score depends on the whole partition (idf, the average length), so every
version re-scores every posting. What made a version slow was the rest: tokenizing every text of the partition
again (linear in its size, 406 s over the builds of a 100k-chunk partition). A version therefore keeps, beside
bm25s's files, its term statistics (per row: distinct term ids, their counts, its length); the next version takes
the kept rows' statistics, tokenizes only the new rows, and re-scores all postings in a few numpy passes.

The scores are bm25s's own (method "lucene", k1 1.5, b 0.75, float32, the same operations in the same order),
written in its file format and read by `bm25s.BM25.load`; tests/unit/test_bm25_terms.py checks them against
`bm25s.BM25.index` on the same corpus.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np

K1, B = 1.5, 0.75  # bm25s's defaults, which the full build used
_FILES = ("term_ids", "term_counts", "term_offsets", "row_lengths")


@dataclass(slots=True)
class TermStats:
    """Per row: its distinct term ids (into `vocab`) and their counts, flat, with offsets; and its length."""
    vocab: list[str]
    offsets: np.ndarray  # (rows + 1,) int64
    term_ids: np.ndarray  # int32
    counts: np.ndarray  # int32
    lengths: np.ndarray  # int64, tokens per row repeats included

    @property
    def rows(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def empty(cls) -> "TermStats":
        return cls([], np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int64))

    @classmethod
    def from_tokens(cls, tokenized: list[list[str]], vocab: list[str] | None = None) -> "TermStats":
        """Statistics of tokenized rows, their terms numbered after `vocab`'s (new terms are appended)."""
        vocab = list(vocab or [])
        number = {term: i for i, term in enumerate(vocab)}
        ids, counts, sizes = [], [], []
        for tokens in tokenized:
            counted = Counter(tokens)
            ids.extend(number.setdefault(term, len(number)) for term in counted)
            counts.extend(counted.values())
            sizes.append(len(counted))
        vocab.extend(list(number)[len(vocab):])
        offsets = np.zeros(len(tokenized) + 1, np.int64)
        offsets[1:] = np.cumsum(sizes)
        return cls(vocab, offsets, np.asarray(ids, np.int32), np.asarray(counts, np.int32),
                   np.asarray([len(t) for t in tokenized], np.int64))

    def take(self, rows: np.ndarray) -> "TermStats":
        """These rows' statistics, in this order (same vocabulary)."""
        rows = np.asarray(rows, np.int64)
        sizes = self.offsets[rows + 1] - self.offsets[rows]
        offsets = np.zeros(len(rows) + 1, np.int64)
        offsets[1:] = np.cumsum(sizes)
        where = np.repeat(self.offsets[rows] - offsets[:-1], sizes) + np.arange(offsets[-1])
        return TermStats(self.vocab, offsets, self.term_ids[where], self.counts[where], self.lengths[rows])

    def then(self, tokenized: list[list[str]]) -> "TermStats":
        """These rows followed by new tokenized ones, then without the terms no row has any more."""
        new = TermStats.from_tokens(tokenized, self.vocab)
        offsets = np.concatenate([self.offsets, self.offsets[-1] + new.offsets[1:]])
        joined = TermStats(new.vocab, offsets, np.concatenate([self.term_ids, new.term_ids]),
                           np.concatenate([self.counts, new.counts]), np.concatenate([self.lengths, new.lengths]))
        return joined.compacted()

    def compacted(self) -> "TermStats":
        """Terms no row has (their rows were deleted) leave the vocabulary, so it cannot grow without bound."""
        used = np.bincount(self.term_ids, minlength=len(self.vocab)) > 0
        if used.all():
            return self
        renumber = (np.cumsum(used) - 1).astype(np.int32)
        vocab = [term for term, keep in zip(self.vocab, used) if keep]
        return TermStats(vocab, self.offsets, renumber[self.term_ids], self.counts, self.lengths)

    def save(self, folder: Path) -> None:
        for name, array in zip(_FILES, (self.term_ids, self.counts, self.offsets, self.lengths)):
            with open(folder / f"{name}.npy", "wb") as f:
                np.save(f, array)
        (folder / "terms.json").write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> "TermStats | None":
        """A version's statistics; None for a version written without them (they are then built from its texts)."""
        if not (folder / "terms.json").exists():
            return None
        ids, counts, offsets, lengths = (np.load(folder / f"{name}.npy") for name in _FILES)
        vocab = json.loads((folder / "terms.json").read_text(encoding="utf-8"))
        return cls(vocab, offsets, ids, counts, lengths)


def write_bm25(folder: Path, stats: TermStats) -> bool:
    """Score every posting and write bm25s's index files (plus the statistics) into `folder`; False, and nothing
    written, when no row has a term (bm25s cannot index an empty vocabulary)."""
    if not len(stats.term_ids):
        return False
    n_rows, n_terms = stats.rows, len(stats.vocab)
    frequencies = np.bincount(stats.term_ids, minlength=n_terms)
    # bm25s: idf by math.log in float64, kept as float32; tfc in float64 from float32 counts; their product cast
    idf = np.log(1 + (n_rows - frequencies + 0.5) / (frequencies + 0.5)).astype(np.float32)
    posting_rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(stats.offsets))
    row_length = stats.lengths[posting_rows].astype(np.float64)
    mean_length = stats.lengths.mean()
    tf = stats.counts.astype(np.float32).astype(np.float64)
    tfc = tf / (K1 * ((1 - B) + B * row_length / mean_length) + tf)
    scores = (idf[stats.term_ids].astype(np.float64) * tfc).astype(np.float32)
    order = np.argsort((stats.term_ids.astype(np.int64) << 32) | posting_rows, kind="stable")
    indptr = np.zeros(n_terms + 1, np.int64)
    np.cumsum(frequencies, out=indptr[1:])
    folder.mkdir()
    for name, array in (("data", scores[order]), ("indices", posting_rows[order].astype(np.int32)),
                        ("indptr", indptr)):
        with open(folder / f"{name}.csc.index.npy", "wb") as f:
            np.save(f, array)
    vocab = {term: i for i, term in enumerate(stats.vocab)}
    vocab.setdefault("", n_terms)  # bm25s's empty token, one past the scored terms
    (folder / "vocab.index.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    params = {"k1": K1, "b": B, "delta": 0.5, "method": "lucene", "idf_method": "lucene", "dtype": "float32",
              "int_dtype": "int32", "num_docs": n_rows, "version": bm25s.__version__, "backend": "numpy"}
    (folder / "params.index.json").write_text(json.dumps(params, indent=1))
    stats.save(folder)
    return True
