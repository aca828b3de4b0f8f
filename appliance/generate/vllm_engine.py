"""One vLLM AsyncLLM engine (V1) in the server process: start, stream, abort, and restart after it dies.

vLLM's environment variables are process-wide but read when an engine spawns its processes, so each engine sets its
own (CPU core binding above all) just before creating itself, under a lock shared by the engines of one server that
it holds until its engine-core process exists (the environment is then the child's copy): the rest of a start (the
child's imports, loading the model) may overlap another engine's.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psutil

from ..config import EngineSettings
from .protocol import Delta, EngineDown, EngineLimits, EngineStatus, SampleListener
from .platform import resolve_dtype
from .stats import EngineStats, stat_logger_factory

log = logging.getLogger("appliance.generate")
GIB = 1 << 30
TOP_CANDIDATES = 20  # first-token candidates read by next_word_odds (vLLM's default max_logprobs)
SPAWN_POLL_S = 0.05


class VllmEngine:
    """A `TextEngine` (protocol.py) on vLLM's AsyncLLM."""

    def __init__(self, role: str, spec: EngineSettings, limits: EngineLimits, model: Path, device: str,
                 spawn_lock: asyncio.Lock | None = None):
        self.role, self.spec, self.limits, self.model, self.device = role, spec, limits, model, device
        self._spawn_lock = spawn_lock or asyncio.Lock()  # shared by the engines of one server
        self.state = "stopped"  # stopped, starting, up, down
        self.stats = EngineStats()
        self.in_flight = 0
        # Seconds of time-to-first-token per request in flight, smoothed: TTFT grows about linearly with the
        # requests sharing the engine, so this times the requests already in flight estimates how much longer a
        # new request waits because of them (an idle engine: no wait).
        self.ttft_per_request_s = 0.0
        self.started_s: float | None = None
        self.restarts = 0
        self.pids: list[int] = []  # engine-core and worker processes, killed if a shutdown leaves them
        self._llm = None
        self._tokenizer = None

    @property
    def up(self) -> bool:
        return self.state == "up" and self._llm is not None and not self._llm.errored

    @property
    def tokenizer(self):
        return self._tokenizer

    @property
    def estimated_wait_s(self) -> float:
        return self.ttft_per_request_s * self.in_flight

    @property
    def waiting(self) -> int:
        """Requests not yet running: vLLM's own queue plus ours between accept and the engine's first step."""
        return max(self.stats.waiting, self.in_flight - self.stats.running)

    def mark_down(self) -> None:
        self.state = "down"

    def on_sample(self, listener: SampleListener) -> None:
        self.stats.listener = listener

    async def start(self) -> None:
        """Start (or restart: a new process, so what the old one learned about waits does not hold)."""
        restart = self.started_s is not None
        self.ttft_per_request_s = 0.0
        self.state = "starting"
        started = time.perf_counter()
        try:
            async with self._spawn_lock:
                before = {p.pid for p in psutil.Process().children()}  # what the core is looked for among
                self._set_environment()
                creating = asyncio.ensure_future(asyncio.to_thread(self._create))
                core = await _spawned_core(creating, before)
            self._llm = await creating
        except BaseException:
            self.state = "down"
            raise
        self.pids = _engine_processes(core)
        self._tokenizer = self._llm.get_tokenizer()
        self.started_s = time.perf_counter() - started
        self.restarts += restart
        self.state = "up"
        log.info("engine %s up in %.1f s: %s (%s)", self.role, self.started_s, self.model, self.device)

    def _set_environment(self) -> None:
        # os.environ is process-wide and not safe to change while other threads read it: set here, on the event
        # loop's thread, under the spawn lock (no other engine's creation is reading it now)
        for name, value in self._environment().items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def _environment(self) -> dict[str, str | None]:
        """vLLM's variables for this engine (None: unset), read when it spawns its processes."""
        if self.device == "gpu":
            return {}
        # the legacy VLLM_CPU_KVCACHE_SPACE would override kv_cache_memory_bytes
        return {"VLLM_CPU_KVCACHE_SPACE": None, "VLLM_CPU_OMP_THREADS_BIND": self.spec.cpu_cores}

    def _create(self):
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        s = self.spec
        kwargs = dict(
            model=str(self.model), tokenizer=str(self.model), dtype=resolve_dtype(s.dtype, self.device),
            max_model_len=s.max_model_len,
            max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
            enable_prefix_caching=s.prefix_caching, enforce_eager=s.enforce_eager, disable_log_stats=False,
            quantization=s.quantization or None, seed=0,
        )
        if self.device == "gpu":
            kwargs["gpu_memory_utilization"] = s.gpu_memory_utilization
        else:
            kwargs["kv_cache_memory_bytes"] = int(s.kv_cache_gib * GIB)
        if s.speculative_ngram_tokens:
            kwargs["speculative_config"] = {"method": "ngram", "num_speculative_tokens": s.speculative_ngram_tokens,
                                            "prompt_lookup_min": 2, "prompt_lookup_max": 4}
        factory = stat_logger_factory(self.stats)
        try:
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=[factory])
        except Exception as exc:
            if "speculative_config" not in kwargs:
                raise
            log.warning("engine %s: n-gram speculative decoding not supported here (%s); starting without it",
                        self.role, exc)
            kwargs.pop("speculative_config")
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=[factory])

    async def stream(self, prompt: str, max_tokens: int, temperature: float = 0.0,
                     request_id: str | None = None, learn: bool = True,
                     cache_salt: str | None = None) -> AsyncIterator[Delta]:
        """Token deltas for `prompt`. Closing the iterator early (a client went away) aborts the request.
        `learn=False` keeps an atypical request (a warm-up prefill of a cold prefix) out of the wait estimate.
        `cache_salt`: the prompt shares prefix-cache blocks only with prompts of the same salt (salt.py)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        if not self.up:
            raise EngineDown(f"{self.role} engine is {self.state}")
        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=0 if temperature else None,
                                frequency_penalty=self.spec.frequency_penalty, output_kind=RequestOutputKind.DELTA)
        # vLLM needs ids unique among its requests; a caller's id (a client's X-Request-Id) may repeat
        request_id = f"{request_id}-{uuid.uuid4().hex[:8]}" if request_id else uuid.uuid4().hex
        sharing = self.in_flight + 1
        self.in_flight += 1
        produced = 0
        started = time.perf_counter()
        inputs = {"prompt": prompt, "cache_salt": cache_salt} if cache_salt else prompt
        try:
            with self._down_if_dead():
                async for out in self._llm.generate(inputs, params, request_id=request_id):
                    if not produced and learn:
                        self._learn_wait((time.perf_counter() - started) / sharing)
                    piece = out.outputs[0]
                    produced += len(piece.token_ids)
                    yield Delta(piece.text, produced, len(out.prompt_token_ids or ()), out.num_cached_tokens or 0,
                                piece.finish_reason)
        finally:
            self.in_flight -= 1

    async def next_word_odds(self, prompt: str, words: tuple[str, ...], request_id: str | None = None,
                             cache_salt: str | None = None) -> tuple[float, ...]:
        from vllm import SamplingParams

        if not self.up:
            raise EngineDown(f"{self.role} engine is {self.state}")
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=TOP_CANDIDATES)
        request_id = f"{request_id}-odds-{uuid.uuid4().hex[:8]}" if request_id else uuid.uuid4().hex
        inputs = {"prompt": prompt, "cache_salt": cache_salt} if cache_salt else prompt
        self.in_flight += 1
        final = None
        try:
            with self._down_if_dead():
                async for final in self._llm.generate(inputs, params, request_id=request_id):
                    pass
        finally:
            self.in_flight -= 1
        candidates = final.outputs[0].logprobs[0] if final and final.outputs[0].logprobs else {}
        wanted = [word.strip().lower() for word in words]
        odds = [0.0] * len(words)
        for candidate in candidates.values():  # " Yes", "yes" and "YES" are one word
            token = (candidate.decoded_token or "").strip().lower()
            if token in wanted:
                odds[wanted.index(token)] += math.exp(candidate.logprob)
        return tuple(odds)

    @contextlib.contextmanager
    def _down_if_dead(self):
        """vLLM's errors of a request whose engine died become EngineDown (and the engine is marked down)."""
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

        try:
            yield
        except (EngineDeadError, EngineGenerateError) as exc:
            if self._llm is not None and self._llm.errored:
                self.state = "down"
                raise EngineDown(f"{self.role} engine died: {type(exc).__name__}") from exc
            raise

    def _learn_wait(self, sample: float) -> None:
        previous = self.ttft_per_request_s
        self.ttft_per_request_s = sample if previous == 0 else 0.8 * previous + 0.2 * sample

    async def stop(self) -> None:
        llm, self._llm = self._llm, None
        self.state = "stopped"
        if llm is not None:
            await asyncio.to_thread(llm.shutdown)
        for pid in self.pids:  # a dead engine's shutdown can leave its worker behind
            try:
                proc = psutil.Process(pid)
                proc.kill()
                proc.wait(5)
            except (psutil.NoSuchProcess, psutil.TimeoutExpired):
                pass
        self.pids = []

    def status(self) -> EngineStatus:
        return EngineStatus(self.role, self.state, str(self.model), self.device,
                            resolve_dtype(self.spec.dtype, self.device), self.spec.max_model_len, self.in_flight,
                            self.restarts, round(self.estimated_wait_s, 3),
                            round(self.started_s, 1) if self.started_s else None, **self.stats.snapshot())


async def _spawned_core(creating: asyncio.Future, before: set[int]) -> psutil.Process | None:
    """The engine-core process this start spawned, once it has named itself VLLM::EngineCore (it then runs on its
    own copy of the environment); None if the creation ended first (it failed, or setproctitle is missing)."""
    me = psutil.Process()
    while True:
        done = creating.done()
        for proc in me.children():
            if proc.pid not in before and _vllm_named(proc):
                return proc
        if done:
            return None
        await asyncio.sleep(SPAWN_POLL_S)


def _engine_processes(core: psutil.Process | None) -> list[int]:
    """The engine-core process and its workers (its children, also named VLLM::...). Not multiprocessing's
    resource tracker, a child shared by every engine, nor another engine's processes."""
    if core is None:
        return []
    with contextlib.suppress(psutil.Error):
        return [core.pid, *(p.pid for p in core.children(recursive=True) if _vllm_named(p))]
    return [core.pid]


def _vllm_named(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return proc.name().startswith("VLLM")
    return False
