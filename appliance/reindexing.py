"""Re-indexes asked of a running server: in the background, one at a time on a box, each partition's last one kept.

A re-index encodes every chunk of a partition again (minutes for a big one), so a request starts it and returns, and
the client asks for its state. One at a time, because two would share the same cores and both end later; searches
read the partition's previous version until the new one is swapped in. A server that stops meanwhile loses nothing:
a new language is in the store before the build starts, so the next boot finds an index built by another encoder or
for another language and builds it again (a re-index in the same language is simply not done).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from enum import StrEnum

from .library import Library, PartitionInfo, check_reindex

log = logging.getLogger("appliance")
KEEP_JOBS = 256  # the last re-index of this many partitions can be asked about


class JobState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(slots=True, frozen=True)
class ReindexJob:
    tenant: str
    partition: str
    language: str | None  # asked for (auto: decided again from the stored text); None: the partition keeps its own
    tokens_only: bool  # only re-code int8 token vectors (no text encoded again)
    started_at: float  # epoch seconds
    state: JobState = JobState.RUNNING
    ended_at: float | None = None
    result: PartitionInfo | None = None  # the partition once done: its language, encoder and versions
    error: str | None = None  # why it failed


class ReindexRunning(RuntimeError):
    """Another re-index is running on this box."""

    def __init__(self, running: ReindexJob):
        super().__init__(f"a re-index of {running.tenant}/{running.partition} is running")
        self.running = running


class Reindexer:
    def __init__(self, library: Library, keep: int = KEEP_JOBS):
        self._library, self._keep = library, keep
        self._jobs: OrderedDict[tuple[str, str], ReindexJob] = OrderedDict()
        self._running: ReindexJob | None = None
        self._task: asyncio.Task | None = None

    def start(self, tenant: str, partition: str, language: str | None = None,
              tokens_only: bool = False) -> ReindexJob:
        """Start re-indexing the partition; raises ValueError (arguments that cannot go together or a language
        that is none), LookupError (no such partition of that tenant) or ReindexRunning."""
        check_reindex(language, tokens_only)
        if not any(p.name == partition for p in self._library.partitions(tenant)):
            raise LookupError(f"no partition {partition!r} for tenant {tenant!r}")
        if self._running is not None:
            raise ReindexRunning(self._running)
        job = ReindexJob(tenant, partition, language, tokens_only, time.time())
        self._record(job)
        self._running = job
        self._task = asyncio.get_running_loop().create_task(self._run(job), name=f"reindex {tenant}/{partition}")
        return job

    def job(self, tenant: str, partition: str) -> ReindexJob | None:
        """The partition's last re-index since the server started (None: none)."""
        return self._jobs.get((tenant, partition))

    async def _run(self, job: ReindexJob) -> None:
        log.info("partition %s/%s: re-index asked (language %s%s)", job.tenant, job.partition,
                 job.language or "kept", ", token vectors only" if job.tokens_only else "")
        try:
            await self._library.reindex(job.tenant, job.partition, job.language, job.tokens_only)
        except asyncio.CancelledError:
            self._end(replace(job, state=JobState.FAILED, error="the server stopped first"))
            raise
        except Exception as exc:  # searches keep the previous version; the next write or boot builds again
            log.error("partition %s/%s: re-index failed: %s", job.tenant, job.partition, exc, exc_info=exc)
            self._end(replace(job, state=JobState.FAILED, error=f"{type(exc).__name__}: {exc}"))
        else:
            after = next((p for p in self._library.partitions(job.tenant) if p.name == job.partition), None)
            self._end(replace(job, state=JobState.DONE, result=after))

    def _end(self, job: ReindexJob) -> None:
        self._record(replace(job, ended_at=time.time()))
        self._running = None

    def _record(self, job: ReindexJob) -> None:
        key = (job.tenant, job.partition)
        self._jobs.pop(key, None)
        self._jobs[key] = job
        while len(self._jobs) > self._keep:
            self._jobs.popitem(last=False)

    async def close(self) -> None:
        """Stop a running re-index (shutting down): the next boot finishes what it changed."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
