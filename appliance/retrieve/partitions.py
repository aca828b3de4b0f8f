"""Pick the partitions a search runs over, from metadata alone, before any index is touched."""
from __future__ import annotations

from dataclasses import dataclass

from ..store import Partition


@dataclass(slots=True, frozen=True)
class PartitionFilter:
    tenant: str
    names: tuple[str, ...] | None = None  # None: all of the tenant's partitions
    kinds: tuple[str, ...] | None = None
    time_from: float | None = None
    time_to: float | None = None


def select_partitions(candidates: list[Partition], where: PartitionFilter) -> list[Partition]:
    chosen = []
    for p in candidates:
        if p.tenant != where.tenant:
            continue  # a tenant never sees another tenant's partitions, whatever else it asks
        if where.names is not None and p.name not in where.names:
            continue
        if where.kinds is not None and p.kind not in where.kinds:
            continue
        if where.time_from is not None and (p.max_time is None or p.max_time < where.time_from):
            continue
        if where.time_to is not None and (p.min_time is None or p.min_time > where.time_to):
            continue
        chosen.append(p)
    return chosen
