"""What an operator may do with the caches: count them, list a tenant's semantic entries, delete a wrong one."""
from __future__ import annotations

from dataclasses import dataclass

from .embedding import EmbeddingCache
from .exact import ExactCache
from .semantic import SemanticCache


@dataclass(frozen=True, slots=True)
class CacheCounts:
    """Entries held per layer; None: the layer is off."""
    exact: int | None
    semantic: int | None
    embeddings: int | None


class CacheAdmin:
    def __init__(self, semantic: SemanticCache | None, exact: ExactCache | None = None,
                 embeddings: EmbeddingCache | None = None):
        self._semantic = semantic  # None: the semantic cache is off, so there is nothing to list
        self._exact, self._embeddings = exact, embeddings

    def counts(self) -> CacheCounts:
        """Entries per layer (the exact count is a disk read: call off the event loop)."""
        return CacheCounts(*(None if c is None else len(c) for c in (self._exact, self._semantic, self._embeddings)))

    def entries(self, tenant: str, limit: int) -> list[dict]:
        """The tenant's newest entries first (disk reads: call off the event loop)."""
        return self._semantic.entries(tenant, limit) if self._semantic is not None else []

    def delete(self, tenant: str, entry_id: int) -> bool:
        """Deleting an entry also stops its exact copies from being served (see answers/cached.py)."""
        return self._semantic.delete(tenant, entry_id) if self._semantic is not None else False
