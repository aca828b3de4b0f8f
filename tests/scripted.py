"""A scripted engine for the answer path's unit tests: it implements `TextEngine` and injects faults on cue.

Only logic around the engine is tested with it (routing, degrade, retry, deadlines, single flight); everything
an engine itself does keeps its real-vLLM test (test_answers.py, test_caching.py).
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from appliance.generate import Delta, EngineDown, EngineLimits, EngineStatus


@dataclass
class Script:
    tokens: list[str] = field(default_factory=lambda: ["The", " answer", "."])
    die_after: int | None = None  # raise EngineDown after this many tokens (0: before the first)
    token_delay_s: float = 0.0
    finish_reason: str = "stop"
    odds: tuple[float, ...] | None = None  # next_word_odds' answer (per word asked); None: it raises EngineDown


class ScriptedEngine:
    def __init__(self, role: str, tokenizer, script: Script | None = None, max_queue: int = 8,
                 context_tokens: int = 512):
        self.role = role
        self.limits = EngineLimits(max_model_len=2048, max_tokens=256, context_tokens=context_tokens,
                                   max_queue=max_queue)
        self.script = script or Script()
        self._tokenizer = tokenizer
        self.state = "stopped"
        self.in_flight = 0
        self.estimated_wait_s = 0.0
        self.starts = 0
        self.prompts: list[str] = []  # every prompt it was asked to answer
        self.odds_prompts: list[str] = []  # every prompt it was asked the next word's odds for
        self.salts: list[str | None] = []  # the cache salt each came with
        self.aborted = 0  # streams closed before they finished
        self._listener = None

    @property
    def up(self) -> bool:
        return self.state == "up"

    @property
    def tokenizer(self):
        return self._tokenizer

    async def start(self) -> None:
        self.starts += 1
        self.state = "up"

    async def stop(self) -> None:
        self.state = "stopped"

    def mark_down(self) -> None:
        self.state = "down"

    def on_sample(self, listener) -> None:
        self._listener = listener

    def status(self) -> EngineStatus:
        return EngineStatus(self.role, self.state, "scripted", "cpu", "float32", self.limits.max_model_len,
                            self.in_flight, max(0, self.starts - 1), self.estimated_wait_s, 0.0)

    async def next_word_odds(self, prompt: str, words: tuple[str, ...], request_id: str | None = None,
                             cache_salt: str | None = None) -> tuple[float, ...]:
        self.odds_prompts.append(prompt)
        if not self.up or self.script.odds is None:
            raise EngineDown(f"{self.role} engine is {self.state}")
        await asyncio.sleep(self.script.token_delay_s)
        return self.script.odds[:len(words)]

    async def stream(self, prompt: str, max_tokens: int, temperature: float = 0.0, request_id: str | None = None,
                     learn: bool = True, cache_salt: str | None = None) -> AsyncIterator[Delta]:
        if not self.up:
            raise EngineDown(f"{self.role} engine is {self.state}")
        self.prompts.append(prompt)
        self.salts.append(cache_salt)
        self.in_flight += 1
        finished = False
        try:
            tokens = self.script.tokens[:max_tokens]
            for n, token in enumerate(tokens, 1):
                if self.script.die_after is not None and n > self.script.die_after:
                    self.state = "down"
                    raise EngineDown(f"{self.role} engine died: scripted")
                await asyncio.sleep(self.script.token_delay_s)
                last = n == len(tokens)
                yield Delta(token, n, 100, 64, self.script.finish_reason if last else None)
            finished = True
        finally:
            self.in_flight -= 1
            self.aborted += not finished
