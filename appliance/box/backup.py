"""`appliance backup DEST` and `appliance restore SRC`: a consistent copy of a box's data while it serves.

Order matters, because boot repairs exactly one kind of gap: an index older than the store (a crash leaves that,
and boot builds the missing delta). So a backup takes the index versions first, then the store as of one moment
(SQLite's online backup), then the original files that copy refers to. Index and cache files are immutable once
published and are hard-linked where DEST is on the same file system; a version that garbage collection removes
mid-copy is taken again from the newer CURRENT. A backup is private (folders 0700, its copies 0600, a .tar
archive 0600). `restore` treats it as untrusted input (backup_archive): no links, no names outside it, no caches.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..config import Settings
from ..index import CURRENT, version_files
from ..store import copied_contents, copy_database
from ..wiring import lock_data_dir
from .backup_archive import KEYS, MANIFEST, UnsafeBackup, extract, read_member, write_archive
from .keys_file import KeysFileError, read_keys, service_group

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
    """Copy the data folder of `settings` (served or not) into the new folder `dest` (0700), or into the new tar
    archive `dest` (0600) when its name ends in .tar."""
    started = time.monotonic()
    dest = Path(dest)
    archive = dest.suffix == ".tar"
    if archive and (dest.exists() or dest.is_symlink()):
        raise BackupError(f"{dest} exists: back up into a new archive")
    if not archive and dest.exists() and any(dest.iterdir()):
        raise BackupError(f"{dest} exists and is not empty: back up into a new folder")
    if not settings.store_path.exists():
        raise BackupError(f"no store at {settings.store_path}: nothing to back up (is data_dir right?)")
    partial = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.mkdir(mode=0o700)  # the store and the keys' hashes are no one else's to read
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
    _private(partial)
    if archive:
        try:
            write_archive(partial, dest)
        finally:
            shutil.rmtree(partial)
    else:
        if dest.exists():
            dest.rmdir()
        os.rename(partial, dest)
    return BackupReport(dest, partitions, documents, len(blobs), _size(dest), time.monotonic() - started,
                        caches, keys)


def restore(settings: Settings, source: Path) -> BackupReport:
    """Copy the backup `source` (a folder, or a tar archive of one) into the (new or empty) data folder of
    `settings`; the server is not running. The backup is untrusted (backup_archive): links and names outside it
    refuse the restore, the caches are never restored (they start cold) and the keys file must pass the server's
    own check."""
    started = time.monotonic()
    source = Path(source)
    manifest = read_manifest(source)
    data_dir = settings.data_dir
    if data_dir.exists() and {p.name for p in data_dir.iterdir()} - {".lock", ".restore.partial"}:
        raise BackupError(f"{data_dir} is not empty: restore into a new data folder (data_dir)")
    if manifest["version"] != __version__:
        raise BackupError(f"the backup was made by version {manifest['version']}, this is {__version__}: restore "
                          "it with the version that made it, then upgrade")
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new one is private; an existing one keeps its mode
    with lock_data_dir(data_dir):  # no server starts on it meanwhile
        partial = data_dir / ".restore.partial"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            keys = _unpack(settings, source, partial)
        except BackupError:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        _give_to_owner(partial, data_dir)
        for name in ("files", "indexes", "store.sqlite3"):  # the store last: a finished restore
            if (partial / name).exists():
                os.rename(partial / name, data_dir / name)
        shutil.rmtree(partial)  # the manifest, and the keys file where it was not installed
    return BackupReport(data_dir, manifest["partitions"], manifest["documents"], manifest["files"],
                        _size(data_dir), time.monotonic() - started, False, keys)


def _unpack(settings: Settings, source: Path, partial: Path) -> bool:
    try:
        extract(source, partial)
        return _restore_keys(settings, partial / KEYS, source)
    except (UnsafeBackup, OSError) as exc:
        raise BackupError(f"{source} is refused: {exc}; nothing was restored") from None


def read_manifest(source: Path) -> dict:
    try:
        text = read_member(source, MANIFEST)
        manifest = json.loads(text if text is not None else "missing")
    except UnsafeBackup as exc:
        raise BackupError(f"{source} is refused: {exc}; nothing was restored") from None
    except (OSError, ValueError) as exc:
        raise BackupError(f"{source} is not a backup ({MANIFEST}: {exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{source}: backup format {_get(manifest, 'format')!r}, this version reads {FORMAT}")
    return manifest


def _get(manifest, key: str):
    return manifest.get(key) if isinstance(manifest, dict) else None


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


def _restore_keys(settings: Settings, kept: Path, source: Path) -> bool:
    """The keys file goes where the settings point (never over an existing one, never through a link), after the
    server's own check of it; without a keys_file setting it is left in the backup and the caller says so."""
    keys_file = settings.admission.keys_file
    if not kept.exists() or not keys_file:
        return False
    try:
        read_keys(kept)
    except KeysFileError as exc:
        raise UnsafeBackup(f"its keys file is refused ({exc})") from None
    if Path(keys_file).exists() or Path(keys_file).is_symlink():
        raise BackupError(f"{keys_file} exists: the backup's keys were not copied over it (they are in "
                          f"{source})")
    Path(keys_file).parent.mkdir(parents=True, exist_ok=True)
    group = service_group(settings.data_dir)  # root restoring a service install's keys: the service must read them
    fd = os.open(keys_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "wb") as out:
        if group is not None:  # before the keys are written, as `keys add` does
            os.fchown(out.fileno(), -1, group)
            os.fchmod(out.fileno(), 0o640)
        out.write(kept.read_bytes())
    return True


def _give_to_owner(partial: Path, data_dir: Path) -> None:
    """Root restoring into a data folder someone else owns (a service install's, the service user's): what is
    restored becomes that owner's, or the service could not write its own store (nor open the `.lock` this
    restore may have made). The backup's links were refused before, so nothing here leads outside the restore."""
    st = data_dir.stat()
    if os.geteuid() != 0 or st.st_uid == 0:
        return
    for path in [data_dir / ".lock", *partial.rglob("*")]:
        os.lchown(path, st.st_uid, st.st_gid)


def _place(source: Path, target: Path) -> None:
    """A hard link where the file system allows one (the file never changes), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except FileNotFoundError:
        raise
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target)


def _private(folder: Path) -> None:
    """Folders 0700, the backup's own copies 0600. A file hard-linked from the box keeps the box's mode (it is the
    same file), unreachable for others behind the 0700 folders."""
    for path in [folder, *folder.rglob("*")]:
        st = path.lstat()
        if path.is_dir():
            path.chmod(0o700)
        elif st.st_nlink == 1:
            path.chmod(0o600)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


__all__ = ["BackupError", "BackupReport", "backup", "read_manifest", "restore"]
