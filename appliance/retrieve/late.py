"""ColBERT-style late interaction: score = sum over query tokens of the best cosine with any passage token.

Token vectors were computed at ingest, so query time costs one matrix product over the candidates' tokens.
"""
from __future__ import annotations

import numpy as np

from ..index import TokenBlock, TokenCodes

BLOCK_TOKENS = 512  # decoded at a time: 768 KiB of float32 at 384-d, within a core's cache (measured 256 to 2048)


def maxsim(query_tokens: np.ndarray, passages: TokenBlock) -> np.ndarray:
    """MaxSim of one query (q, d) against passages' token vectors stacked (t, d); `passages.lengths` says how many
    tokens belong to each passage, in order. Vectors are L2-normalised."""
    if not len(passages.lengths):
        return np.zeros(0, np.float32)
    sims = query_tokens.astype(np.float32, copy=False) @ passages.vectors.T  # (q, total tokens)
    return _best_per_passage(sims, passages.lengths)


def maxsim_stored(query_tokens: np.ndarray, passages: TokenCodes) -> np.ndarray:
    """`maxsim` over passages' token vectors as stored, decoded a cache-sized block at a time (the similarities,
    (q, total tokens), are all that is kept whole)."""
    if not len(passages.lengths):
        return np.zeros(0, np.float32)
    query = query_tokens.astype(np.float32, copy=False)
    sims = np.empty((len(query), len(passages.first)), np.float32)
    for part, vectors, norms in passages.blocks(BLOCK_TOKENS):
        block = sims[:, part]
        np.matmul(query, vectors.T, out=block)
        if norms is not None:
            block /= norms
    return _best_per_passage(sims, passages.lengths)


def _best_per_passage(sims: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    best = np.maximum.reduceat(sims, starts, axis=1)  # (q, passages)
    return best.sum(axis=0) / max(len(sims), 1)
