"""ParserPool with real worker processes: hangs, crashes, memory hogs, cancellation and close.

The faults are injected through `_scripted`, a module-level parse function the workers import from this file: what
it does is chosen by the input's first word, so one pool can meet several hostile files in a row.
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import shutil
import time
from pathlib import Path

import psutil
import pytest

from appliance.parse import Block, Format, ParsedDocument, ParseError, ParseErrorCode, ParseLimits, ParserPool

TIMEOUT_S = 1.0  # for the jobs meant to hang; the others get WORK_TIMEOUT_S, as a loaded CI box pages slowly
WORK_TIMEOUT_S = 30.0
SLACK_S = 1.5  # kill, reap and the event loop's own latency on a busy 2-core box


_KEPT: list[bytearray] = []  # what a leaking parser holds on to between jobs


class Unexpected:
    """Not a document type: a reply that carries it must be refused by the pool."""


def _scripted(data: bytes, limits: ParseLimits) -> ParsedDocument:
    command = data[:16].split(b" ", 1)[0]
    if command == b"hang":
        time.sleep(3600)
    elif command == b"exit":
        os._exit(3)
    elif command == b"segv":
        ctypes.string_at(0)  # a real SIGSEGV, as a C parser would cause
    elif command == b"abort":
        os.abort()
    elif command == b"hog":
        hog = bytearray(4 << 30)  # 4 GiB against a 512 MiB limit
        return ParsedDocument(Format.TEXT, str(len(hog)))
    elif command == b"wrapped-hog":  # a parser that turns every error into its own
        try:
            bytearray(4 << 30)
        except Exception as exc:
            raise ParseError(ParseErrorCode.CORRUPT, "broken") from exc
    elif command == b"encrypted":
        raise ParseError(ParseErrorCode.ENCRYPTED, "the file is password-protected")
    elif command == b"bug":
        raise ValueError("a parser bug")
    elif command == b"leak":
        _KEPT.append(bytearray(300 << 20))
        return ParsedDocument(Format.TEXT, str(os.getpid()))
    elif command == b"pid":
        return ParsedDocument(Format.TEXT, str(os.getpid()))
    elif command == b"sleep":  # a slow but honest parse: "sleep 0.4"
        time.sleep(float(data.split()[1]))
    elif command == b"huge":  # a reply over the pool's bound (the test's max_chars is small)
        return ParsedDocument(Format.TEXT, "", [Block("x" * (24 << 20))])
    elif command == b"whoami":  # the worker's user, and what it can open
        opened = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
                opened.append(Block(os.readlink(f"/proc/self/fd/{fd}")))
        try:
            open(data.split()[1], "rb").close()
            readable = "yes"
        except PermissionError:
            readable = "no"
        return ParsedDocument(Format.TEXT, f"{os.geteuid()} {readable}", opened)
    elif command == b"evil":
        return ParsedDocument(Format.TEXT, "", [Unexpected()])  # type: ignore[list-item]
    return ParsedDocument(Format.TEXT, str(len(data)), [Block(data[:64].decode("utf-8", "replace"))])


def _pool(workers: int = 1, timeout_s: float = WORK_TIMEOUT_S, **kwargs) -> ParserPool:
    return ParserPool(workers, timeout_s, 512, ParseLimits(), _scripted, **kwargs)


async def _code(pool: ParserPool, data: bytes) -> tuple[ParseErrorCode, str]:
    with pytest.raises(ParseError) as caught:
        await pool.parse(data)
    return caught.value.code, caught.value.message


def _worker_children() -> set[int]:
    """Our child processes, less multiprocessing's resource tracker (a process-wide helper shared by all users)."""
    return {p.pid for p in psutil.Process().children()
            if not any("resource_tracker" in part for part in _cmdline(p))}


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def test_default_function_parses_text():
    async def go():
        async with ParserPool(1, 10.0, 1024, ParseLimits()) as pool:
            return await pool.parse("Über den Fluss.\n\nA second paragraph.".encode())

    document = asyncio.run(go())
    assert document.format == Format.TEXT
    everything = f"{document.title}\n{document.text}"  # the first line may be taken as the title
    assert "Über den Fluss." in everything and "A second paragraph." in document.text


