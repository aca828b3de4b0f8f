"""Micro-batching: concurrent encode calls that arrive within a short window run as one batch in a worker thread.

One ONNX batch of 16 short queries costs little more than one query, so under load coalescing multiplies
throughput while adding at most `window` of latency. The queue is bounded: past it, callers get `EncoderBusy`
at once instead of waiting behind an ever longer line.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass, field

import numpy as np

from .base import Encoded, Encoder


class EncoderBusy(RuntimeError):
    """The encoder queue is full; the caller should shed load (HTTP 503)."""


@dataclass(slots=True)
class BatchStats:
    batches: int = 0
    items: int = 0
    largest: int = 0
    last_batch_ms: float = 0.0
    sizes: list[int] = field(default_factory=list)

    def record(self, size: int, ms: float) -> None:
        self.batches += 1
        self.items += size
        self.largest = max(self.largest, size)
        self.last_batch_ms = ms


@dataclass(slots=True)
class Query:
    """One text's vectors, as returned to a single caller."""
    dense: np.ndarray
    tokens: np.ndarray | None
    unknown: float = 0.0  # share of the text's word pieces the encoder could not represent (see Encoded)


class MicroBatcher:
    def __init__(self, encoder: Encoder, window_ms: float = 5.0, max_batch: int = 32, queue_size: int = 1024):
        self.encoder = encoder
        self.window = window_ms / 1000.0
        self.max_batch = max_batch
        self.queue_size = queue_size
        self.stats = BatchStats()
        # One thread for queries: ONNX Runtime already uses the configured intra-op threads for each batch.
        # Bulk (ingest) batches take seconds, so they run on a thread of their own: a query never waits behind one.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode")
        self._bulk = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode-bulk")
        self._queue: asyncio.Queue[tuple[str, asyncio.Future]] | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        if self._task is None:
            self._queue = asyncio.Queue(maxsize=self.queue_size)
            self._task = asyncio.create_task(self._run(), name="encoder-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._bulk.shutdown(wait=False, cancel_futures=True)

    async def encode(self, text: str) -> Query:
        if self._queue is None:
            await self.start()
        assert self._queue is not None
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait((text, future))
        except asyncio.QueueFull:
            raise EncoderBusy(f"encoder queue is full ({self.queue_size} waiting)") from None
        return await future

    async def encode_many(self, texts: list[str]) -> Encoded:
        """A large batch (ingest) on the bulk thread, bypassing the query window and queue."""
        return await asyncio.get_running_loop().run_in_executor(self._bulk, self.encoder.encode, texts)

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            # A lone request goes at once: waiting only pays when others are arriving (the queue was not empty).
            deadline = loop.time() + (self.window if len(batch) > 1 else 0.0)
            while len(batch) < self.max_batch:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                except asyncio.TimeoutError:
                    break
            batch = [(t, f) for t, f in batch if not f.cancelled()]
            if not batch:
                continue
            started = time.perf_counter()
            try:
                result = await loop.run_in_executor(self._executor, self.encoder.encode, [t for t, _ in batch])
            except Exception as exc:  # hand the failure to every waiter; the loop itself must survive
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.stats.record(len(batch), (time.perf_counter() - started) * 1000)
            for row, (_, future) in enumerate(batch):
                if not future.done():
                    tokens = result.tokens[row] if result.tokens is not None else None
                    unknown = float(result.unknown[row]) if result.unknown is not None else 0.0
                    future.set_result(Query(result.dense[row], tokens, unknown))
