"""Closed-loop concurrent clients and the statistics every system is reported with (shared by both servers)."""
from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

import numpy as np


def pct(samples: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.asarray(samples, dtype=np.float64), q)), 1) if samples else None


async def closed_loop(send: Callable[[int], Awaitable[dict]], clients: int, requests: int) -> dict:
    """`clients` asyncio clients, each sending its next request as soon as its previous one is answered, until
    `requests` have been sent in all. `send(i)` serves request i and returns at least {"tokens": n} (plus
    optionally "ttft_ms"). Latency is from the client's send to the complete answer."""
    counter = iter(range(requests))
    latencies, ttfts, tokens = [], [], []

    async def client() -> None:
        for i in counter:
            start = time.perf_counter()
            out = await send(i)
            latencies.append((time.perf_counter() - start) * 1000)
            tokens.append(out["tokens"])
            if out.get("ttft_ms") is not None:
                ttfts.append(out["ttft_ms"])

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - start
    return summarise(latencies, tokens, wall, clients, ttfts)


def summarise(latencies_ms: list[float], tokens: list[int], wall_s: float, clients: int,
              ttfts_ms: list[float] | None = None) -> dict:
    out = {"clients": clients, "requests": len(latencies_ms), "wall_s": round(wall_s, 2),
           "output_tokens": int(sum(tokens)), "output_tok_s": round(sum(tokens) / wall_s, 1),
           "req_s": round(len(latencies_ms) / wall_s, 3),
           "p50_ms": pct(latencies_ms, 50), "p99_ms": pct(latencies_ms, 99), "max_ms": pct(latencies_ms, 100)}
    if ttfts_ms:
        out["ttft_p50_ms"], out["ttft_p99_ms"] = pct(ttfts_ms, 50), pct(ttfts_ms, 99)
    return out


def requests_for(clients: int, per_client: int, minimum: int) -> int:
    """A whole number of rounds (every client sends the same number of requests), at least `minimum`."""
    rounds = max(per_client, -(-minimum // clients))
    return clients * rounds
