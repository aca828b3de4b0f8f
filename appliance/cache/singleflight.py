"""Single flight: concurrent identical cache misses compute once; the others wait for that result.

The first caller of a key leads and must `finish` it (with None when its answer is not cacheable); followers
wait a bounded time and compute for themselves if the leader is slow, fails or has nothing to share.
"""
from __future__ import annotations

import asyncio
from typing import Any


class SingleFlight:
    def __init__(self, wait_s: float):
        self.wait_s = wait_s
        self._calls: dict[str, asyncio.Future] = {}

    def lead(self, key: str) -> bool:
        """True if the caller is the first for `key` and must call `finish`; False if one is already running."""
        if key in self._calls:
            return False
        self._calls[key] = asyncio.get_running_loop().create_future()
        return True

    async def wait(self, key: str) -> Any | None:
        """The leader's result, or None if there is none in time (or no call is running for `key`)."""
        future = self._calls.get(key)
        if future is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.wait_s)
        except asyncio.TimeoutError:
            return None

    def finish(self, key: str, result: Any | None) -> None:
        future = self._calls.pop(key, None)
        if future is not None and not future.done():
            future.set_result(result)

    def __len__(self) -> int:
        return len(self._calls)
