"""What the soak records: per window, every status each kind of request got and the normal client's latency;
every few seconds, the server's open files and memory."""
from __future__ import annotations

import time
from collections import Counter, defaultdict

import httpx
import numpy as np


class Recorder:
    def __init__(self, window_s: float):
        self.window_s = window_s
        self.started = time.monotonic()
        self.windows: list[dict] = []
        self.samples: list[dict] = []
        self._window_start = self.started
        self._status: dict[str, Counter] = defaultdict(Counter)
        self._latency: dict[str, list[float]] = defaultdict(list)

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 1)

    async def timed(self, kind: str, request) -> None:
        """Await one request of the normal client; its status (or the error's name) and latency are recorded."""
        started = time.perf_counter()
        try:
            reply = await request
            outcome = str(reply.status_code)
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
        self.record(kind, outcome, (time.perf_counter() - started) * 1000)

    def record(self, kind: str, outcome: str, ms: float | None = None) -> None:
        self._roll()
        self._status[kind][outcome] += 1
        if ms is not None:
            self._latency[kind].append(ms)

    def sample(self, values: dict) -> None:
        self._roll()
        self.samples.append(values)

    def _roll(self) -> None:
        while time.monotonic() - self._window_start >= self.window_s:
            self.close_window()

    def close_window(self) -> None:
        window = {"start_s": round(self._window_start - self.started, 1), "status": {}, "latency_ms": {}}
        for kind, counts in sorted(self._status.items()):
            window["status"][kind] = dict(counts)
        for kind, values in sorted(self._latency.items()):
            window["latency_ms"][kind] = {"n": len(values), "p50": round(float(np.percentile(values, 50)), 1),
                                          "p99": round(float(np.percentile(values, 99)), 1)}
        self.windows.append(window)
        self._window_start += self.window_s
        self._status, self._latency = defaultdict(Counter), defaultdict(list)
