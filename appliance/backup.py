"""`appliance backup DEST` and `appliance restore SRC`: a consistent copy of a box's data while it serves.

Order matters, because boot repairs exactly one kind of gap: an index older than the store (a crash leaves that,
and boot builds the missing delta). So a backup takes the index versions first, then the store as of one moment
(SQLite's online backup), then the original files that copy refers to. Index and cache files are immutable once
published and are hard-linked where DEST is on the same file system; a version that garbage collection removes
mid-copy is taken again from the newer CURRENT.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from . import __version__
from .config import Settings
from .index import CURRENT, version_files
from .store import copied_contents, copy_database
from .wiring import lock_data_dir

MANIFEST = "backup.json"
FORMAT = 1
_ATTEMPTS = 5


class BackupError(RuntimeError):
    """A backup or restore that cannot be made as asked; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class BackupReport:
    folder: Path
    partitions: int
    documents: int
    files: int  # original files kept with their documents
    bytes: int
    seconds: float
    caches: bool
    keys: bool


def backup(settings: Settings, dest: Path, caches: bool = False) -> BackupReport:
    """Copy the data folder of `settings` (served or not) into the new folder `dest`."""
    started = time.monotonic()
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise BackupError(f"{dest} exists and is not empty: back up into a new folder")
    if not settings.store_path.exists():
        raise BackupError(f"no store at {settings.store_path}: nothing to back up (is data_dir right?)")
    partial = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for partition_dir in sorted(p for p in settings.index_dir.glob("p*") if p.is_dir()):
        _copy_version(partition_dir, partial / "indexes" / partition_dir.name)
    copy_database(settings.store_path, partial / settings.store_path.name)
    partitions, documents, blobs = copied_contents(partial / settings.store_path.name)
    for sha in sorted(blobs):
        relative = Path(sha[:2]) / sha
        if (settings.files_dir / relative).exists():  # gone only if its document was deleted since the copy
            _place(settings.files_dir / relative, partial / "files" / relative)
    keys = _copy_keys(settings, partial)
    if caches and settings.cache_dir.is_dir():
        _copy_caches(settings.cache_dir, partial / "cache")
    manifest = {"format": FORMAT, "version": __version__, "created": time.time(), "partitions": partitions,
                "documents": documents, "files": len(blobs), "caches": caches, "keys": keys}
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=1))
    if dest.exists():
        dest.rmdir()
    os.rename(partial, dest)
    return BackupReport(dest, partitions, documents, len(blobs), _size(dest), time.monotonic() - started,
                        caches, keys)


def restore(settings: Settings, source: Path) -> BackupReport:
    """Copy the backup `source` into the (new or empty) data folder of `settings`; the server is not running."""
    started = time.monotonic()
    source = Path(source)
    manifest = read_manifest(source)
    data_dir = settings.data_dir
    if data_dir.exists() and {p.name for p in data_dir.iterdir()} - {".lock", ".restore.partial"}:
        raise BackupError(f"{data_dir} is not empty: restore into a new data folder (data_dir)")
    if manifest["version"] != __version__:
        raise BackupError(f"the backup was made by version {manifest['version']}, this is {__version__}: restore "
                          "it with the version that made it, then upgrade")
    with lock_data_dir(data_dir):  # no server starts on it meanwhile
        partial = data_dir / ".restore.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(source, partial, ignore=shutil.ignore_patterns(MANIFEST, "keys.toml"))
        for entry in sorted(partial.iterdir()):  # the store last ("s" > "c", "f", "i"): a finished restore
            os.rename(entry, data_dir / entry.name)
        partial.rmdir()
    keys = _restore_keys(settings, source)
    return BackupReport(data_dir, manifest["partitions"], manifest["documents"], manifest["files"],
                        _size(data_dir), time.monotonic() - started, manifest["caches"], keys)


def read_manifest(source: Path) -> dict:
    try:
        manifest = json.loads((Path(source) / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{source} is not a backup ({MANIFEST}: {exc})") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{source}: backup format {manifest.get('format')!r}, this version reads {FORMAT}")
    return manifest


def _copy_version(partition_dir: Path, dest: Path) -> None:
    for _ in range(_ATTEMPTS):
        shutil.rmtree(dest, ignore_errors=True)
        try:
            current = version_files(partition_dir)
            if current is None:
                return
            for relative in current[1]:
                _place(partition_dir / relative, dest / relative)
            (dest / CURRENT).write_text(current[0])  # the version copied, whatever CURRENT says by now
            return
        except FileNotFoundError:  # a newer version was published and the one being copied collected
            continue
    raise BackupError(f"{partition_dir}: its index changed {_ATTEMPTS} times during the copy; try again")


def _copy_caches(cache_dir: Path, dest: Path) -> None:
    """The answer caches (diskcache folders): each one's SQLite through the online backup, its value files linked."""
    for path in sorted(cache_dir.rglob("*")):
        target = dest / path.relative_to(cache_dir)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.suffix == ".db":
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_database(path, target)
        elif not path.name.endswith(("-wal", "-shm")):
            try:
                _place(path, target)
            except FileNotFoundError:  # an entry evicted during the copy
                continue


def _copy_keys(settings: Settings, dest: Path) -> bool:
    keys_file = settings.admission.keys_file
    if not keys_file or not Path(keys_file).exists():
        return False
    shutil.copyfile(keys_file, dest / "keys.toml")
    os.chmod(dest / "keys.toml", 0o600)
    return True


def _restore_keys(settings: Settings, source: Path) -> bool:
    """The keys file goes where the settings point (never over an existing one); without a keys_file setting it
    is left in the backup and the caller says so."""
    kept = source / "keys.toml"
    keys_file = settings.admission.keys_file
    if not kept.exists() or not keys_file:
        return False
    if Path(keys_file).exists():
        raise BackupError(f"{keys_file} exists: the backup's keys were not copied over it (they are in {kept})")
    Path(keys_file).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kept, keys_file)
    os.chmod(keys_file, 0o600)
    return True


def _place(source: Path, target: Path) -> None:
    """A hard link where the file system allows one (the file never changes), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except FileNotFoundError:
        raise
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target)


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


__all__ = ["BackupError", "BackupReport", "backup", "read_manifest", "restore"]
