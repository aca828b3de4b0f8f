"""Two copies of every tenant: this box pulls, from each peer's journal, what the tenants they share have changed.

Pull, not push: each box keeps, per peer, the last journal entry of that peer it applied (in its own store), and
asks for what follows. The journal entries are written in the same transaction as the documents, so the journal
is the durable outbox; a box that was down asks from where it stopped, before it says ready. An ingest waits
(up to cluster.sync_timeout_s) for the tenant's other box to have applied it, by asking that box to pull now;
a box that does not answer in time gets the write later, and the ingest says it is queued.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass, field
from itertools import groupby

import httpx

from ..config import ClusterBox, ClusterSettings
from ..library import JournalChange, KindConflict, LanguageConflict, Library
from .placement import Site
from .wire import FeedPage, WireError, box_tls, change_json, page_of

log = logging.getLogger("appliance.cluster")
FEED_LIMIT = 200  # journal entries per pull


@dataclass(slots=True, frozen=True)
class Copies:
    """Where a write is: stored durably on these boxes, and queued (in this box's journal) for those."""
    stored: tuple[str, ...]
    queued: tuple[str, ...] = ()


class ReplicaConflict(RuntimeError):
    """A peer's entry cannot be applied here (its partition has another kind): the pull stops at it, visibly."""


@dataclass(slots=True)
class PeerState:
    box: ClusterBox
    store: str | None  # the peer's store (its store_id) that `applied` counts in; None before its first answer
    applied: int  # the last entry of its journal applied here
    error: str | None = None  # why the last pull failed
    asked_after: int | None = None  # what it last asked of this box's journal (its cursor here), since boot
    asked_store: str | None = None  # and as which store (its writes are journalled here under that id)
    asked_at: float | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    advanced: asyncio.Condition = field(default_factory=asyncio.Condition)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Replicator:
    def __init__(self, site: Site, settings: ClusterSettings, secret: str, library: Library):
        self.site, self.settings, self.library = site, settings, library
        self._secret = secret
        self._client = httpx.AsyncClient(headers={"authorization": f"Bearer {secret}"}, timeout=30,
                                         trust_env=False,  # no proxy from the environment between boxes
                                         verify=box_tls(settings.ca_file))
        journal = library.journal
        self.store_id = journal.store_id
        self.peers = {b.name: PeerState(b, *journal.peer_cursor(b.name)) for b in site.peers}
        self._tasks: list[asyncio.Task] = []

    def authorized(self, header: str) -> bool:
        scheme, _, given = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._secret.encode())

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def catch_up(self) -> dict[str, str]:
        """Before this box says ready: everything each peer has for its tenants, indexed. A peer that does not
        answer is skipped (the whole site may be starting); its entries come with the background pulls."""
        async def one(peer: PeerState) -> tuple[str, str]:
            try:
                await asyncio.wait_for(self.pull(peer, index=True), self.settings.catch_up_timeout_s)
                return peer.box.name, f"caught up to entry {peer.applied}"
            except Exception as exc:  # unreachable, starting, a bad answer, a full disk: not a failed boot
                return peer.box.name, f"not caught up ({type(exc).__name__}: {exc}); pulling in the background"

        outcome = dict(await asyncio.gather(*(one(p) for p in self.peers.values())))
        for name, how in outcome.items():
            log.info("cluster: peer %s: %s", name, how)
        return outcome

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._pull_forever(p), name=f"pull-{p.box.name}")
                       for p in self.peers.values()]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._client.aclose()

    async def _pull_forever(self, peer: PeerState) -> None:
        while True:
            try:
                await self.pull(peer)
                if peer.error is not None:
                    log.info("cluster: peer %s reachable again, applied to entry %d", peer.box.name, peer.applied)
                peer.error = None
            except Exception as exc:  # unreachable, a bad feed, a full disk: kept pulling, said once per spell
                if peer.error is None:
                    log.warning("cluster: cannot pull from %s: %s: %s", peer.box.name, type(exc).__name__, exc,
                                exc_info=not isinstance(exc, (httpx.HTTPError, WireError, OSError)))
                peer.error = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(peer.wake.wait(), self.settings.pull_interval_s)
            peer.wake.clear()

    # -- pulling and applying -----------------------------------------------------------------------------------

    async def pull(self, peer: PeerState, index: bool = False) -> int:
        """Apply what `peer` has after the last entry applied, until it has nothing more; `index`: wait until
        it is searchable too (at boot). Returns the last entry applied."""
        async with peer.lock:
            while True:
                reply = await self._client.get(f"{peer.box.url}/cluster/journal", params={
                    "after": peer.applied, "box": self.site.me.name, "store": self.store_id})
                reply.raise_for_status()
                page: FeedPage = await asyncio.to_thread(page_of, reply.content)  # up to ~1 MB: off the loop
                if page.store != peer.store:  # its first answer, or a new store there (new disk, restore)
                    if peer.store is not None:
                        log.warning("cluster: %s has another store now: applying its journal from the start",
                                    peer.box.name)
                    restart = peer.store is not None and peer.applied > 0
                    peer.store, peer.applied = page.store, 0 if restart else peer.applied
                    if restart:
                        continue
                await self._apply(peer, page.changes, index)
                if page.next > peer.applied:
                    await asyncio.to_thread(self.library.journal.set_peer_cursor, peer.box.name, page.store, page.next)
                    async with peer.advanced:
                        peer.applied = page.next
                        peer.advanced.notify_all()
                if not page.more:
                    return peer.applied

    async def _apply(self, state: PeerState, changes: list[JournalChange], index: bool) -> None:
        """Consecutive entries of one partition are applied as one write (or one delete per document), journalled
        here as from the peer's store."""
        peer, origin = state.box, state.store
        def run_of(c: JournalChange) -> tuple:
            return c.tenant, c.partition, c.op == "deleted"

        for (tenant, partition, deleted), run in groupby(changes, key=run_of):
            entries = list(run)
            if deleted:
                for change in entries:
                    await self.library.delete(tenant, change.key, partition, wait=index, origin=origin)
                continue
            latest = {c.key: c for c in entries if c.document is not None}  # the same state, read once each
            docs = [c.document for c in latest.values() if c.document is not None]
            if not docs:
                continue
            announced = {d.file.sha256: d.file.size for d in docs if d.file}
            files = {}  # all fetched and checked before anything of the run is written
            for sha256 in set(announced) - set(await self._local_files(docs)):
                files[sha256] = await self._fetch_file(peer, sha256, announced[sha256])
            first = entries[0]
            language = None if first.language == "auto" else first.language
            try:
                try:
                    await self.library.write(tenant, partition, docs, first.kind, wait=index, files=files,
                                             language=language, origin=origin)
                except LanguageConflict:  # re-indexed to another language on one box: the documents still apply
                    await self.library.write(tenant, partition, docs, first.kind, wait=index, files=files,
                                             origin=origin)
            except KindConflict as exc:  # stop here rather than lose the entry; status shows the error
                raise ReplicaConflict(f"{tenant}/{partition} from {peer.name}: {exc}") from None

    async def _local_files(self, docs) -> list[str]:
        blobs = self.library.blobs
        return [d.file.sha256 for d in docs if d.file and await asyncio.to_thread(blobs.exists, d.file.sha256)]

    async def _fetch_file(self, peer: ClusterBox, sha256: str, size: int) -> bytes:
        """The peer's file, read no further than the size its journal announced and checked against that size and
        sha256: a short, long or altered file raises WireError, so the run is not applied and is pulled again."""
        digest, parts, got = hashlib.sha256(), [], 0
        async with self._client.stream("GET", f"{peer.url}/cluster/files/{sha256}") as reply:
            reply.raise_for_status()
            async for chunk in reply.aiter_bytes():
                got += len(chunk)
                if got > size:
                    break  # the rest is not read: a peer cannot make this box hold more than it announced
                digest.update(chunk)
                parts.append(chunk)
        if got != size or digest.hexdigest() != sha256:
            log.warning("cluster: file %s from %s refused: %s bytes (announced %d), sha256 %s", sha256, peer.name,
                        f"more than {size}" if got > size else got, size,
                        "not checked" if got > size else digest.hexdigest())
            raise WireError(f"file {sha256} from {peer.name} does not match what its journal announced "
                            f"({size} bytes and that sha256): not stored, pulled again later")
        return b"".join(parts)

    # -- what the routes ask -----------------------------------------------------------------------------------

    async def replicate(self, tenant: str, seq: int) -> Copies:
        """After a write on this box: wait for the tenant's other box to have applied it, or say it is queued."""
        me = self.site.me.name
        partner = self.site.partner(tenant)
        if partner is None or seq == 0:
            return Copies((me,))
        try:
            reply = await self._client.post(f"{partner.url}/cluster/sync", timeout=self.settings.sync_timeout_s + 1,
                                            json={"box": me, "seq": seq, "store": self.store_id})
            if reply.status_code == 200 and reply.json().get("applied", 0) >= seq:
                return Copies((me, partner.name))
        except httpx.HTTPError:
            pass
        return Copies((me,), (partner.name,))

    async def wait_applied(self, peer_name: str, store: str, seq: int) -> int:
        """A peer's store wrote up to `seq`: pull it now and answer once applied (or when sync_timeout_s is up;
        0 if still counting in another of its stores)."""
        peer = self.peers[peer_name]
        peer.wake.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.sync_timeout_s):
                async with peer.advanced:
                    await peer.advanced.wait_for(lambda: peer.store == store and peer.applied >= seq)
        return peer.applied if peer.store == store else 0

    def feed(self, peer_name: str, peer_store: str, after: int) -> bytes:
        """This box's journal after `after` for the tenants `peer_name` holds, less what came from its store
        `peer_store`, as JSON (a worker thread: store reads and serialising up to ~1 MB)."""
        peer = self.peers[peer_name]
        peer.asked_after, peer.asked_store, peer.asked_at = after, peer_store, time.time()
        changes, last, more = self.library.journal.changes_after(
            after, peer_store, lambda tenant: self.site.holds(peer_name, tenant), FEED_LIMIT)
        page = {"store": self.store_id, "changes": [change_json(c) for c in changes], "next": last, "more": more}
        return json.dumps(page, ensure_ascii=False).encode()

    def misdirected(self, tenant: str) -> ClusterBox | None:
        """The tenant's home box when this box holds no copy of it (the request went to the wrong box)."""
        return None if self.site.holds(self.site.me.name, tenant) else self.site.placement(tenant).home

    def status(self) -> dict:
        """Where this box's tenants live and how far each peer is behind on them (a worker thread: store reads).
        A peer's `pending` counts the entries after the one it last asked from; None until it has asked."""
        journal, site, me = self.library.journal, self.site, self.site.me.name
        tenants = {}
        for tenant in self.library.tenants():
            placed = site.placement(tenant)
            tenants[tenant] = {"documents": journal.tenant_documents(tenant), "home": placed.home.name,
                               "backup": placed.backup.name if placed.backup else None,
                               "held_here": site.holds(me, tenant)}
        peers = {}
        for name, peer in self.peers.items():
            pending = None
            if peer.asked_after is not None and peer.asked_store is not None:
                pending = {t: n for t, n in journal.pending_by_tenant(peer.asked_after, peer.asked_store).items()
                           if site.holds(name, t)}
            peers[name] = {"url": peer.box.url, "applied_from": peer.applied, "pull_error": peer.error,
                           "asked_after": peer.asked_after, "asked_at": peer.asked_at, "pending": pending}
        return {"box": me, "journal_head": journal.head(), "tenants": tenants, "peers": peers}


def load_secret(path: str) -> str:
    """The boxes' shared secret, of at least 32 characters, in a file as the keys file is kept: others cannot read
    it, and only its owner can write it (its group may read it: a Kubernetes secret volume's fsGroup)."""
    import os
    import stat

    info = os.stat(path)
    if info.st_mode & (stat.S_IRWXO | stat.S_IWGRP):
        raise PermissionError(f"{path}: others may read or write the cluster secret: chmod 640 {path}")
    secret = open(path, encoding="utf-8").read().strip()
    if len(secret) < 32:
        raise ValueError(f"{path}: the cluster secret must be at least 32 characters (e.g. `openssl rand -hex 32`)")
    return secret
