"""Searches over partitions of several languages (and so encoders): one group per encoder and language, each
searched as a partition set of its own, their lists fused by rank.

Cosine similarities of two encoders live on unrelated scales, and BM25 over English stems and over jieba words
nearly so, so the groups' lists are fused by rank (weighted RRF), never by score. A group whose language is not
the question's gets `other_language_weight`: its documents follow the question's own language's rather than
interleave with them, and still come up where that language has nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .fusion import rrf
from .hybrid import Hit, Target

NEUTRAL = "multi"  # a partition (or question) in both languages weighs the same against any other


@dataclass(slots=True, frozen=True)
class TargetGroup:
    encoder: str
    language: str
    targets: list[Target]


def group_targets(targets: list[Target]) -> list[TargetGroup]:
    """Targets by (encoder of their current version, partition language), in the order first seen."""
    groups: dict[tuple[str, str], list[Target]] = {}
    for target in targets:
        groups.setdefault((target.snapshot.encoder, target.language), []).append(target)
    return [TargetGroup(encoder, language, members) for (encoder, language), members in groups.items()]


def language_weight(group_language: str, question_language: str, other_weight: float) -> float:
    if NEUTRAL in (group_language, question_language) or group_language == question_language:
        return 1.0
    return other_weight


def fuse_groups(lists: list[list[Hit]], weights: list[float], k: int, rrf_k: int) -> list[Hit]:
    """One list of `k` from the groups' own ranked lists; each hit's `score` becomes the fused one (what the order
    is by), its `rrf` and `late` stay its group's."""
    by_key = {(group, hit.partition, hit.chunk.chunk_id): hit for group, hits in enumerate(lists) for hit in hits}
    ranked = [[(group, hit.partition, hit.chunk.chunk_id) for hit in hits] for group, hits in enumerate(lists)]
    fused = rrf(ranked, rrf_k, weights)[:k]
    return [replace(by_key[key], score=score) for key, score in fused]
