"""ColBERT-style late interaction: score = sum over query tokens of the best cosine with any passage token.

Token vectors were computed at ingest, so query time costs one matrix product over the candidates' tokens.
"""
from __future__ import annotations

import numpy as np


def maxsim(query_tokens: np.ndarray, passages: list[np.ndarray]) -> np.ndarray:
    """MaxSim of one query (q, d) against each passage (t_i, d); all vectors L2-normalised."""
    if not passages:
        return np.zeros(0, np.float32)
    lengths = np.fromiter((len(p) for p in passages), dtype=np.int64, count=len(passages))
    stacked = np.concatenate(passages).astype(np.float32, copy=False)
    sims = query_tokens.astype(np.float32, copy=False) @ stacked.T  # (q, total tokens)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    best = np.maximum.reduceat(sims, starts, axis=1)  # (q, passages)
    return best.sum(axis=0) / max(len(query_tokens), 1)
