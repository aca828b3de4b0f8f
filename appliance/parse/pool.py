"""Parsing in worker processes, bounded in time and memory, so a hostile file cannot hang or crash the server.

Up to `workers` long-lived processes, each fed one job at a time over a socket pair: the input goes as one
length-prefixed frame of raw bytes (never pickled, sent from the caller's buffer), the reply comes back pickled.
The event loop awaits replies with `loop.sock_recv_into`, a reader on the socket: a hung parser costs no thread.

"spawn", not fork: the server holds ONNX, vLLM and asyncio threads, and a forked child inherits their locks in
whatever state they are in. Not "forkserver": its process is a singleton shared with every other multiprocessing
user in the server (one preload list), it outlives `close()`, and once numpy/onnxruntime are preloaded it holds
their threads too. Spawn costs an interpreter start plus the parse imports per worker (0.7-1 s on a 2-core box),
paid at start and when a worker is replaced; planned recycling (`max_jobs`) warms the successor first.

Memory is bounded by RLIMIT_AS inside the worker (see worker.py); a parser that aborts on a failed allocation is
reported as CRASHED.

A caller cancelled while its job runs (the client went away) has that worker killed and replaced: letting it finish
would hold a slot for work nobody reads, or else run more than `workers` parses at once.
"""
from __future__ import annotations

import asyncio
import logging
import multiprocessing
import pickle
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import NoReturn

from .document import ParsedDocument, ParseError, ParseErrorCode, ParseLimits
from .turns import TenantSlots
from .wire import Died, ReplyTooLarge, receive, reply_limit, send
from .worker import READY, ParseFunction, check_job_reply
from .worker import main as _worker_main

log = logging.getLogger("appliance.parse")

_CONTEXT = multiprocessing.get_context("spawn")
_REAP_TIMEOUT_S = 10.0  # SIGKILL takes milliseconds; a process still there after this is stuck in the kernel


@dataclass(slots=True, frozen=True)
class PoolStats:
    workers: int  # live worker processes: idle, busy or starting
    busy: int
    waiting: int  # callers queued for a free worker
    jobs: int  # jobs finished, whatever the outcome
    timeouts: int
    crashes: int
    out_of_memory: int
    restarts: int  # workers replaced: timeout, crash, out of memory, cancelled job, or max_jobs reached
    start_s: float  # the latest worker start-up, spawn to warm


class _Worker:
    __slots__ = ("process", "sock", "jobs", "successor", "doomed")

    def __init__(self, process: BaseProcess, sock: socket.socket):
        self.process, self.sock, self.jobs = process, sock, 0
        self.successor: asyncio.Task[_Worker] | None = None  # started at max_jobs, while this one keeps serving
        self.doomed = False  # its successor is warm: it goes when its job ends


