"""Embedding cache: normalised question -> its query vectors, so a repeated question skips the encoder."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .keys import normalise


class EmbeddingCache:
    def __init__(self, max_items: int):
        self.max_items = max_items
        self._items: OrderedDict[str, Any] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, text: str) -> Any | None:
        key = normalise(text)
        value = self._items.get(key)
        if value is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return value

    def put(self, text: str, value: Any) -> None:
        key = normalise(text)
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.max_items:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
