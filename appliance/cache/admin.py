"""What an operator may do with a tenant's cached answers: list the semantic entries, delete a wrong one."""
from __future__ import annotations

from .semantic import SemanticCache


class CacheAdmin:
    def __init__(self, semantic: SemanticCache | None):
        self._semantic = semantic  # None: the semantic cache is off, so there is nothing to list

    def entries(self, tenant: str, limit: int) -> list[dict]:
        """The tenant's newest entries first (disk reads: call off the event loop)."""
        return self._semantic.entries(tenant, limit) if self._semantic is not None else []

    def delete(self, tenant: str, entry_id: int) -> bool:
        """Deleting an entry also stops its exact copies from being served (see cached_answers)."""
        return self._semantic.delete(tenant, entry_id) if self._semantic is not None else False
