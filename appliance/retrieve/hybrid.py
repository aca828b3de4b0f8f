"""Hybrid search over a set of partition snapshots: BM25 and HNSW in parallel, RRF, then late interaction.

Both libraries release the GIL in their heavy parts, so the two lists (and every partition's) are computed at the
same time on the worker threads; the request waits for the slower list, not the sum of all.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from ..config import RetrieveSettings
from ..encode import CharVectors, char_maxsim
from ..index import ChunkInfo, PartitionSnapshot
from ..timings import Stage, Timings
from .fusion import rrf
from .late import maxsim_stored


@dataclass(slots=True, frozen=True)
class Target:
    """One partition to search: its name, the snapshot to read, its language (en, zh, multi), and its own weight of
    the vector list in fusion (None: the language's, from the settings)."""
    name: str
    snapshot: PartitionSnapshot
    language: str = "multi"
    dense_weight: float | None = None


@dataclass(slots=True)
class Hit:
    partition: str
    chunk: ChunkInfo
    score: float  # what the order is by: MaxSim for the re-ranked head, the RRF score otherwise
    rrf: float
    bm25_rank: int | None
    ann_rank: int | None
    late: float | None = None


@dataclass(slots=True, frozen=True)
class CharLate:
    """Late interaction for a Chinese group: the question's characters against its candidates', by vectors that
    `chars` looks up; the re-rank blends MaxSim's order (weight `weight`) with the fused one."""
    chars: CharVectors
    question: str
    weight: float


class HybridSearcher:
    def __init__(self, params: RetrieveSettings, executor: Executor):
        self.params = params
        self.executor = executor

    async def search(self, targets: list[Target], dense: np.ndarray, query_tokens: np.ndarray | None,
                     terms: list[str], k: int, timings: Timings, late: bool | None = None,
                     mode: str = "hybrid", dense_weight: float | None = None,
                     chars: CharLate | None = None) -> list[Hit]:
        """`mode`: "hybrid" (both lists fused), or "bm25" / "dense" alone (for evaluation and debugging);
        `dense_weight`: the vector list's weight in the fusion (None: `retrieve.dense_weight`), for each target
        that has none of its own (a partition's own weights its chunks in the same fusion); `chars`: the
        character late interaction of targets without token vectors. The targets share one encoder: their
        cosines are merged by score."""
        if not targets:
            return []
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        late = self.params.late_interaction if late is None else late
        by_tokens = late and query_tokens is not None and all(t.snapshot.has_token_vectors for t in targets)
        by_chars = late and not by_tokens and chars is not None and chars.weight > 0
        fetch = max(k * self.params.overfetch, self.params.late_candidates if by_tokens or by_chars else 0)
        bm25_list, ann_list = await self._lists(targets, dense, terms, fetch, mode, timings)

        started = time.perf_counter()
        dense_weight = self.params.dense_weight if dense_weight is None else dense_weight
        own = [dense_weight if t.dense_weight is None else t.dense_weight for t in targets]  # by target number
        ann_weight = dense_weight if all(w == dense_weight for w in own) else (lambda key: own[key[0]])
        lists = [(ranked, weight) for ranked, weight in ((bm25_list, 1.0), (ann_list, ann_weight)) if ranked]
        fused = rrf([ranked for ranked, _ in lists], self.params.rrf_k, [weight for _, weight in lists])
        bm25_rank = {key: rank for rank, key in enumerate(bm25_list, 1)}
        ann_rank = {key: rank for rank, key in enumerate(ann_list, 1)}
        timings.since(Stage.FUSE, started)

        # a hit's text comes from a memory map: on a cold partition each may fault on the disk, so off the loop
        # (in the late stage's own thread job when there is one: a hand-off costs ~0.1 ms)
        if by_tokens:
            picked, chunks = await self._rerank_by_tokens(targets, query_tokens, fused, k, timings)
        else:
            if by_chars:
                picked = await self._rerank_by_chars(targets, chars, fused, k, timings)
            else:
                picked = [(key, score, None, score) for key, score in fused[:k]]
            chunks = await asyncio.get_running_loop().run_in_executor(
                self.executor, _chunks, targets, [key for key, *_ in picked])
        return [Hit(partition=targets[target_no].name, chunk=chunk, score=score, rrf=fused_score,
                    bm25_rank=bm25_rank.get((target_no, row)), ann_rank=ann_rank.get((target_no, row)), late=late_score)
                for ((target_no, row), fused_score, late_score, score), chunk in zip(picked, chunks)]

    async def _lists(self, targets: list[Target], dense: np.ndarray, terms: list[str], fetch: int, mode: str,
                     timings: Timings) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """BM25's and the vectors' ranked lists over all targets, every partition's searched at once."""
        loop = asyncio.get_running_loop()
        jobs = []
        for t in targets:
            if mode == "dense":
                jobs.append(_done(_empty_list()))
            else:
                jobs.append(loop.run_in_executor(self.executor, _timed, t.snapshot.bm25_search, terms, fetch))
            if mode == "bm25":
                jobs.append(_done(_empty_list()))
            else:
                jobs.append(loop.run_in_executor(self.executor, _timed, t.snapshot.ann, dense, fetch))
        results = await asyncio.gather(*jobs)
        timings.add(Stage.BM25, max(r[1] for r in results[0::2]))
        timings.add(Stage.ANN, max(r[1] for r in results[1::2]))
        return (_merge([(i, r[0]) for i, r in enumerate(results[0::2])], fetch),
                _merge([(i, r[0]) for i, r in enumerate(results[1::2])], fetch))

    async def _rerank_by_tokens(self, targets: list[Target], query_tokens: np.ndarray, fused: list, k: int,
                                timings: Timings) -> tuple[list[tuple], list[ChunkInfo]]:
        """The head of the fused list in MaxSim order; past it (k > late_candidates) the RRF order stands. With
        the picked hits' chunks, read in the same thread job."""
        candidates = fused[: self.params.late_candidates]
        (scores, order, chunks), ms = await asyncio.get_running_loop().run_in_executor(
            self.executor, _timed, _late_ranked, targets, query_tokens, [key for key, _ in candidates],
            [key for key, _ in fused[len(candidates):k]], k)
        timings.add(Stage.LATE_INTERACTION, ms)
        picked = [(candidates[i][0], candidates[i][1], float(scores[i]), float(scores[i])) for i in order]
        return picked + [(key, score, None, score) for key, score in fused[len(candidates):k]], chunks

    async def _rerank_by_chars(self, targets: list[Target], chars: CharLate, fused: list, k: int,
                               timings: Timings) -> list[tuple]:
        """The head of the fused list by RRF over (its fused rank, its character MaxSim rank); MaxSim alone
        ordered CMRC worse than BM25 (bench/results/languages.md), the blend better. The hit's `late` stays None:
        these scores are on no scale the relevance floor knows."""
        candidates = fused[: self.params.late_candidates]
        scores, ms = await asyncio.get_running_loop().run_in_executor(
            self.executor, _timed, _char_scores, targets, chars, [key for key, _ in candidates])
        timings.add(Stage.LATE_INTERACTION, ms)
        if scores is None:  # no content characters in the question: nothing to compare
            return [(key, score, None, score) for key, score in fused[:k]]
        late_rank = np.empty(len(scores), np.int64)
        late_rank[np.argsort(-scores, kind="stable")] = np.arange(1, len(scores) + 1)
        rrf_k = self.params.rrf_k
        blended = [chars.weight / (rrf_k + late_rank[i]) + (1 - chars.weight) / (rrf_k + i + 1)
                   for i in range(len(candidates))]
        order = sorted(range(len(candidates)), key=lambda i: -blended[i])[:k]
        picked = [(candidates[i][0], candidates[i][1], None, blended[i]) for i in order]
        # past the head, as if each came after every candidate by MaxSim: the scores keep falling with the order
        last = chars.weight / (rrf_k + len(candidates) + 1)
        return picked + [(key, score, None, (1 - chars.weight) / (rrf_k + i + 1) + last)
                         for i, (key, score) in enumerate(fused[len(candidates):k], len(candidates))]


def _merge(per_target: list[tuple[int, tuple[np.ndarray, np.ndarray]]], limit: int) -> list[tuple[int, int]]:
    """One ranked list over all partitions, by score (cosine is comparable across partitions; BM25 nearly so)."""
    items = [(float(score), target, int(row)) for target, (rows, scores) in per_target
             for row, score in zip(rows, scores)]
    items.sort(key=lambda x: x[0], reverse=True)
    return [(target, row) for _, target, row in items[:limit]]


def _late_scores(targets: list[Target], query_tokens: np.ndarray, keys: list[tuple[int, int]]) -> np.ndarray:
    scores = np.zeros(len(keys), np.float32)
    by_target: dict[int, list[int]] = {}
    for position, (target_no, _) in enumerate(keys):
        by_target.setdefault(target_no, []).append(position)
    rows = {target_no: [keys[p][1] for p in positions] for target_no, positions in by_target.items()}
    for target_no, its_rows in rows.items():  # every row's reads issued before the first is waited for
        targets[target_no].snapshot.will_need_tokens(its_rows)
    for target_no, positions in by_target.items():
        scores[positions] = maxsim_stored(query_tokens, targets[target_no].snapshot.token_codes(rows[target_no]))
    return scores


def _late_ranked(targets: list[Target], query_tokens: np.ndarray, keys: list[tuple[int, int]],
                 past_head: list[tuple[int, int]], k: int) -> tuple[np.ndarray, np.ndarray, list[ChunkInfo]]:
    """The candidates' MaxSim scores, the best k's positions, and the chunks of those then of `past_head`."""
    scores = _late_scores(targets, query_tokens, keys)
    order = np.argsort(-scores, kind="stable")[:k]
    return scores, order, _chunks(targets, [keys[i] for i in order] + past_head)


def _chunks(targets: list[Target], keys: list[tuple[int, int]]) -> list[ChunkInfo]:
    return [targets[target_no].snapshot.chunk(row) for target_no, row in keys]


def _char_scores(targets: list[Target], chars: CharLate, keys: list[tuple[int, int]]) -> np.ndarray | None:
    question = chars.chars.question(chars.question)
    if question is None:
        return None
    return char_maxsim(question, *chars.chars.passages([targets[t].snapshot.text(row) for t, row in keys]))


MODES = ("hybrid", "bm25", "dense")


def _empty_list():
    return (np.zeros(0, np.int64), np.zeros(0, np.float32)), 0.0


def _done(value) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _timed(fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    return result, (time.perf_counter() - started) * 1000
