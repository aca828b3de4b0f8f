"""Original files, content-addressed: `<folder>/<first two hex digits>/<sha256>`.

A file is written to a temporary name, fsynced and renamed before the store commit that refers to it, so an
acknowledged document's file survives a crash; a file no document refers to any more is removed by `discard`.
Callers serialise `put` and `discard` of the same hash (the library's write lock), so a file being referred to
again is never removed under it.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from pathlib import Path

from ..paths import file_sha256, fsync_dir

_SHA256 = re.compile(r"[0-9a-f]{64}")


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        if not _SHA256.fullmatch(sha256):
            raise ValueError(f"not a sha256: {sha256!r}")
        return self.folder / sha256[:2] / sha256

    def put(self, data: bytes | Path, sha256: str | None = None) -> str:
        """Keep the bytes, or a file's (an upload in the spool: linked, not copied, where it can be), once per
        content; returns their sha256."""
        digest = sha256 or (sha256_of(data) if isinstance(data, bytes) else file_sha256(data))
        final = self.path(digest)
        size = len(data) if isinstance(data, bytes) else data.stat().st_size
        if final.exists() and final.stat().st_size == size:
            return digest
        final.parent.mkdir(exist_ok=True)
        tmp = final.parent / f".tmp-{uuid.uuid4().hex}"
        try:
            _write(tmp, data)
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk leaves nothing half-written behind
            raise
        fsync_dir(final.parent)
        return digest

    def read(self, sha256: str) -> bytes:
        return self.path(sha256).read_bytes()

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def discard(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)


def _write(tmp: Path, data: bytes | Path) -> None:
    if isinstance(data, Path):
        try:
            os.link(data, tmp)  # the spool is on the data folder's file system: no copy
        except OSError:
            shutil.copyfile(data, tmp)
        with open(tmp, "rb") as out:
            os.fsync(out.fileno())
        return
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
