"""Semantic cache: answers found by a similar earlier question, per tenant, with a second check.

Entries live in a diskcache store (question, its vectors, the partitions and index versions used, the answer);
each tenant has its own small USearch index of question vectors, rebuilt from the store at boot. A hit needs
(1) cosine similarity >= threshold, (2) the same scope (prompt version, requested model, task, length),
(3) the same index versions of every partition it used, and (4) no objection from `verify.near_miss`.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import diskcache
import numpy as np
from usearch.index import Index

from .verify import near_miss

CANDIDATES = 8  # nearest questions examined per lookup: a closer one may fail its check where the next passes


@dataclass(slots=True, frozen=True)
class SemanticParams:
    threshold: float
    late_threshold: float
    max_entries: int  # per tenant
    ttl_s: float


@dataclass(slots=True)
class SemanticHit:
    entry_id: int
    question: str
    similarity: float
    payload: dict


@dataclass(slots=True)
class Lookup:
    hit: SemanticHit | None
    rejected: list[str]  # why near candidates were turned down (for logs and evaluation)


class _Tenant:
    def __init__(self, dim: int):
        self.index = Index(ndim=dim, metric="cos", dtype="f16", connectivity=16)
        self.meta: OrderedDict[int, tuple[str, dict[str, int]]] = OrderedDict()  # id -> (scope, versions), oldest first


class SemanticCache:
    def __init__(self, folder: Path, dim: int, params: SemanticParams, size_limit_bytes: int):
        self.dim, self.params = dim, params
        self._disk = diskcache.Cache(str(folder), size_limit=size_limit_bytes, eviction_policy="least-recently-stored")
        self._tenants: dict[str, _Tenant] = {}
        self._lock = threading.Lock()  # the indexes are used from worker threads
        self._load()

    def _load(self) -> None:
        """Rebuild the per-tenant indexes from the store, oldest entry first."""
        ids = sorted(int(k[1:]) for k in self._disk.iterkeys() if isinstance(k, str) and k.startswith("e"))
        for entry_id in ids:
            entry = self._disk.get(f"e{entry_id}")
            if entry is None or entry["vector"].shape[-1] != self.dim:  # expired, or written by another encoder
                self._disk.delete(f"e{entry_id}")
                continue
            tenant = self._tenant(entry["tenant"])
            tenant.index.add(entry_id, entry["vector"].astype(np.float32))
            tenant.meta[entry_id] = (entry["scope"], entry["versions"])

    def _tenant(self, name: str) -> _Tenant:
        tenant = self._tenants.get(name)
        if tenant is None:
            tenant = self._tenants[name] = _Tenant(self.dim)
        return tenant

    def lookup(self, tenant: str, scope: str, question: str, vector: np.ndarray, versions: dict[str, int],
               tokens: np.ndarray | None = None) -> Lookup:
        rejected: list[str] = []
        with self._lock:
            space = self._tenants.get(tenant)
            if space is None or not len(space.index):
                return Lookup(None, rejected)
            found = space.index.search(vector.astype(np.float32), min(CANDIDATES, len(space.index)))
            candidates = [(int(k), 1.0 - float(d)) for k, d in zip(found.keys, found.distances)]
        for entry_id, similarity in candidates:
            if similarity < self.params.threshold:
                break  # nearest first: the rest are further away
            meta = space.meta.get(entry_id)
            if meta is None or meta[0] != scope:
                continue
            if meta[1] != versions:
                self._forget(tenant, entry_id)
                rejected.append("index changed since it was cached")
                continue
            entry = self._disk.get(f"e{entry_id}")
            if entry is None:  # expired or evicted from the store
                self._forget(tenant, entry_id)
                continue
            reason = near_miss(entry["question"], question, entry["tokens"], tokens, self.params.late_threshold)
            if reason is not None:
                rejected.append(reason)
                continue
            return Lookup(SemanticHit(entry_id, entry["question"], similarity, entry["payload"]), rejected)
        return Lookup(None, rejected)

    def store(self, tenant: str, scope: str, question: str, vector: np.ndarray, versions: dict[str, int],
              payload: dict, tokens: np.ndarray | None = None) -> int:
        entry_id = int(self._disk.incr("next_id"))
        entry = {"tenant": tenant, "scope": scope, "question": question, "vector": vector.astype(np.float16),
                 "tokens": None if tokens is None else tokens.astype(np.float16), "versions": dict(versions),
                 "payload": payload, "created": time.time()}
        self._disk.set(f"e{entry_id}", entry, expire=self.params.ttl_s)
        with self._lock:
            space = self._tenant(tenant)
            space.index.add(entry_id, vector.astype(np.float32))
            space.meta[entry_id] = (scope, dict(versions))
            oldest = [k for k, _ in zip(space.meta, range(len(space.meta) - self.params.max_entries))]
        for entry_id_old in oldest:
            self._forget(tenant, entry_id_old)
        return entry_id

    def invalidate(self, tenant: str, partition: str, version: int) -> int:
        """Drop the tenant's entries that used `partition` at any version other than `version`."""
        space = self._tenants.get(tenant)
        if space is None:
            return 0
        with self._lock:
            stale = [k for k, (_, versions) in space.meta.items()
                     if partition in versions and versions[partition] != version]
        for entry_id in stale:
            self._forget(tenant, entry_id)
        return len(stale)

    def entries(self, tenant: str, limit: int = 100) -> list[dict]:
        """The tenant's newest entries first, for an operator to inspect."""
        space = self._tenants.get(tenant)
        if space is None:
            return []
        with self._lock:
            ids = list(reversed(space.meta))[:limit]
        out = []
        for entry_id in ids:
            entry = self._disk.get(f"e{entry_id}")
            if entry is not None:
                out.append({"id": entry_id, "question": entry["question"], "created": entry["created"],
                            "versions": entry["versions"], "answer": entry["payload"].get("answer", "")})
        return out

    def holds(self, tenant: str, entry_id: int) -> bool:
        space = self._tenants.get(tenant)
        return space is not None and entry_id in space.meta

    def delete(self, tenant: str, entry_id: int) -> bool:
        """Remove one entry of this tenant; another tenant's id is reported as not found."""
        space = self._tenants.get(tenant)
        if space is None or entry_id not in space.meta:
            return False
        self._forget(tenant, entry_id)
        return True

    def _forget(self, tenant: str, entry_id: int) -> None:
        with self._lock:
            space = self._tenants.get(tenant)
            if space is not None and space.meta.pop(entry_id, None) is not None:
                space.index.remove(entry_id)
        self._disk.delete(f"e{entry_id}")

    def __len__(self) -> int:
        return sum(len(t.meta) for t in self._tenants.values())

    def close(self) -> None:
        self._disk.close()
