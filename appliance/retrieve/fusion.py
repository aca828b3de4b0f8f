"""Reciprocal Rank Fusion: sum of 1 / (k + rank) over the ranked lists a candidate appears in.

It needs no score calibration, which matters here: BM25 scores and cosine similarities live on unrelated scales.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

Weight = float | Callable[[Hashable], float]  # one for the whole list, or one per item (its partition's)


def rrf(ranked_lists: Sequence[Sequence[Hashable]], k: int = 60,
        weights: Sequence[Weight] | None = None) -> list[tuple[Hashable, float]]:
    scores: dict[Hashable, float] = {}
    for ranked, weight in zip(ranked_lists, weights or [1.0] * len(ranked_lists)):
        weight_of = weight if callable(weight) else None
        for rank, item in enumerate(ranked, start=1):
            scores[item] = scores.get(item, 0.0) + (weight_of(item) if weight_of else weight) / (k + rank)
    return sorted(scores.items(), key=lambda pair: pair[1], reverse=True)
