"""The set of engines the answer path picks from: `EngineSet` maps roles ("small", "large", ... as configured) to
`TextEngine`s (`protocol.py`), picks one per request by role and load, and brings dead engines back one at a time
while the others take their traffic. Nothing here knows vLLM.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .protocol import EngineStatus, TextEngine
from .salt import CacheSalts

log = logging.getLogger("appliance.generate")
MAX_BACKOFF_S = 60.0
SUPERVISE_EVERY_S = 0.5


@dataclass(slots=True, frozen=True)
class Pick:
    engine: TextEngine | None  # None: no engine can take it now; answer retrieval-only
    reason: str  # why not the preferred one ("" when it is)


class EngineSet(Mapping[str, TextEngine]):
    """Engines by role, in fallback order. `start_together`: the engines start at once (each serialises what must
    not overlap itself, as VllmEngine does its spawn); otherwise one after the other (on a GPU, an engine sizes its
    cache from the memory free while it starts, which another engine's start changes). Restarts: one at a time."""

    def __init__(self, engines: Mapping[str, TextEngine], wait_budget_s: float = float("inf"),
                 restart_delay_s: float = 2.0, after_start: Callable[[], None] | None = None,
                 start_together: bool = False, salts: CacheSalts | None = None):
        """`salts`: each tenant's prompts get their own prefix-cache salt (None: all share one cache)."""
        self._engines = dict(engines)
        self._salts = salts
        self.start_together = start_together
        self.roles: tuple[str, ...] = tuple(self._engines)
        self.wait_budget_s = wait_budget_s  # an engine whose estimated wait is above this takes no new request
        self.restart_delay_s = restart_delay_s
        self._after_start = after_start or (lambda: None)  # e.g. note the processes of the engines
        self._start_lock = asyncio.Lock()
        self._restarting: dict[str, asyncio.Task] = {}
        self._supervisor: asyncio.Task | None = None
        self._prompts_for: Callable[[Any], list[str]] | None = None
        self._warm_tenants: tuple[str | None, ...] = (None,)

    def __getitem__(self, role: str) -> TextEngine:
        return self._engines[role]

    def __iter__(self) -> Iterator[str]:
        return iter(self._engines)

    def __len__(self) -> int:
        return len(self._engines)

    async def start(self) -> None:
        """Every engine, then the supervisor that restarts dead ones. A failed start fails the whole, once every
        other start has ended (so none comes up after the caller has stopped the set)."""
        async with self._start_lock:
            try:
                if self.start_together:
                    ended = await asyncio.gather(*(e.start() for e in self._engines.values()), return_exceptions=True)
                    failed = next((e for e in ended if isinstance(e, BaseException)), None)
                    if failed is not None:
                        raise failed
                else:
                    for engine in self._engines.values():
                        await engine.start()
            finally:
                self._after_start()  # the processes of whatever did start
        self._supervisor = asyncio.create_task(self._supervise())

    async def stop(self) -> None:
        tasks = [t for t in (self._supervisor, *self._restarting.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for engine in self._engines.values():
            await engine.stop()

    def salt_for(self, tenant: str | None) -> str | None:
        """The prefix-cache salt of a tenant's prompts (None: unsalted)."""
        return self._salts.for_tenant(tenant) if self._salts is not None else None

    async def warm_up(self, prompts_for: Callable[[Any], list[str]], tenants: Sequence[str | None] = (None,)) -> float:
        """Prefill every prompt (rendered with each engine's own tokenizer) once on each engine under each tenant's
        salt, so the tenants' first requests already hit the prefix cache. Returns the milliseconds it took."""
        started = time.perf_counter()
        self._prompts_for = prompts_for  # a restarted engine comes back with an empty cache: warm it again
        self._warm_tenants = tuple(tenants) if self._salts is not None else (None,)  # unsalted: one cache
        for engine in self._engines.values():
            await self._prefill(engine)
        return (time.perf_counter() - started) * 1000

    async def _prefill(self, engine: TextEngine) -> None:
        if self._prompts_for is None:
            return
        prompts = self._prompts_for(engine.tokenizer)
        for tenant in self._warm_tenants:
            for prompt in prompts:
                async for _ in engine.stream(prompt, max_tokens=1, learn=False, cache_salt=self.salt_for(tenant)):
                    pass

    def pick(self, preferred: str, forced: bool = False, exclude: tuple[str, ...] = ()) -> Pick:
        """The preferred engine unless it is off, down, full or would keep the request waiting past the budget;
        then the first other one that can take it (unless the client forced this one); else none."""
        problem = self._problem(preferred) if preferred not in exclude else "failed this request"
        if problem is None:
            return Pick(self._engines[preferred], "")
        problems = [f"{preferred} {problem}"]
        if not forced:
            for role in self.roles:
                if role == preferred or role in exclude:
                    continue
                other = self._problem(role)
                if other is None:
                    return Pick(self._engines[role], f"{problems[0]}: sent to {role}")
                problems.append(f"{role} {other}")
        return Pick(None, ", ".join(problems))

    def _problem(self, role: str) -> str | None:
        engine = self._engines.get(role)
        if engine is None:
            return "engine is turned off"
        if not engine.up:
            return f"engine is {'restarting' if engine.state in ('down', 'starting') else engine.state}"
        if engine.in_flight >= engine.limits.max_queue:
            return f"queue is full ({engine.in_flight} in flight)"
        wait = engine.estimated_wait_s
        if wait > self.wait_budget_s:
            return f"estimated wait {wait:.1f} s is over the {self.wait_budget_s:g} s budget"
        return None

    def report_dead(self, engine: TextEngine) -> None:
        if engine.role in self._restarting or engine.state == "starting":
            return  # already being brought back
        engine.mark_down()
        self._restarting[engine.role] = asyncio.create_task(self._restart(engine))

    async def _supervise(self) -> None:
        while True:
            await asyncio.sleep(SUPERVISE_EVERY_S)
            for engine in self._engines.values():
                if engine.state == "up" and not engine.up:
                    log.error("engine %s died; restarting", engine.role)
                    self.report_dead(engine)

    async def _restart(self, engine: TextEngine) -> None:
        delay = self.restart_delay_s
        try:
            while True:
                with contextlib.suppress(Exception):
                    await engine.stop()
                engine.mark_down()
                await asyncio.sleep(delay)
                try:
                    async with self._start_lock:
                        await engine.start()
                    self._after_start()
                    await self._prefill(engine)
                    return
                except Exception:
                    log.exception("engine %s failed to restart; next try in %.0f s", engine.role, delay * 2)
                    delay = min(delay * 2, MAX_BACKOFF_S)
        finally:
            self._restarting.pop(engine.role, None)

    def status(self) -> dict[str, EngineStatus]:
        return {role: engine.status() for role, engine in self._engines.items()}

    def on_sample(self, listener: Callable[[str, str, float], None]) -> None:
        """`listener(role, kind, seconds)` for every TTFT and queue-time sample the engines report."""
        for role, engine in self._engines.items():
            engine.on_sample(lambda kind, seconds, role=role: listener(role, kind, seconds))
