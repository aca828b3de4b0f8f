"""Re-indexes asked of a running server: queued, run in the background one at a time, tenants taking turns.

A re-index encodes every chunk of a partition again (minutes for a big one), so a request queues it and returns,
and the client asks for its state. One runs at a time, because two would share the same cores and both end later;
the next is the oldest queued one of the tenant served least recently (`Turns`), so a tenant that queues many
cannot keep the others waiting (each tenant's share of the queue is bounded too). Searches read the partition's previous
version until the new one is swapped in. A server that stops meanwhile loses nothing: a new language is in the
store before the build starts, so the next boot finds an index built by another encoder or for another language
and builds it again (a re-index in the same language, or one still queued, is simply not done).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from enum import StrEnum

from .records import PartitionInfo
from .service import Library, check_reindex

log = logging.getLogger("appliance")
KEEP_JOBS = 256  # the last re-index of this many partitions can be asked about (queued ones are always kept)


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(slots=True, frozen=True)
class ReindexJob:
    tenant: str
    partition: str
    language: str | None  # asked for (auto: decided again from the stored text); None: the partition keeps its own
    tokens_only: bool  # only re-code int8 token vectors (no text encoded again)
    asked_at: float  # epoch seconds
    state: JobState = JobState.QUEUED
    started_at: float | None = None
    ended_at: float | None = None
    result: PartitionInfo | None = None  # the partition once done: its language, encoder and versions
    error: str | None = None  # why it failed

    @property
    def pending(self) -> bool:
        return self.state in (JobState.QUEUED, JobState.RUNNING)


class ReindexPending(RuntimeError):
    """The partition already has a re-index queued or running."""

    def __init__(self, pending: ReindexJob):
        super().__init__(f"partition {pending.partition!r} already has a re-index {pending.state.value}")
        self.pending = pending


class ReindexQueueFull(RuntimeError):
    """The tenant's share of the queue, or the whole queue, is full."""


class ReindexerClosed(RuntimeError):
    """The server is stopping: nothing more starts."""


class Turns:
    """Whose queued re-index starts next: the tenant served least recently. A tenant that joins the queue counts as
    served just before the current turn, so it goes behind those waiting already but before the one whose job is
    running; a tenant that comes and goes can never overtake one that has been waiting (a tenant new to the
    queue is not "never served", or two taking turns could keep a third waiting for ever)."""

    def __init__(self) -> None:
        self._turn = 0
        self._last: dict[str, float] = {}  # tenants with a job queued or running: when they were last served

    def join(self, tenant: str) -> None:
        self._last.setdefault(tenant, self._turn - 0.5)

    def pick(self, queued: list[ReindexJob]) -> ReindexJob:
        """The oldest queued job of the tenant served least recently."""
        return min(queued, key=lambda j: self._last[j.tenant])  # min keeps the first of equals: the oldest

    def started(self, job: ReindexJob, still_queued: list[ReindexJob]) -> None:
        self._turn += 1
        waiting = {j.tenant for j in still_queued}
        self._last = {t: n for t, n in self._last.items() if t in waiting}  # bounded by the queue
        self._last[job.tenant] = self._turn

    def copy(self) -> "Turns":
        other = Turns()
        other._turn, other._last = self._turn, dict(self._last)
        return other


class Reindexer:
    def __init__(self, library: Library, per_tenant: int, queued: int, keep: int = KEEP_JOBS):
        self._library, self._per_tenant, self._max_queued, self._keep = library, per_tenant, queued, keep
        self._jobs: OrderedDict[tuple[str, str], ReindexJob] = OrderedDict()
        self._queued: list[ReindexJob] = []  # in the order asked
        self._running: ReindexJob | None = None
        self._task: asyncio.Task | None = None
        self._turns = Turns()
        self._closed = False

    def start(self, tenant: str, partition: str, language: str | None = None,
              tokens_only: bool = False) -> ReindexJob:
        """Queue a re-index of the partition (it starts at once when none is running); raises ValueError (arguments
        that cannot go together or a language that is none), LookupError (no such partition of that tenant),
        ReindexPending, ReindexQueueFull or ReindexerClosed."""
        if self._closed:
            raise ReindexerClosed("the server is stopping")
        check_reindex(language, tokens_only)
        if not any(p.name == partition for p in self._library.partitions(tenant)):
            raise LookupError(f"no partition {partition!r} for tenant {tenant!r}")
        last = self._jobs.get((tenant, partition))
        if last is not None and last.pending:
            raise ReindexPending(last)
        pending = [j for j in (self._running, *self._queued) if j is not None]
        mine = sum(j.tenant == tenant for j in pending)
        if mine >= self._per_tenant:
            raise ReindexQueueFull(f"tenant {tenant!r} has {mine} re-indexes queued or running, its most")
        if len(self._queued) >= self._max_queued:
            raise ReindexQueueFull(f"{len(self._queued)} re-indexes are queued on this box, its most")
        job = ReindexJob(tenant, partition, language, tokens_only, time.time())
        self._turns.join(tenant)
        self._queued.append(job)
        self._record(job)
        self._start_next()
        return self._jobs[(tenant, partition)]

    def job(self, tenant: str, partition: str) -> ReindexJob | None:
        """The partition's last re-index since the server started (None: none)."""
        return self._jobs.get((tenant, partition))

    def ahead(self, job: ReindexJob) -> int:
        """How many re-indexes end before this queued one starts (the running one included), turns as they stand."""
        if job.state is not JobState.QUEUED:
            return 0
        queued, turns = list(self._queued), self._turns.copy()
        count = int(self._running is not None)
        while queued:
            picked = turns.pick(queued)
            if (picked.tenant, picked.partition) == (job.tenant, job.partition):
                return count
            queued.remove(picked)
            turns.started(picked, queued)
            count += 1
        return count

    def _start_next(self) -> None:
        if self._closed or self._running is not None or not self._queued:
            return
        job = self._turns.pick(self._queued)
        self._queued.remove(job)
        self._turns.started(job, self._queued)
        job = replace(job, state=JobState.RUNNING, started_at=time.time())
        self._record(job)
        self._running = job
        self._task = asyncio.get_running_loop().create_task(self._run(job), name=f"reindex {job.tenant}/"
                                                                                 f"{job.partition}")

    async def _run(self, job: ReindexJob) -> None:
        log.info("partition %s/%s: re-index started (language %s%s)", job.tenant, job.partition,
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
        self._start_next()

    def _record(self, job: ReindexJob) -> None:
        key = (job.tenant, job.partition)
        self._jobs.pop(key, None)
        self._jobs[key] = job
        if len(self._jobs) > self._keep:  # forget the oldest ended ones; a queued or running one stays
            ended = [k for k, j in self._jobs.items() if not j.pending][:len(self._jobs) - self._keep]
            for k in ended:
                del self._jobs[k]

    async def close(self) -> None:
        """Stop the running re-index (shutting down): the next boot finishes what it changed; queued ones never
        started, so nothing of theirs was changed."""
        self._closed = True
        now = time.time()
        for job in self._queued:
            self._record(replace(job, state=JobState.FAILED, ended_at=now,
                                 error="the server stopped before it started"))
        self._queued.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

