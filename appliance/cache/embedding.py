"""Embedding cache: (tenant, encoder, exact text) -> its query vectors, so a repeated question skips the encoder.

Keyed by the exact text the encoder saw, so a vector is always that text's own (a normalised key would let the
first spelling decide every later one's vector), and by tenant, so one tenant's questions neither decide another's
vectors nor show, through the encode time, whether another tenant asked the same thing. Bounded by entries and by
bytes: token vectors make one entry up to ~195 KB.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict

from ..config import CacheSettings
from ..encode import Query

ENTRY_OVERHEAD = 256  # bytes per entry besides its arrays: key, tuple, dict slot, Query object


class EmbeddingCache:
    def __init__(self, max_items: int, max_bytes: int = CacheSettings().embedding_mib << 20):
        self.max_items, self.max_bytes = max_items, max_bytes
        self._items: OrderedDict[tuple[str, str, bytes], tuple[Query, int]] = OrderedDict()  # key -> (vectors, bytes)
        self.nbytes = 0
        self.hits = self.misses = 0

    def get(self, tenant: str, text: str, encoder: str = "") -> Query | None:
        key = _key(tenant, text, encoder)
        found = self._items.get(key)
        if found is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return found[0]

    def put(self, tenant: str, text: str, value: Query, encoder: str = "") -> None:
        size = _size(value)
        if size > self.max_bytes:
            return  # would evict everything else and still not fit
        key = _key(tenant, text, encoder)
        old = self._items.pop(key, None)
        if old is not None:
            self.nbytes -= old[1]
        self._items[key] = (value, size)
        self.nbytes += size
        while len(self._items) > self.max_items or self.nbytes > self.max_bytes:
            self.nbytes -= self._items.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._items)


def _key(tenant: str, text: str, encoder: str) -> tuple[str, str, bytes]:
    """A digest, not the text: a question's length is bounded elsewhere, the key's memory here."""
    return tenant, encoder, hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _size(value: Query) -> int:
    return ENTRY_OVERHEAD + value.dense.nbytes + (value.tokens.nbytes if value.tokens is not None else 0)
