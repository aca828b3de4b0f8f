"""The engine seam: what the answer path needs from an engine (`TextEngine`) and the types it speaks in.

A generating engine implements `TextEngine` (the vLLM one in `vllm_engine.py`; a scripted one in the tests injects
faults); the answer path sees engines only through an `EngineSet` (`engine_set.py`). Nothing here knows vLLM.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol


class EngineDown(RuntimeError):
    """The engine is not serving (starting, restarting, or it died under this request)."""


@dataclass(slots=True)
class Delta:
    text: str
    completion_tokens: int  # generated so far
    prompt_tokens: int
    cached_tokens: int  # prompt tokens served from the prefix cache
    finish_reason: str | None


@dataclass(slots=True, frozen=True)
class EngineLimits:
    max_model_len: int  # prompt + answer tokens
    max_tokens: int  # cap for any one answer
    context_tokens: int  # token budget for retrieved passages in a prompt
    max_queue: int  # requests it holds (running + waiting); past that it takes no more


@dataclass(slots=True, frozen=True)
class EngineStatus:
    role: str
    state: str  # stopped, starting, up, down
    model: str
    device: str
    dtype: str
    max_model_len: int
    in_flight: int
    restarts: int
    estimated_wait_s: float
    start_s: float | None
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    prefix_cache_hit_rate: float = 0.0
    requests_finished: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    queue_p99_ms: float | None = None


SampleListener = Callable[[str, float], None]  # ("ttft" | "queue", seconds)


class TextEngine(Protocol):
    role: str
    limits: EngineLimits

    @property
    def state(self) -> str: ...
    @property
    def up(self) -> bool: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def estimated_wait_s(self) -> float: ...
    @property
    def tokenizer(self) -> Any: ...  # a Hugging Face tokenizer with a chat template

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def mark_down(self) -> None: ...

    def stream(self, prompt: str, max_tokens: int, temperature: float = 0.0, request_id: str | None = None,
               learn: bool = True, cache_salt: str | None = None) -> AsyncIterator[Delta]:
        """Token deltas; closing the iterator early aborts the request. Raises EngineDown if the engine dies.
        `cache_salt`: prompts share prefix-cache blocks only with prompts of the same salt."""
        ...

    async def next_word_odds(self, prompt: str, words: tuple[str, ...], request_id: str | None = None,
                             cache_salt: str | None = None) -> tuple[float, ...]:
        """The probability of each of `words` (case and spaces ignored) as the first token after `prompt`, from
        the engine's top candidates (0 for a word not among them). Raises EngineDown like `stream`."""
        ...

    def status(self) -> EngineStatus: ...
    def on_sample(self, listener: SampleListener) -> None: ...
