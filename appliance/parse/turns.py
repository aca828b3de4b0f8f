"""The parse pool's slots, handed out with tenants taking turns (as the re-index queue does, reindexing.Turns).

A plain FIFO semaphore is fair per file: a tenant that queues 100 files holds every other tenant's single file
behind all of them. Here a freed slot goes to the oldest waiter of the tenant served least recently, so another
tenant's file waits for at most one job to end per tenant ahead of it, whatever the flooding tenant queued.
"""
from __future__ import annotations

import asyncio
from collections import deque


class TenantSlots:
    """`await acquire(tenant)` ... `release()`: at most `size` holders; waiters served by turns, FIFO per tenant."""

    def __init__(self, size: int):
        self._free = size
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._turn = 0
        self._last: dict[str, float] = {}  # tenants waiting, and the one served last: when each was last served

    def waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    async def acquire(self, tenant: str) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            self._served(tenant)
            return
        # a tenant new to the queue counts as served just before the current turn: behind those already
        # waiting, before the one served last (a tenant that comes and goes cannot overtake a waiting one)
        self._last.setdefault(tenant, self._turn - 0.5)
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed the slot, then cancelled: it goes to the next in turn
            else:
                self._forget(tenant, waiter)
            raise

    def release(self) -> None:
        """Hands the slot straight to the next waiter in turn (no one can take it in between), else frees it."""
        while self._waiting:
            tenant = min(self._waiting, key=self._last.__getitem__)
            waiter = self._waiting[tenant].popleft()
            if not self._waiting[tenant]:
                del self._waiting[tenant]
            if not waiter.done():
                self._served(tenant)
                waiter.set_result(None)
                return
        self._free += 1

    def _served(self, tenant: str) -> None:
        self._turn += 1
        self._last = {t: n for t, n in self._last.items() if t in self._waiting}  # bounded by the waiting tenants
        self._last[tenant] = self._turn

    def _forget(self, tenant: str, waiter: asyncio.Future[None]) -> None:
        queue = self._waiting.get(tenant)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[tenant]