def test_hang_times_out_and_the_pool_recovers():
    async def go():
        async with _pool(timeout_s=TIMEOUT_S) as pool:
            started = time.perf_counter()
            code, message = await _code(pool, b"hang")
            elapsed = time.perf_counter() - started
            after = await pool.parse(b"fine")
            return code, message, elapsed, after, pool.stats()

    code, message, elapsed, after, stats = asyncio.run(go())
    assert code == ParseErrorCode.TIMEOUT and message == "parser stopped after 1 s"
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + SLACK_S
    assert after.title == "4"
    assert (stats.timeouts, stats.restarts, stats.jobs) == (1, 1, 2)


def test_crashes_are_reported_and_the_worker_replaced():
    expected = {b"exit": "parser process died (exit code 3)", b"segv": "parser process died (signal SIGSEGV)",
                b"abort": "parser process died (signal SIGABRT)",
                b"evil": "parser process sent an invalid reply"}  # a reply naming a type outside the allowlist

    async def go():
        seen = {}
        async with _pool() as pool:
            for command in expected:
                before = pool.pids()
                seen[command] = await _code(pool, command)
                seen[command] += ((await pool.parse(b"fine")).title, pool.pids() != before)
            return seen, pool.stats()

    seen, stats = asyncio.run(go())
    for command, message in expected.items():
        assert seen[command] == (ParseErrorCode.CRASHED, message, "4", True), command
    assert (stats.crashes, stats.restarts) == (4, 4)


def test_memory_hog_is_stopped_and_the_worker_replaced():
    async def go():
        async with _pool() as pool:
            first = pool.pids()
            hog = await _code(pool, b"hog")
            second = pool.pids()
            wrapped = await _code(pool, b"wrapped-hog")
            return hog, wrapped, await pool.parse(b"fine"), first, second, pool.stats()

    hog, wrapped, after, first, second, stats = asyncio.run(go())
    assert hog[0] == ParseErrorCode.OUT_OF_MEMORY and "512 MiB" in hog[1]
    assert wrapped[0] == ParseErrorCode.OUT_OF_MEMORY  # found under the parser's own error
    assert after.title == "4"
    assert first != second and stats.out_of_memory == 2 and stats.restarts == 2


def test_parser_errors_keep_the_worker():
    async def go():
        async with _pool() as pool:
            pids = pool.pids()
            encrypted = await _code(pool, b"encrypted")
            bug = await _code(pool, b"bug")
            return encrypted, bug, pids == pool.pids(), pool.stats()

    encrypted, bug, same, stats = asyncio.run(go())
    assert encrypted == (ParseErrorCode.ENCRYPTED, "the file is password-protected")
    assert bug == (ParseErrorCode.CORRUPT, "the file could not be parsed (ValueError)")
    assert same and stats.restarts == 0


def test_large_input_and_recycling_after_max_jobs():
    big = b"x" * (64 << 20)

    async def go():
        async with _pool(max_jobs=2) as pool:
            [first] = pool.pids()
            sizes = [(await pool.parse(big)).title, (await pool.parse(b"fine")).title]
            # max_jobs reached: the successor warms up while the old worker still serves, so nobody waits for it
            meanwhile = int((await pool.parse(b"pid")).title)
            deadline = time.monotonic() + 30
            while pool.stats().restarts == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            return sizes, first, meanwhile, int((await pool.parse(b"pid")).title), pool.stats()

    sizes, first, meanwhile, after, stats = asyncio.run(go())
    assert sizes == [str(len(big)), "4"]
    assert meanwhile == first and after != first
    assert (stats.restarts, stats.workers) == (1, 1)


def test_a_worker_that_keeps_memory_is_recycled():
    async def go():
        async with _pool() as pool:
            pids = [int((await pool.parse(b"leak")).title) for _ in range(2)]  # 600 MiB kept > the 512 MiB budget
            deadline = time.monotonic() + 30
            while pool.stats().restarts == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            return pids, int((await pool.parse(b"pid")).title), pool.stats()

    pids, after, stats = asyncio.run(go())
    assert pids[0] == pids[1] != after
    assert (stats.restarts, stats.out_of_memory) == (1, 0)


