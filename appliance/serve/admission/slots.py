"""Requests in progress, per tenant: a bound for the whole server and a fair share for each tenant.

A quarter of the slots is kept for tenants that arrive and the rest is shared out: a tenant (an API key's tenant,
or a client address in open mode) holds at most max(1, (limit - limit // 4) // tenants competing), three quarters
when alone. So a newcomer finds slots free and no one tenant (slow clients trickling bodies, a flood) can take
every slot, while a tenant alone still gets most of the box. "Competing" means holding a slot or having arrived
within ACTIVE_WINDOW_S: a client between two requests still counts, so one that sends short searches back to back
keeps its share, and the token buckets know the box is shared.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

ACTIVE_WINDOW_S = 2.0
RESERVED = 4  # 1/RESERVED of the slots is kept for tenants that arrive
MAX_TENANTS = 10_000  # open mode counts client addresses: keep memory bounded


class TenantSlots:
    def __init__(self, limit: int, window_s: float = ACTIVE_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic):
        self.limit, self.window_s, self._clock = limit, window_s, clock
        self.total = 0
        self._held: dict[str, int] = {}
        self._seen: OrderedDict[str, float] = OrderedDict()  # tenant -> last arrival, oldest first

    def arrive(self, name: str) -> bool:
        """Note that `name` asks for work; True if another tenant competes for the box right now."""
        now = self._clock()
        self._prune(now)
        self._seen.pop(name, None)
        self._seen[name] = now
        if len(self._seen) > MAX_TENANTS:
            self._seen.popitem(last=False)
        return len(self._seen) > 1

    def share(self, name: str) -> int:
        competing = len(self._seen) + (name not in self._seen)
        return max(1, (self.limit - self.limit // RESERVED) // competing)

    def acquire(self, name: str) -> str | None:
        """None when a slot was taken (give it back with `release`), else why not."""
        if self.total >= self.limit:
            return f"{self.total} requests in progress; try again shortly"
        held, share = self._held.get(name, 0), self.share(name)
        if held >= share:
            return f"this tenant has {held} requests in progress, its share while others use the server"
        self._held[name] = held + 1
        self.total += 1
        return None

    def release(self, name: str) -> None:
        self.total -= 1
        left = self._held[name] - 1
        if left:
            self._held[name] = left
        else:
            del self._held[name]
            if name in self._seen:  # its window starts again from its last request's end
                self._seen.move_to_end(name)
                self._seen[name] = self._clock()

    def _prune(self, now: float) -> None:
        while self._seen:
            name, at = next(iter(self._seen.items()))
            if now - at < self.window_s:
                return
            if self._held.get(name):  # still holding a slot: still competing
                self._seen.move_to_end(name)
                self._seen[name] = now
            else:
                del self._seen[name]
