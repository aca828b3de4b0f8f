"""Exact answer cache: an in-memory LRU in front of a diskcache store, so answers survive restarts.

Keys come from `keys.answer_key`; a key names the index versions it was computed against, so a partition that
changes makes its old entries unreachable (they then age out by TTL and the store's size limit).
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path

import diskcache


class ExactCache:
    def __init__(self, folder: Path, memory_items: int, ttl_s: float, size_limit_bytes: int):
        self.ttl_s = ttl_s
        self.memory_items = memory_items
        self._memory: OrderedDict[str, tuple[float, dict]] = OrderedDict()  # key -> (expires at, value)
        self._lock = threading.Lock()  # lookups run on worker threads
        self._disk = diskcache.Cache(str(folder), size_limit=size_limit_bytes, eviction_policy="least-recently-used")

    def get(self, key: str) -> dict | None:
        now = time.time()
        with self._lock:
            item = self._memory.get(key)
            if item is not None:
                if item[0] > now:
                    self._memory.move_to_end(key)
                    return item[1]
                del self._memory[key]
        found = self._disk.get(key, default=None, expire_time=True)
        if found is None or found[0] is None:
            return None
        value, expires = found
        self._remember(key, value, expires or now + self.ttl_s)
        return value

    def put(self, key: str, value: dict) -> None:
        self._disk.set(key, value, expire=self.ttl_s)
        self._remember(key, value, time.time() + self.ttl_s)

    def delete(self, key: str) -> bool:
        with self._lock:
            self._memory.pop(key, None)
        return bool(self._disk.delete(key))

    def clear(self) -> None:
        with self._lock:
            self._memory.clear()
        self._disk.clear()

    def _remember(self, key: str, value: dict, expires: float) -> None:
        with self._lock:
            self._memory[key] = (expires, value)
            self._memory.move_to_end(key)
            while len(self._memory) > self.memory_items:
                self._memory.popitem(last=False)

    def __len__(self) -> int:
        return len(self._disk)  # one count over the disk store's table (expired entries included until culled)

    def close(self) -> None:
        self._disk.close()