def test_hanging_jobs_do_not_starve_the_others():
    async def timed(pool: ParserPool, data: bytes, started: float):
        try:
            return (await pool.parse(data)).title, time.perf_counter() - started
        except ParseError as exc:
            return exc.code, time.perf_counter() - started

    async def go():
        async with _pool(workers=2, timeout_s=TIMEOUT_S) as pool:
            rounds = []
            # the good jobs share the other worker; then both workers hang and the good ones wait for replacements
            for jobs in ([b"hang", b"one", b"two", b"three", b"four", b"hang"],
                         [b"hang", b"hang", b"one", b"two", b"three", b"four"]):
                started = time.perf_counter()
                rounds.append(await asyncio.gather(*(timed(pool, job, started) for job in jobs)))
            return rounds, pool.stats()

    (mixed, hostile_first), stats = asyncio.run(go())
    assert [r[0] for r in mixed] == [ParseErrorCode.TIMEOUT, "3", "3", "5", "4", ParseErrorCode.TIMEOUT]
    assert max(r[1] for r in mixed[1:5]) < TIMEOUT_S  # done while the hostile file still ran
    assert [r[0] for r in hostile_first] == [ParseErrorCode.TIMEOUT] * 2 + ["3", "3", "5", "4"]
    assert max(r[1] for r in hostile_first) < 20  # a timeout and a replacement's start-up, not a pile-up
    assert (stats.timeouts, stats.jobs, stats.busy, stats.waiting) == (4, 12, 0, 0)


def test_a_flooding_tenant_delays_another_tenants_file_by_about_one_job():
    """One tenant queues 24 slow files, then another sends one: it waits for one job to end per worker, not for the
    flood (first come, first served over all files: 24 / 2 workers x 0.4 s = about 5 s)."""
    job_s = 0.4
    job = f"sleep {job_s}".encode()

    async def timed(pool: ParserPool, tenant: str) -> float:
        start = time.perf_counter()
        await pool.parse(job, tenant)
        return time.perf_counter() - start

    async def go():
        async with _pool(workers=2) as pool:
            alone = min([await timed(pool, "calm") for _ in range(3)])  # its own baseline, on this box now
            flood = [asyncio.create_task(pool.parse(job, "flood")) for _ in range(24)]
            await asyncio.sleep(0.1)
            queued = pool.stats().waiting
            behind = await timed(pool, "calm")
            flood_left = sum(not t.done() for t in flood)
            await asyncio.gather(*flood)
            return alone, queued, behind, flood_left

    alone, queued, behind, flood_left = asyncio.run(go())
    assert queued == 22 and flood_left >= 16, (queued, flood_left)
    assert behind < alone + 3 * job_s, f"alone {alone:.2f} s, behind a flood {behind:.2f} s"


def test_a_reply_over_the_bound_is_one_files_error_and_the_worker_is_replaced():
    async def go():
        async with ParserPool(1, WORK_TIMEOUT_S, 512, ParseLimits(max_chars=1000), _scripted) as pool:
            first = pool.pids()
            code, message = await _code(pool, b"huge")
            after = await pool.parse(b"fine")
            return code, message, first, pool.pids(), after

    code, message, first, pids, after = asyncio.run(go())
    assert code is ParseErrorCode.TOO_LARGE and "reply" in message, message
    assert after.title == "4" and pids != first  # the rest of the reply was never read: a fresh worker


def test_workers_hold_no_inherited_files_and_drop_root(tmp_path):
    secret = tmp_path / "data" / "store.sqlite"
    secret.parent.mkdir(mode=0o700)
    secret.write_bytes(b"tenant data")
    inherited = os.open(secret, os.O_RDONLY)
    os.set_inheritable(inherited, True)  # as a careless library might leave one

    async def go():
        async with _pool() as pool:
            doc = await pool.parse(f"whoami {secret}".encode())
            return *doc.title.split(), [b.text for b in doc.blocks]

    try:
        uid, readable, opened = asyncio.run(go())
    finally:
        os.close(inherited)
    assert str(secret) not in opened and not any(p.startswith(str(tmp_path)) for p in opened), opened
    if os.geteuid() == 0:
        import pwd
        assert int(uid) == pwd.getpwnam("nobody").pw_uid and readable == "no"
    else:  # an unprivileged server cannot change its workers' user (README, "Parsing"): Landlock keeps them out
        assert int(uid) == os.geteuid() and readable == ("no" if _landlock() else "yes")


