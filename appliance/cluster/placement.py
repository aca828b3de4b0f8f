"""Where each tenant lives on a site of several boxes: a home box and a backup box, by consistent hashing.

A tenant's name hashes to one of SLOTS slots (CRC-32 mod SLOTS, which HAProxy computes the same way with its
`crc32` converter, so the balancer and the boxes agree without sharing any state), and each slot ranks the boxes
by rendezvous hashing: the first is the slot's home, the second its backup. Adding a box makes it first for about
1/(n+1) of the slots and moves nothing else; removing one moves only its own slots.
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

from ..config import ClusterBox

SLOTS = 256  # many more than boxes, so each box's share is even; few enough to list in HAProxy's configuration


@dataclass(slots=True, frozen=True)
class Placement:
    slot: int
    home: ClusterBox
    backup: ClusterBox | None  # None on a site of one box

    @property
    def holders(self) -> tuple[ClusterBox, ...]:
        return (self.home,) if self.backup is None else (self.home, self.backup)


def tenant_slot(tenant: str) -> int:
    return zlib.crc32(tenant.encode("utf-8")) % SLOTS


class Site:
    """The boxes of the boxes file, seen from one of them (`self_name`)."""

    def __init__(self, boxes: tuple[ClusterBox, ...], self_name: str):
        if not boxes or self_name not in {b.name for b in boxes}:
            raise ValueError(f"{self_name!r} is not one of the boxes")
        self.boxes = boxes
        self.me = next(b for b in boxes if b.name == self_name)
        self.peers = tuple(b for b in boxes if b.name != self_name)
        self._slots = [self._rank(slot) for slot in range(SLOTS)]

    def _rank(self, slot: int) -> Placement:
        def score(box: ClusterBox) -> bytes:
            return hashlib.sha256(f"{box.name}\0{slot}".encode()).digest()

        ranked = sorted(self.boxes, key=score, reverse=True)
        return Placement(slot, ranked[0], ranked[1] if len(ranked) > 1 else None)

    def placement(self, tenant: str) -> Placement:
        return self._slots[tenant_slot(tenant)]

    def slot_placement(self, slot: int) -> Placement:
        return self._slots[slot]

    def holds(self, box: str, tenant: str) -> bool:
        """Whether `box` keeps a copy of the tenant's documents (as its home or its backup)."""
        return any(b.name == box for b in self.placement(tenant).holders)

    def box(self, name: str) -> ClusterBox | None:
        return next((b for b in self.boxes if b.name == name), None)

    def partner(self, tenant: str) -> ClusterBox | None:
        """The tenant's other box, seen from this one (None: this box does not hold it, or is alone)."""
        holders = self.placement(tenant).holders
        if self.me not in holders:
            return None
        return next((b for b in holders if b != self.me), None)
