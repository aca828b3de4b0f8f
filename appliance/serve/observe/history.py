"""The last minutes of the figures /metrics exports, kept in the process for the console's Overview charts.

Prometheus keeps history only where somebody scrapes it, and an air-gapped box often has no Prometheus. So every
request record, refusal and engine sample that `Metrics` counts also lands here, in fixed steps (5 s by default)
of a ring that holds the last `keep_s` seconds. A step keeps per-stage latencies as counts over the same buckets
as the Prometheus histograms, so its p50/p99 are what `histogram_quantile` would say of the same data; a step is
a few kilobytes, whatever the request rate. The console's own overview polls are not traffic and are left out.

Steps are counted on the monotonic clock (a wall-clock step back or forth cannot misplace them) and shown with
the wall time of their start.
"""
from __future__ import annotations

import bisect
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

STEP_S = 5.0
KEEP_S = 600.0
UNCOUNTED = frozenset({"overview"})  # the console polling the figures is not part of them


@dataclass(slots=True)
class _Step:
    index: int  # monotonic seconds // step
    requests: Counter = field(default_factory=Counter)  # endpoint -> answered requests (any status)
    errors: int = 0  # status >= 500
    degraded: int = 0
    rejected: Counter = field(default_factory=Counter)  # reason -> refusals
    cache: Counter = field(default_factory=Counter)  # layer ("exact", "semantic", "none") -> answers
    stages: dict[str, list[int]] = field(default_factory=dict)  # stage -> counts per latency bucket
    ttft: dict[str, list[int]] = field(default_factory=dict)  # engine -> counts per bucket


@dataclass(frozen=True, slots=True)
class Point:
    """One step of the series, as the Overview draws it."""
    t: float
    requests: int
    rps: float
    errors: int
    degraded: int
    rejected: int
    p50_ms: dict[str, float]  # stage -> ms (stages with samples in the step only)
    p99_ms: dict[str, float]


@dataclass(frozen=True, slots=True)
class Window:
    """Totals over the whole window kept."""
    seconds: float
    requests: int
    degraded: int
    rejected: dict[str, int]
    cache: dict[str, int]
    ttft_ms: dict[str, tuple[float, float]]  # engine -> (p50, p99)


class History:
    def __init__(self, buckets: Iterable[float], step_s: float = STEP_S, keep_s: float = KEEP_S,
                 clock: Callable[[], float] = time.monotonic, wall_offset: float | None = None):
        self.bounds = tuple(buckets)  # upper bounds in seconds, as the Prometheus histograms' buckets
        self.step_s, self.clock = step_s, clock
        self.wall_offset = time.time() - clock() if wall_offset is None else wall_offset  # clock -> Unix time
        self.size = max(1, math.ceil(keep_s / step_s))  # steps in the window
        self._steps: deque[_Step] = deque(maxlen=self.size)
        self._lock = threading.Lock()  # requests finish on the event loop; engine samples may come from threads

    def request(self, endpoint: str, status: int, cache: str | None, degraded: bool,
                timings_ms: dict[str, float], answering: bool) -> None:
        if endpoint in UNCOUNTED:
            return
        with self._lock:
            step = self._step()
            step.requests[endpoint] += 1
            step.errors += status >= 500
            step.degraded += degraded
            if answering and status < 400:
                step.cache[cache or "none"] += 1
            for stage, ms in timings_ms.items():
                self._count(step.stages, stage, ms / 1000.0)

    def rejected(self, reason: str) -> None:
        with self._lock:
            self._step().rejected[reason] += 1

    def ttft(self, engine: str, seconds: float) -> None:
        with self._lock:
            self._count(self._step().ttft, engine, seconds)

    def series(self) -> list[Point]:
        """Every step of the window, oldest first, with empty steps where nothing happened; the last one is the
        step under way, its rate over the seconds it has had so far."""
        with self._lock:
            now = self.clock()
            current = self._index(now)
            steps = {s.index: s for s in self._steps}
            indices = range(current - self.size + 1, current + 1)
            elapsed = max(1.0, now - current * self.step_s)
            return [self._point(steps.get(i) or _Step(i), elapsed if i == current else self.step_s) for i in indices]

    def window(self) -> Window:
        requests, degraded = 0, 0
        rejected: Counter = Counter()
        cache: Counter = Counter()
        ttft: dict[str, list[int]] = {}
        with self._lock:  # a quiet box adds no steps: the ring may still hold ones older than the window
            oldest = self._index(self.clock()) - self.size + 1
            for s in (s for s in self._steps if s.index >= oldest):
                requests += sum(s.requests.values())
                degraded += s.degraded
                rejected.update(s.rejected)
                cache.update(s.cache)
                for engine, counts in s.ttft.items():
                    total = ttft.setdefault(engine, [0] * len(counts))
                    for i, n in enumerate(counts):
                        total[i] += n
        return Window(self.step_s * self.size, requests, degraded, dict(rejected), dict(cache),
                      {e: (self.quantile(c, 0.5), self.quantile(c, 0.99)) for e, c in ttft.items()})

    def quantile(self, counts: list[int], q: float) -> float:
        """In ms: linear within the bucket, as Prometheus' histogram_quantile; past the last bound, that bound."""
        total = sum(counts)
        if not total:
            return 0.0
        rank, seen = q * total, 0
        for i, n in enumerate(counts):
            if seen + n >= rank and n:
                if i >= len(self.bounds):
                    return self.bounds[-1] * 1000.0
                low = self.bounds[i - 1] if i else 0.0
                return round((low + (self.bounds[i] - low) * (rank - seen) / n) * 1000.0, 3)
            seen += n
        return self.bounds[-1] * 1000.0

    def _point(self, s: _Step, seconds: float) -> Point:
        n = sum(s.requests.values())
        start = round(s.index * self.step_s + self.wall_offset, 3)
        return Point(start, n, round(n / seconds, 3), s.errors, s.degraded, sum(s.rejected.values()),
                     {k: self.quantile(c, 0.5) for k, c in s.stages.items()},
                     {k: self.quantile(c, 0.99) for k, c in s.stages.items()})

    def _count(self, table: dict[str, list[int]], key: str, seconds: float) -> None:
        counts = table.get(key)
        if counts is None:
            counts = table[key] = [0] * (len(self.bounds) + 1)
        counts[bisect.bisect_left(self.bounds, seconds)] += 1  # a bound is inclusive, as Prometheus' `le`

    def _index(self, t: float) -> int:
        return math.floor(t / self.step_s)

    def _step(self) -> _Step:
        index = self._index(self.clock())
        if not self._steps or self._steps[-1].index < index:
            self._steps.append(_Step(index))
        return self._steps[-1]