def _landlock() -> bool:
    return ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1) > 0


def test_workers_read_the_installation_and_nothing_else(request):
    """Landlock, under any user: a world-readable file outside the installation (a data folder the admin left
    0755, a checkout's state/) is out of a worker's reach, while the parsers still read what they import late."""
    if not _landlock():
        pytest.skip("this kernel has no Landlock: workers parse unconfined (and say so on stderr)")
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="open-data-", dir="/tmp"))  # reachable by any user, nobody included
    folder.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(folder))
    store = folder / "store.sqlite"
    store.write_bytes(b"tenant data")
    store.chmod(0o644)

    async def go():
        async with _pool() as pool:
            doc = await pool.parse(f"whoami {store}".encode())
            return doc.title.split()[1]

    assert asyncio.run(go()) == "no"
    from hostile_files import SCIFACT_FILES

    async def real():  # a real parser in a confined worker: what it imports late is still in reach
        async with ParserPool(1, WORK_TIMEOUT_S, 1024) as pool:
            return [await pool.parse(next(SCIFACT_FILES.glob(f"*.{kind}")).read_bytes()) for kind in ("pdf", "docx")]

    assert all(doc.text.strip() for doc in asyncio.run(real()))


def test_cancelled_callers_leave_the_pool_consistent():
    async def go():
        async with _pool() as pool:
            first = pool.pids()
            running = asyncio.create_task(pool.parse(b"hang"))
            waiting = asyncio.create_task(pool.parse(b"fine"))
            await asyncio.sleep(0.2)
            queued = pool.stats().waiting
            waiting.cancel()  # the client went away while queued
            await asyncio.sleep(0.05)
            running.cancel()  # ... and this one while its file was being parsed
            for task in (waiting, running):
                with pytest.raises(asyncio.CancelledError):
                    await task
            after = await pool.parse(b"fine")
            return queued, first, pool.pids(), after, pool.stats()

    queued, first, pids, after, stats = asyncio.run(go())
    assert queued == 1
    assert after.title == "4" and pids != first  # the hung worker was killed and replaced
    assert (stats.busy, stats.waiting, stats.workers, stats.restarts) == (0, 0, 1, 1)


def test_close_kills_everything_and_is_idempotent():
    before = _worker_children()

    async def go():
        pool = _pool(workers=2, timeout_s=TIMEOUT_S)
        await pool.start()
        pids = set(pool.pids())
        running = asyncio.create_task(pool.parse(b"hang"))
        await asyncio.sleep(0.2)
        await pool.close()
        with pytest.raises(RuntimeError):
            await running
        await pool.close()
        with pytest.raises(RuntimeError):
            await pool.parse(b"fine")
        return pids

    pids = asyncio.run(go())
    assert len(pids) == 2
    assert _worker_children() == before
    assert not any(psutil.pid_exists(pid) for pid in pids)  # reaped: not even zombies


HANG_S = 3.0  # long beside the gap allowed below: a loop blocked by the hung parser would miss a whole hang


def test_event_loop_stays_responsive_while_a_parser_hangs():
    async def go():
        async with _pool(timeout_s=HANG_S) as pool:
            gaps, stop = [], asyncio.Event()

            async def tick():
                last = time.perf_counter()
                while not stop.is_set():
                    await asyncio.sleep(0.01)
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now

            ticker = asyncio.create_task(tick())
            with pytest.raises(ParseError):
                await pool.parse(b"hang")
            await pool.parse(b"x" * (32 << 20))  # a large input is sent without blocking the loop either
            stop.set()
            await ticker
            return gaps

    gc.disable()  # a full collection of the test session's heap (engines loaded) stalls any loop; not the pool's
    try:
        gaps = asyncio.run(go())
    finally:
        gc.enable()
    assert sum(gaps) > HANG_S and len(gaps) > 50
    assert max(gaps) < HANG_S / 3, f"the event loop stalled for {max(gaps):.2f} s"
