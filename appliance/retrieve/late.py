"""ColBERT-style late interaction: score = sum over query tokens of the best cosine with any passage token.

Token vectors were computed at ingest, so query time costs one matrix product over the candidates' tokens.
"""
from __future__ import annotations

import numpy as np

from ..index import TokenBlock


def maxsim(query_tokens: np.ndarray, passages: TokenBlock) -> np.ndarray:
    """MaxSim of one query (q, d) against passages' token vectors stacked (t, d); `passages.lengths` says how many
    tokens belong to each passage, in order. Vectors are L2-normalised."""
    lengths = passages.lengths
    if not len(lengths):
        return np.zeros(0, np.float32)
    sims = query_tokens.astype(np.float32, copy=False) @ passages.vectors.T  # (q, total tokens)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    best = np.maximum.reduceat(sims, starts, axis=1)  # (q, passages)
    return best.sum(axis=0) / max(len(query_tokens), 1)
