"""Uploaded files wait on disk, not in memory, within a box-wide byte budget.

A POST /v1/files body may carry `parse.max_upload_bytes` (256 MiB) and ~200 requests may be admitted at once: held in
memory through parsing and the index wait, that was ~48 GiB. Here each file part is written to
`<data_dir>/spool` as it arrives (0600, a name of its own) and removed when its request ends. What the requests
in flight hold there is counted against `parse.spool_max_bytes`: past it a request is refused with 503 (the box
is full for everyone); one tenant may hold at most `parse.spool_tenant_share` of it (429 for that tenant, so one
tenant's flood leaves room for the others). A declared Content-Length is reserved before the body is read, so a
refusal costs no upload; a body without one reserves as it arrives.
"""
from __future__ import annotations

import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..http.errors import ApiError

STEP = 1 << 20  # a chunked body reserves this much at a time


class UploadSpool:
    def __init__(self, folder: Path, max_bytes: int, tenant_share: float):
        self.folder, self.max_bytes = Path(folder), max_bytes
        self.tenant_max = int(max_bytes * tenant_share)
        self._lock = threading.Lock()
        self._held = 0
        self._by_tenant: dict[str, int] = {}

    @property
    def held(self) -> int:
        return self._held

    def clear(self) -> None:
        """At boot, with the data folder locked: what a crash left behind belongs to no request."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)

    def open(self, tenant: str | None) -> SpooledUpload:
        """A request's share: `tenant` from its API key (None in open mode, where only the box-wide budget holds:
        the tenant a body names is read after the bytes it would be checked on)."""
        return SpooledUpload(self, tenant)

    def _reserve(self, tenant: str | None, size: int) -> None:
        with self._lock:
            mine = self._by_tenant.get(tenant, 0)
            if tenant is not None and mine + size > self.tenant_max:
                raise ApiError.too_many("upload_spool_share", f"this tenant's uploads in progress hold {mine} bytes; "
                                        f"another {size} would pass its share of parse.spool_max_bytes "
                                        f"({self.tenant_max} bytes)", retry_after_s=5)
            if self._held + size > self.max_bytes:
                raise ApiError.unavailable("upload_spool_full", f"uploads in progress fill the box's spool "
                                           f"(parse.spool_max_bytes = {self.max_bytes} bytes); try again shortly")
            self._held += size
            self._by_tenant[tenant] = mine + size

    def _release(self, tenant: str | None, size: int) -> None:
        with self._lock:
            self._held -= size
            left = self._by_tenant.get(tenant, 0) - size
            if left > 0:
                self._by_tenant[tenant] = left
            else:
                self._by_tenant.pop(tenant, None)


@dataclass(eq=False)
class SpooledUpload:
    """One request's reservation and files; `close()` (always called) removes them and frees the bytes."""
    spool: UploadSpool
    tenant: str | None
    reserved: int = 0
    used: int = 0
    paths: list[Path] = field(default_factory=list)

    def reserve_declared(self, size: int) -> None:
        self._grow(size)

    def count(self, size: int) -> None:
        """`size` more bytes of the body arrived: reserve beyond what is held, a step at a time."""
        self.used += size
        if self.used > self.reserved:
            self._grow(max(STEP, self.used - self.reserved))

    def new_file(self) -> tuple[Path, BinaryIO]:
        path = self.spool.folder / f"{uuid.uuid4().hex}.part"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        self.paths.append(path)
        return path, os.fdopen(fd, "wb")

    def release(self) -> None:
        """Free the reserved bytes: the files were stored (linked into the blob store), or are about to go."""
        self.spool._release(self.tenant, self.reserved)
        self.reserved = 0

    def close(self) -> None:
        """Remove the request's files and free its bytes (a worker thread's call: unlinking 256 MiB takes a
        while)."""
        for path in self.paths:
            path.unlink(missing_ok=True)
        self.paths.clear()
        self.release()

    def _grow(self, size: int) -> None:
        self.spool._reserve(self.tenant, size)
        self.reserved += size
