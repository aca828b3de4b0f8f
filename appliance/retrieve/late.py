"""ColBERT-style late interaction: score = sum over query tokens of the best cosine with any passage token.

Token vectors were computed at ingest, so query time costs one matrix product over the candidates' tokens.
"""
from __future__ import annotations

import numpy as np


def maxsim(query_tokens: np.ndarray, codes: np.ndarray, scales: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """MaxSim of one query (q, d) against passages stacked as int8 codes (t, d) with per-token scales (t,);
    `lengths` says how many tokens belong to each passage, in order. Vectors are L2-normalised."""
    if not len(lengths):
        return np.zeros(0, np.float32)
    sims = query_tokens.astype(np.float32, copy=False) @ codes.astype(np.float32).T  # (q, total tokens)
    sims *= scales[None, :]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    best = np.maximum.reduceat(sims, starts, axis=1)  # (q, passages)
    return best.sum(axis=0) / max(len(query_tokens), 1)
