"""Semantic cache: answers found by a similar earlier question, per tenant, with a second check.

Entries live in a diskcache store (question, its vectors, the partitions and index versions used, the answer);
each tenant has its own small USearch index of question vectors per encoder (a question is encoded by the encoder
of its language: English by MiniLM, Chinese by USE), rebuilt from the store at boot. A hit needs
(1) cosine similarity >= threshold, (2) the same scope (prompt version, requested model, task, length),
(3) the same index versions of every partition it used, and (4) no objection from `verify.near_miss`.
A question the encoder cannot represent is neither answered nor stored: above `max_unknown` (0.1) of its word
pieces are [UNK]. Chinese questions get their own threshold and a check of their terms (`verify`), and by default
(`cache.semantic = "auto"`) skip the cache: on AFQMC even the best setting served a wrong answer for about 3 hits
in 4 (bench/results/languages.md).
Measured with MiniLM: AFQMC's Chinese questions have 0.22-1.0 (median 0.77), QQP's English ones
at most 0.18 (4 of 4,947 above 0); at cosine 0.95 any cut from 0 to 0.3 kept all 238 right QQP hits (52 wrong) and
removed all 894 AFQMC hits, 866 of them wrong.

An id names an entry only together with its tenant: every read and delete checks the stored entry's tenant. Ids
come from a counter in a store of its own that never evicts; in the size-limited entry store, culling could drop
the counter and the next id would repeat one still held in memory, by this tenant or another.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from collections.abc import Mapping
from pathlib import Path

import diskcache
import numpy as np
from usearch.index import Index

from ..config import CacheSettings
from ..text import question_language
from .verify import near_miss

CANDIDATES = 8  # nearest questions examined per lookup: a closer one may fail its check where the next passes
UNREPRESENTED = "the encoder cannot represent the question"
CHINESE_OFF = "Chinese questions skip the semantic cache (cache.semantic = auto; on serves them)"
_DEFAULTS = CacheSettings()


@dataclass(slots=True, frozen=True)
class SemanticParams:
    threshold: float
    late_threshold: float
    max_entries: int  # per tenant
    ttl_s: float
    max_unknown: float = _DEFAULTS.semantic_max_unknown  # share of unknown word pieces above which it stays out
    threshold_zh: float = _DEFAULTS.semantic_threshold_zh  # the cosine a Chinese question needs (its encoder's)
    max_term_difference_zh: float = _DEFAULTS.semantic_max_term_difference_zh  # see verify.near_miss
    chinese: bool = True  # Chinese questions answered and stored at all (`cache.semantic = "on"`; not with auto)

    @classmethod
    def of(cls, cache: CacheSettings) -> "SemanticParams":
        return cls(cache.semantic_threshold, cache.semantic_late_threshold, cache.semantic_max_entries, cache.ttl_s,
                   cache.semantic_max_unknown, cache.semantic_threshold_zh, cache.semantic_max_term_difference_zh,
                   chinese=cache.semantic == "on")

    def threshold_for(self, question: str) -> float:
        return self.threshold_zh if is_chinese(question) else self.threshold


def is_chinese(question: str) -> bool:
    """Chinese, or Chinese and English mixed: what the encoder choice (`Retriever.encoder_for`) sends to USE."""
    return question_language(question) != "en"


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
    def __init__(self, folder: Path, dims: Mapping[str, int] | int, params: SemanticParams, size_limit_bytes: int):
        """`dims`: each encoder's vector size (a bare int: one unnamed encoder)."""
        self.dims = dict(dims) if isinstance(dims, Mapping) else {"": dims}
        self.params = params
        self._disk = diskcache.Cache(str(folder), size_limit=size_limit_bytes, eviction_policy="least-recently-stored")
        self._ids = diskcache.Cache(str(folder.with_name(folder.name + "-ids")), eviction_policy="none")
        self._tenants: dict[tuple[str, str], _Tenant] = {}  # (tenant, encoder) -> its questions
        self._lock = threading.Lock()  # the indexes are used from worker threads
        self._load()

    def _load(self) -> None:
        """Rebuild the per-tenant indexes from the store, oldest entry first."""
        ids = sorted(int(k[1:]) for k in self._disk.iterkeys() if isinstance(k, str) and k.startswith("e"))
        for entry_id in ids:
            entry = self._disk.get(f"e{entry_id}")
            encoder = self._encoder_of(entry)
            if encoder is None:  # expired, or written by an encoder this box no longer runs
                self._disk.delete(f"e{entry_id}")
                continue
            tenant = self._tenant(entry["tenant"], encoder)
            tenant.index.add(entry_id, entry["vector"].astype(np.float32))
            tenant.meta[entry_id] = (entry["scope"], entry["versions"])
        self._raise_counter(max(ids, default=0))

    def _raise_counter(self, floor: int) -> None:
        """Start the counter past every id on disk and past the counter that earlier versions kept in the entry
        store (a lost or older counter must not hand out an id again)."""
        floor = max(floor, int(self._disk.pop("next_id", 0) or 0))
        with self._ids.transact():
            if int(self._ids.get("next_id", 0)) < floor:
                self._ids.set("next_id", floor)

    def _encoder_of(self, entry: dict | None) -> str | None:
        if entry is None:
            return None
        encoder = entry.get("encoder")
        if encoder is None:  # written before encoders were named: the one of its size, if any
            encoder = next((name for name, dim in self.dims.items() if dim == entry["vector"].shape[-1]), None)
        return encoder if encoder in self.dims and self.dims[encoder] == entry["vector"].shape[-1] else None

    def _tenant(self, name: str, encoder: str) -> _Tenant:
        tenant = self._tenants.get((name, encoder))
        if tenant is None:
            tenant = self._tenants[(name, encoder)] = _Tenant(self.dims[encoder])
        return tenant

    def serves(self, encoder: str) -> bool:
        """Whether questions encoded by `encoder` have a space here (auto: only encoders it was calibrated for)."""
        return encoder in self.dims or (not encoder and len(self.dims) == 1)

    def _encoder(self, encoder: str) -> str:
        if encoder not in self.dims:
            if encoder or len(self.dims) != 1:
                raise KeyError(f"the semantic cache has no space for encoder {encoder!r}")
            return next(iter(self.dims))
        return encoder

    def lookup(self, tenant: str, scope: str, question: str, vector: np.ndarray, versions: dict[str, int],
               tokens: np.ndarray | None = None, unknown: float = 0.0, encoder: str = "") -> Lookup:
        """`unknown`: the question's share of word pieces its encoder could not represent (`Query.unknown`);
        `encoder`: the one `vector` came from (its questions are a space of their own)."""
        rejected: list[str] = []
        if unknown > self.params.max_unknown:
            return Lookup(None, [UNREPRESENTED])  # its vector is near every other such question's
        if not self.params.chinese and is_chinese(question):
            return Lookup(None, [CHINESE_OFF])
        encoder = self._encoder(encoder)
        with self._lock:
            space = self._tenants.get((tenant, encoder))
            if space is None or not len(space.index):
                return Lookup(None, rejected)
            found = space.index.search(vector.astype(np.float32), min(CANDIDATES, len(space.index)))
            candidates = [(int(k), 1.0 - float(d)) for k, d in zip(found.keys, found.distances)]
        threshold = self.params.threshold_for(question)
        for entry_id, similarity in candidates:
            if similarity < threshold:
                break  # nearest first: the rest are further away
            meta = space.meta.get(entry_id)
            if meta is None or meta[0] != scope:
                continue
            if meta[1] != versions:
                self._forget(tenant, entry_id, encoder)
                rejected.append("index changed since it was cached")
                continue
            entry = self._entry(tenant, entry_id)
            if entry is None:  # expired, evicted, or stored as another tenant's
                self._forget(tenant, entry_id, encoder)
                continue
            reason = near_miss(entry["question"], question, entry["tokens"], tokens, self.params.late_threshold,
                               self.params.max_term_difference_zh)
            if reason is not None:
                rejected.append(reason)
                continue
            return Lookup(SemanticHit(entry_id, entry["question"], similarity, entry["payload"]), rejected)
        return Lookup(None, rejected)

    def store(self, tenant: str, scope: str, question: str, vector: np.ndarray, versions: dict[str, int],
              payload: dict, tokens: np.ndarray | None = None, unknown: float = 0.0,
              encoder: str = "") -> int | None:
        """The new entry's id, or None when the encoder could not represent the question (see `lookup`)."""
        if unknown > self.params.max_unknown or (not self.params.chinese and is_chinese(question)):
            return None
        encoder = self._encoder(encoder)
        entry_id = int(self._ids.incr("next_id"))
        entry = {"tenant": tenant, "encoder": encoder, "scope": scope, "question": question,
                 "vector": vector.astype(np.float16),
                 "tokens": None if tokens is None else tokens.astype(np.float16), "versions": dict(versions),
                 "payload": payload, "created": time.time()}
        self._disk.set(f"e{entry_id}", entry, expire=self.params.ttl_s)
        with self._lock:
            space = self._tenant(tenant, encoder)
            space.index.add(entry_id, vector.astype(np.float32))
            space.meta[entry_id] = (scope, dict(versions))
            oldest = [k for k, _ in zip(space.meta, range(len(space.meta) - self.params.max_entries))]
        for entry_id_old in oldest:
            self._forget(tenant, entry_id_old, encoder)
        return entry_id

    def _spaces(self, tenant: str) -> list[tuple[str, _Tenant]]:
        """The tenant's question spaces, one per encoder, with their encoders' names."""
        with self._lock:
            return self._spaces_locked(tenant)

    def invalidate(self, tenant: str, partition: str, version: int) -> int:
        """Drop the tenant's entries that used `partition` at any version other than `version`."""
        dropped = 0
        for encoder, space in self._spaces(tenant):
            with self._lock:
                stale = [k for k, (_, versions) in space.meta.items()
                         if partition in versions and versions[partition] != version]
            for entry_id in stale:
                self._forget(tenant, entry_id, encoder)
            dropped += len(stale)
        return dropped

    def entries(self, tenant: str, limit: int = 100) -> list[dict]:
        """The tenant's newest entries first (over all its encoders' spaces), for an operator to inspect."""
        with self._lock:
            ids = sorted((k for _, space in self._spaces_locked(tenant) for k in space.meta), reverse=True)[:limit]
        out = []
        for entry_id in ids:
            entry = self._entry(tenant, entry_id)
            if entry is not None:
                out.append({"id": entry_id, "question": entry["question"], "created": entry["created"],
                            "versions": entry["versions"], "answer": entry["payload"].get("answer", ""),
                            "encoder": entry.get("encoder", "")})
        return out

    def holds(self, tenant: str, entry_id: int) -> bool:
        """Whether the tenant's entry is still stored: an exact copy of it is served only while it is."""
        return self._space_of(tenant, entry_id) is not None and self._entry(tenant, entry_id) is not None

    def delete(self, tenant: str, entry_id: int) -> bool:
        """Remove one entry of this tenant; another tenant's id, or an expired one, is reported as not found."""
        encoder = self._space_of(tenant, entry_id)
        if encoder is None:
            return False
        found = self._entry(tenant, entry_id) is not None
        self._forget(tenant, entry_id, encoder)
        return found

    def _space_of(self, tenant: str, entry_id: int) -> str | None:
        """The encoder whose space of this tenant holds the id, if one does."""
        with self._lock:
            return next((encoder for encoder, space in self._spaces_locked(tenant) if entry_id in space.meta), None)

    def _spaces_locked(self, tenant: str) -> list[tuple[str, _Tenant]]:
        return [(encoder, space) for (name, encoder), space in self._tenants.items() if name == tenant]

    def _entry(self, tenant: str, entry_id: int) -> dict | None:
        """The stored entry with this id if it is this tenant's."""
        entry = self._disk.get(f"e{entry_id}")
        return entry if entry is not None and entry.get("tenant") == tenant else None

    def _forget(self, tenant: str, entry_id: int, encoder: str) -> None:
        """Drop the id from the tenant's index of `encoder`, and the stored entry only if it is the tenant's."""
        with self._lock:
            space = self._tenants.get((tenant, encoder))
            if space is not None and space.meta.pop(entry_id, None) is not None:
                space.index.remove(entry_id)
        with self._disk.transact():
            if self._entry(tenant, entry_id) is not None:
                self._disk.delete(f"e{entry_id}")

    def __len__(self) -> int:
        with self._lock:  # lookups on worker threads add spaces meanwhile
            return sum(len(t.meta) for t in self._tenants.values())

    def close(self) -> None:
        self._disk.close()
        self._ids.close()