class ParserPool:
    """`await pool.parse(data)` runs `function(data, limits)` in a worker process (default: `parse_bytes`).

    At most `workers` jobs run at once; further callers wait, tenants taking turns (FIFO within a tenant). A job is
    bounded by `timeout_s` (ParseError TIMEOUT) and by `max_memory_mib` of address space above the worker's own
    (0: none; OUT_OF_MEMORY); a worker that dies is CRASHED. Workers start on first use, or all at once with
    `start()` / `async with`. `function` must be a module-level function (it is pickled by name); `max_jobs`
    recycles a worker after that many jobs, to bound fragmentation.
    """

    def __init__(self, workers: int, timeout_s: float, max_memory_mib: int, limits: ParseLimits = ParseLimits(),
                 function: ParseFunction | None = None, *, max_jobs: int = 200, start_timeout_s: float = 60.0):
        if workers < 1 or timeout_s <= 0 or max_memory_mib < 0 or max_jobs < 1:
            raise ValueError("workers, timeout_s and max_jobs must be positive, max_memory_mib >= 0")
        if function is not None:
            pickle.dumps(function)  # fails here rather than in every worker
        self._size, self._timeout_s, self._max_memory_mib = workers, timeout_s, max_memory_mib
        self._limits, self._function, self._reply_limit = limits, function, reply_limit(limits)
        self._max_jobs, self._start_timeout_s = max_jobs, start_timeout_s
        self._slots = TenantSlots(workers)  # per tenant: one tenant's flood does not queue the others behind it
        self._workers: set[_Worker] = set()  # started and warm: idle or busy
        self._idle: deque[_Worker] = deque()
        self._busy: set[_Worker] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()  # slot holders waiting for a worker to start
        self._starts: set[asyncio.Task[_Worker]] = set()
        self._predecessors: dict[asyncio.Task[_Worker], _Worker] = {}  # successor start -> the worker it replaces
        self._reapers: set[asyncio.Task[None]] = set()
        self._closed = False
        self._close_task: asyncio.Future[None] | None = None
        self._queued = self._jobs = self._timeouts = self._crashes = self._oom = self._restarts = 0
        self._start_s = 0.0

    async def __aenter__(self) -> ParserPool:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    @property
    def workers(self) -> int:
        """How many worker processes the pool keeps."""
        return self._size

    def stats(self) -> PoolStats:
        return PoolStats(len(self._workers) + len(self._starts), len(self._busy), self._queued, self._jobs,
                         self._timeouts, self._crashes, self._oom, self._restarts, self._start_s)

    def pids(self) -> list[int]:
        """The warm workers' process ids (diagnostics, tests)."""
        return [w.process.pid for w in self._workers]

    async def start(self) -> None:
        """Starts the missing workers and waits until they are warm; RuntimeError if one cannot start."""
        self._check_open()
        await asyncio.gather(*(self._launch() for _ in range(self._size - len(self._workers) - len(self._starts))))

    async def parse(self, data: bytes | Path, tenant: str = "") -> ParsedDocument:
        """Parse `data`, or a file read once a slot is free (at most `workers` files in memory, however many wait);
        slots go to the waiting tenants in turn."""
        self._check_open()
        self._queued += 1
        try:
            await self._slots.acquire(tenant)
        finally:
            self._queued -= 1
        try:
            if isinstance(data, Path):
                data = await asyncio.to_thread(data.read_bytes)
            return await self._job(await self._take(), data)
        finally:
            self._slots.release()

    async def close(self) -> None:
        """Kills and reaps every worker; jobs in flight fail with RuntimeError. Safe to call again."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    # ------------------------------------------------------------ jobs

    async def _job(self, worker: _Worker, data: bytes) -> ParsedDocument:
        self._busy.add(worker)
        try:
            async with asyncio.timeout(self._timeout_s):
                await send(worker.sock, data)
                reply = check_job_reply(await receive(worker.sock, self._reply_limit))
        except TimeoutError:
            self._timeouts += 1
            log.warning("parser process %s stopped after %g s", worker.process.pid, self._timeout_s)
            self._retire(worker)
            raise ParseError(ParseErrorCode.TIMEOUT, f"parser stopped after {self._timeout_s:g} s") from None
        except ReplyTooLarge as exc:  # the rest of that reply is still in the socket: the worker cannot be reused
            log.warning("parser process %s: %s", worker.process.pid, exc)
            self._retire(worker)
            raise ParseError(ParseErrorCode.TOO_LARGE, str(exc)) from None
        except (Died, OSError, pickle.UnpicklingError) as exc:
            await self._died(worker, exc)
        except BaseException:  # cancelled: a half-sent frame or a running parse; the worker cannot be reused
            self._retire(worker)
            raise
        finally:
            self._busy.discard(worker)
            self._jobs += 1
        worker.jobs += 1
        status, *rest = reply
        if (status == "error" and rest[2]) or worker.doomed:  # out of memory, or its successor is warm
            self._retire(worker)
        else:
            self._give_back(worker)
            grown = status == "ok" and rest[1]
            if (grown or worker.jobs >= self._max_jobs) and worker.successor is None:
                # recycled without a stall: the successor warms up while this worker still serves
                worker.successor = self._launch()
                self._predecessors[worker.successor] = worker
        if status == "ok":
            return rest[0]
        code, message, _, detail = rest
        if detail:
            log.warning("parser raised an unexpected error:\n%s", detail)
        if code == ParseErrorCode.OUT_OF_MEMORY:
            self._oom += 1
        raise ParseError(ParseErrorCode(code), message)

    async def _died(self, worker: _Worker, exc: BaseException) -> NoReturn:
        pid = worker.process.pid
        if not isinstance(exc, Died):  # a garbled reply: the worker is not to be trusted any more
            log.error("parser process %s sent a bad reply: %r", pid, exc)
            worker.process.kill()
        try:
            exitcode = await _exit_code(worker.process, timeout_s=1.0)
        finally:  # also when cancelled meanwhile
            self._retire(worker)
        if self._closed:
            raise RuntimeError("parser pool closed while the file was being parsed")
        self._crashes += 1
        if not isinstance(exc, Died):
            raise ParseError(ParseErrorCode.CRASHED, "parser process sent an invalid reply")
        log.warning("parser process %s died (%s)", pid, _death(exitcode))
        raise ParseError(ParseErrorCode.CRASHED, f"parser process died ({_death(exitcode)})")

    # ------------------------------------------------------------ workers

    async def _take(self) -> _Worker:
        """A warm worker for a caller who holds a slot; starts one if the pool is not full."""
        while True:
            self._check_open()
            while self._idle:
                worker = self._idle.popleft()
                if worker.process.is_alive():
                    return worker
                self._retire(worker)  # died while idle: the kernel's OOM killer, an operator
            if len(self._workers) + len(self._starts) < self._size:
                self._launch()
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._wake()  # woken, then cancelled: the wake-up goes to the next in line
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _wake(self, error: BaseException | None = None) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None) if error is None else waiter.set_exception(error)
                return

    def _give_back(self, worker: _Worker) -> None:
        self._idle.append(worker)
        self._wake()

    def _launch(self) -> asyncio.Task[_Worker]:
        task = asyncio.create_task(self._start_worker())
        self._starts.add(task)
        task.add_done_callback(self._started)
        return task

    def _started(self, task: asyncio.Task[_Worker]) -> None:
        self._starts.discard(task)
        predecessor = self._predecessors.pop(task, None)
        if task.cancelled():
            return
        if (exc := task.exception()) is not None:
            log.error("%s", exc)
            if predecessor is not None:
                predecessor.successor = None  # it keeps serving; its next job tries again
            self._wake(exc)  # the caller that asked for this worker gets the reason
        elif self._closed:
            self._kill(task.result())
        else:
            self._workers.add(task.result())
            self._give_back(task.result())
            if predecessor in self._idle:
                self._idle.remove(predecessor)
                self._retire(predecessor)
            elif predecessor in self._busy:
                predecessor.doomed = True

    async def _start_worker(self) -> _Worker:
        started = time.perf_counter()
        parent, child = socket.socketpair()
        process = _CONTEXT.Process(target=_worker_main, name="appliance-parser", daemon=True,
                                   args=(child, self._function, self._limits, self._max_memory_mib))
        try:
            process.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()  # the worker has its own copy; ours would hide the end of stream when it dies
        parent.setblocking(False)
        worker = _Worker(process, parent)
        try:
            async with asyncio.timeout(self._start_timeout_s):
                if await receive(parent, 1024) != READY:
                    raise pickle.UnpicklingError("a new parser process did not say it was ready")
        except (Died, ReplyTooLarge, TimeoutError, OSError, pickle.UnpicklingError) as exc:
            died = _death(await _exit_code(process, timeout_s=1.0)) if isinstance(exc, Died) else repr(exc)
            self._kill(worker)
            raise RuntimeError(f"parser process could not start ({died})") from exc
        except BaseException:
            self._kill(worker)
            raise
        self._start_s = time.perf_counter() - started
        return worker

    def _retire(self, worker: _Worker) -> None:
        """Kills the worker (if still alive) and, unless the pool is closing or one is on its way, starts a
        replacement."""
        self._workers.discard(worker)
        self._kill(worker)
        if not self._closed:
            self._restarts += 1
            if worker.successor is None:
                self._launch()

    def _kill(self, worker: _Worker) -> None:
        worker.sock.close()
        if worker.process.exitcode is None:
            worker.process.kill()
        task = asyncio.create_task(_reap(worker.process))
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("parser pool is closed")

    async def _close(self) -> None:
        self._closed = True
        for task in list(self._starts):
            task.cancel()  # kills its half-started process
        while self._idle:
            worker = self._idle.popleft()
            self._workers.discard(worker)
            self._kill(worker)
        for worker in self._busy:
            worker.process.kill()  # its job sees the end of stream, reaps it and fails with RuntimeError
        while self._waiters:
            self._wake(RuntimeError("parser pool is closed"))
        deadline = time.monotonic() + _REAP_TIMEOUT_S + 5
        while (self._starts or self._reapers or self._busy) and time.monotonic() < deadline:
            await asyncio.gather(*self._starts, *self._reapers, return_exceptions=True)
            await asyncio.sleep(0.005 if self._busy else 0)


async def _wait_readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _exit_code(process: BaseProcess, timeout_s: float) -> int | None:
    """The exit code once the process has exited (its sentinel pipe closes); None, and SIGKILL, after timeout_s."""
    try:
        await asyncio.wait_for(_wait_readable(process.sentinel), timeout_s)
    except TimeoutError:
        process.kill()
        return None
    process.join(1.0)  # the sentinel closes a moment before the exit status is ready: this does not block
    return process.exitcode


async def _reap(process: BaseProcess) -> None:
    """Waits for a killed process without blocking the loop, so that none is left a zombie."""
    if await _exit_code(process, _REAP_TIMEOUT_S) is None:
        log.error("parser process %s did not exit %g s after SIGKILL", process.pid, _REAP_TIMEOUT_S)
    else:
        process.close()


def _death(exitcode: int | None) -> str:
    if exitcode is None or exitcode >= 0:
        return "cause unknown" if exitcode is None else f"exit code {exitcode}"
    try:
        return f"signal {signal.Signals(-exitcode).name}"
    except ValueError:
        return f"signal {-exitcode}"
