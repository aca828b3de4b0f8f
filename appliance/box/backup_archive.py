"""Reading a backup that may come from anywhere (a folder or a tar archive of one) and writing one as a tar archive.

A backup is untrusted input to `restore`, which often runs as root: a symlink or hard link in it could make the
restore read or overwrite any file of the box, and a name that is absolute or climbs with `..` could land outside
the data folder. So only plain files and folders with plain relative names are taken (anything else refuses the
whole restore before a byte is written), only what a data folder holds is kept (the answer caches never: their
values are pickles, which would run code on the first cache hit), and every file is written new (O_EXCL, never
through a link), 0600, in folders 0700.
"""
from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

MANIFEST = "backup.json"
KEYS = "keys.toml"
# What a restore takes from a backup; anything else (the caches, a stray file) stays behind.
RESTORED = ("store.sqlite3", "indexes", "files", MANIFEST, KEYS)
_BLOCK = 1 << 20


class UnsafeBackup(ValueError):
    """The backup holds a link, a special file or a name outside the folder it is restored into."""


@dataclass(frozen=True, slots=True)
class Member:
    name: PurePosixPath  # relative, without `..`
    is_dir: bool
    open: Callable[[], BinaryIO]  # a file's bytes (unused for a folder)


def is_archive(source: Path) -> bool:
    return Path(source).is_file()


def members(source: Path) -> Iterator[Member]:
    """Every entry of the backup `source` (a folder or a tar archive), checked first: UnsafeBackup names the first
    entry that is not a plain file or folder with a safe name."""
    if is_archive(source):
        yield from _tar_members(Path(source))
    else:
        yield from _folder_members(Path(source))


def read_member(source: Path, name: str) -> bytes | None:
    """One top-level file of the backup (its manifest), or None when it has none; refused if it is a link."""
    for member in members(source):
        if member.name == PurePosixPath(name) and not member.is_dir:
            with member.open() as f:
                return f.read(1 << 20)
    return None


def extract(source: Path, dest: Path) -> None:
    """The kept members of `source` into the new folder `dest` (0700), every file written 0600."""
    dest.mkdir(mode=0o700)
    for member in members(source):
        if member.name.parts[0] not in RESTORED:
            continue
        target = dest.joinpath(*member.name.parts)
        if member.is_dir:
            target.mkdir(mode=0o700, parents=True, exist_ok=True)
            continue
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with member.open() as src, open(fd, "wb") as out:
            while block := src.read(_BLOCK):
                out.write(block)
    for folder, _, _ in os.walk(dest):  # parents made on the way get the umask's mode: set every one
        os.chmod(folder, 0o700)


def write_archive(folder: Path, dest: Path) -> None:
    """`folder` as the tar archive `dest`, created 0600 (never over an existing file). Each member is written as a
    plain file: files the backup hard-linked from the box must not become link members of the archive."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            info = tar.gettarinfo(str(path), path.relative_to(folder).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_dir():
                info.mode = 0o700
                tar.addfile(info)
                continue
            info.type, info.linkname, info.mode = tarfile.REGTYPE, "", 0o600
            with open(path, "rb") as f:
                tar.addfile(info, f)


def _safe_name(raw: str) -> PurePosixPath:
    name = PurePosixPath(raw)
    if name.is_absolute() or not name.parts or ".." in name.parts or "\\" in raw or "\x00" in raw:
        raise UnsafeBackup(f"{raw!r} is not a plain relative name inside the backup (absolute, or with `..`)")
    return name


def _tar_members(source: Path) -> Iterator[Member]:
    try:
        tar = tarfile.open(source, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise UnsafeBackup(f"{source} is neither a backup folder nor a tar archive of one: {exc}") from None
    with tar:
        entries = [e for e in tar.getmembers() if e.name.strip("/") not in (".", "")]  # `tar -C DIR .` adds "./"
        for entry in entries:  # all checked before any is used
            _safe_name(entry.name)
            if not (entry.isreg() or entry.isdir()):
                kind = "a hard link" if entry.islnk() else "a symlink" if entry.issym() else "not a plain file"
                raise UnsafeBackup(f"{entry.name!r} is {kind}: a backup holds only plain files and folders")
        for entry in entries:
            yield Member(_safe_name(entry.name), entry.isdir(), lambda entry=entry: tar.extractfile(entry))


def _folder_members(source: Path) -> Iterator[Member]:
    if not source.is_dir():
        raise UnsafeBackup(f"{source} is neither a backup folder nor a tar archive of one")
    found = []
    for folder, dirs, files in os.walk(source):  # never into a linked folder: each name is lstat'ed below
        for name in sorted(dirs + files):
            path = Path(folder) / name
            mode = os.lstat(path).st_mode
            relative = _safe_name(path.relative_to(source).as_posix())
            if stat.S_ISLNK(mode):
                raise UnsafeBackup(f"{relative} is a symlink: a backup holds only plain files and folders")
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise UnsafeBackup(f"{relative} is not a plain file")
            found.append(Member(relative, stat.S_ISDIR(mode), lambda path=path: _open_plain(path)))
    yield from found


def _open_plain(path: Path) -> BinaryIO:
    """A file's bytes, refused if it was swapped for a link since it was listed. A hard link in a folder backup is
    read as a copy (backup makes them itself): only its bytes reach the data folder, never the link."""
    return open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb")
