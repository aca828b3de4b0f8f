"""The stages of a request, one vocabulary for timings, metrics and spans, and the per-request record of them.

Every module that measures a stage names it by `Stage`; `/metrics` has one histogram series per member and the
spans are named after them, so a stage measured anywhere is exported everywhere (an unknown name cannot exist).
"""
from __future__ import annotations

import time
from enum import StrEnum


class Stage(StrEnum):
    REWRITE = "rewrite"  # a follow-up made standalone (rewritten by an engine, or expanded)
    EXACT_CACHE = "exact_cache"
    ENCODE = "encode"
    SEMANTIC_CACHE = "semantic_cache"
    PARTITIONS = "partitions"
    BM25 = "bm25"
    ANN = "ann"
    FUSE = "fuse"
    LATE_INTERACTION = "late_interaction"
    ROUTE = "route"
    PROMPT = "prompt"
    ANSWERABLE = "answerable"  # the model asked whether the passages state the answer (generate.decline_above)
    QUEUE_WAIT = "queue_wait"
    TTFT = "ttft"
    GENERATION = "generation"
    CHECK = "check"  # the answer checked against its passages (or, extractive, made from them)
    TOTAL = "total"


def ms_since(started: float) -> float:
    """Milliseconds since `started` (a `time.perf_counter()` value), to the microsecond."""
    return round((time.perf_counter() - started) * 1000, 3)


class Timings:
    """Milliseconds per stage of one request; a stage measured twice (two encodes) adds up."""

    __slots__ = ("_ms",)

    def __init__(self, ms: dict[Stage, float] | None = None) -> None:
        self._ms: dict[Stage, float] = dict(ms or {})

    def add(self, stage: Stage, ms: float) -> None:
        self._ms[stage] = round(self._ms.get(stage, 0.0) + ms, 3)

    def set(self, stage: Stage, ms: float) -> None:
        self._ms[stage] = round(ms, 3)

    def since(self, stage: Stage, started: float) -> None:
        """Add the time since `started` (a `time.perf_counter()` value) to `stage`."""
        self.add(stage, (time.perf_counter() - started) * 1000)

    def merge(self, other: "Timings") -> None:
        for stage, ms in other.items():
            self.add(stage, ms)

    def get(self, stage: Stage) -> float | None:
        return self._ms.get(stage)

    def items(self):
        return self._ms.items()

    def copy(self) -> "Timings":
        return Timings(self._ms)

    def as_dict(self) -> dict[str, float]:
        """Stage name -> ms, in the order measured (what `timings_ms` in a response shows)."""
        return {stage.value: ms for stage, ms in self._ms.items()}

    def __contains__(self, stage: object) -> bool:
        return stage in self._ms

    def __repr__(self) -> str:
        return f"Timings({self.as_dict()})"
