"""The encoders a box runs, each behind its own micro-batcher, and which one serves a language.

A partition's language picks its encoder once (its index versions record it); a search over partitions of
several encoders encodes the query once per encoder, and concurrent queries still batch per encoder.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from .batcher import MicroBatcher


class EncoderSet:
    def __init__(self, batchers: Mapping[str, MicroBatcher], for_language: Callable[[str], str]):
        if not batchers:
            raise ValueError("an encoder set needs at least one encoder")
        self._batchers = dict(batchers)
        self._for_language = for_language
        for language in ("en", "zh", "multi"):
            if for_language(language) not in self._batchers:
                raise ValueError(f"no encoder {for_language(language)!r} loaded for language {language!r}")

    def name_for(self, language: str) -> str:
        """The encoder of a partition or question in `language` ("en", "zh", "multi")."""
        return self._for_language(language)

    def for_language(self, language: str) -> MicroBatcher:
        return self._batchers[self._for_language(language)]

    def get(self, name: str) -> MicroBatcher | None:
        """The encoder called `name` (as a snapshot records it), if this box runs it."""
        return self._batchers.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(self._batchers)

    def __iter__(self):
        return iter(self._batchers.values())

    async def start(self) -> None:
        for batcher in self._batchers.values():
            await batcher.start()

    async def stop(self) -> None:
        """Stop every batcher, even past one that fails to stop (the first failure is raised after)."""
        failures = []
        for batcher in self._batchers.values():
            try:
                await batcher.stop()
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]
