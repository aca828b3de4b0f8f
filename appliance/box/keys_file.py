"""The API keys file's format and the one rule for who may read it: the server, `keys add`, `doctor` and `restore`
all use these, so none of them takes a file another refuses.

The rule: its owner reads it; no other user reads it or writes it; its group may read it, never write it (0640 with
the service's group is how a service install lets the service user read a file root owns). A file its owner may not
read (chmod 000) counts as unreadable even for root, who could: that is how an operator takes every key away.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import NAME_PATTERN

ADMIN = "admin"  # the role of a key that may name any tenant and see the box (the console's admin views)
_DIGEST = re.compile(r"[0-9a-f]{64}")
_OTHERS_MAY = stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP  # read by anyone, or written by anyone but the owner
Stamp = tuple[int, int, int, int, int] | None  # what a stat() says of the file; None: it cannot be stat'ed


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a key lets in: a tenant, or an admin (tenant None), who names the tenant per request as clients do on
    a box without keys."""
    tenant: str | None
    admin: bool = False


class KeysFileError(ValueError):
    """The API keys file cannot be read, has a wrong entry, or others may read it."""


class KeysFileUnreadable(KeysFileError):
    """The keys file is gone or cannot be read: a running server then refuses every keyed request (fails closed)."""


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def mode_problem(path: Path, st: os.stat_result) -> str | None:
    """Why the file's mode stops the server from taking it (None: it may); see the module's rule."""
    if not st.st_mode & stat.S_IRUSR:
        return f"API keys file {path} is not readable by its owner (mode {stat.S_IMODE(st.st_mode):o})"
    if st.st_mode & _OTHERS_MAY:
        return (f"API keys file {path} may be read or changed by other users (mode {stat.S_IMODE(st.st_mode):o}): "
                f"run `chmod 600 {path}` (or 640 with the service's group)")
    return None


def service_group(data_dir: Path) -> int | None:
    """The group a root-run `keys add` gives the file, or None where there is no service to read it. A service
    install's data folder belongs to the service user (the installer makes it appliance:appliance): when root
    writes the keys file for a data folder someone else owns, that owner's group must be able to read it."""
    if os.geteuid() != 0:
        return None  # the file is written by the user who runs the server
    try:
        st = os.stat(data_dir)
    except OSError:
        return None
    return st.st_gid if st.st_uid != 0 else None


def stamp_of(st: os.stat_result) -> Stamp:
    # The mode too: a chmod that makes a refused file acceptable is a change worth reading.
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode


def read_keys(path: Path) -> tuple[dict[str, Caller], Stamp]:
    """Key hash -> caller, and the stamp of what was read; KeysFileUnreadable when it is gone or cannot be read."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())  # the stamp of what is read, even if the file is replaced meanwhile
            problem = mode_problem(path, st)
            if problem is not None:
                raise (KeysFileUnreadable if not st.st_mode & stat.S_IRUSR else KeysFileError)(problem)
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        raise KeysFileUnreadable(f"API keys file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise KeysFileError(f"API keys file {path} is not UTF-8 text: {exc}") from None
    except OSError as exc:
        raise KeysFileUnreadable(f"API keys file {path} cannot be read: {exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KeysFileError(f"API keys file {path} is not valid TOML: {exc}") from None
    return _callers(path, raw.get("keys", [])), stamp_of(st)


def _callers(path: Path, entries: Any) -> dict[str, Caller]:
    """Every wrong entry is reported at once, each named by its number (and name), as the settings' errors are."""
    if not isinstance(entries, list):
        raise KeysFileError(f"API keys file {path}: `keys` must be [[keys]] tables, not a {type(entries).__name__}")
    callers: dict[str, Caller] = {}
    first: dict[str, str] = {}  # digest -> the entry that listed it
    errors = []
    for n, entry in enumerate(entries, 1):
        label = f"keys entry {n}"
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            label += f" (name {entry['name'][:60]!r})"
        problem = _problem(entry)
        if problem is None:
            digest = "sha256:" + entry["sha256"].lower().removeprefix("sha256:")
            if digest in first:
                # two tenants for one key would be decided by the order of the file: refuse instead
                problem = f"same sha256 as {first[digest]}: a key belongs to one tenant; remove one of them"
            else:
                admin = entry.get("role") == ADMIN
                first[digest], callers[digest] = label, Caller(None if admin else entry["tenant"], admin)
        if problem is not None:
            errors.append(f"{label}: {problem}")
    if errors:
        raise KeysFileError(f"API keys file {path}:\n  " + "\n  ".join(errors))
    return callers


def _problem(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return "must be a table ([[keys]] with sha256 and tenant)"
    digest, tenant, name = entry.get("sha256"), entry.get("tenant"), entry.get("name", "")
    role = entry.get("role", "tenant")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest.lower().removeprefix("sha256:")):
        return f"sha256 must be 64 hex digits (optionally after \"sha256:\"), got {_short(digest)}"
    if role not in ("tenant", ADMIN):
        return f'role must be "tenant" (the default) or "{ADMIN}", got {_short(role)}'
    if not isinstance(name, str):
        return f"name must be a string, got {_short(name)}"
    if role == ADMIN:
        # an admin names the tenant of each request; a tenant here would read as a limit it is not
        return None if tenant is None else f'an admin key has no tenant (role = "{ADMIN}" may name any)'
    if not isinstance(tenant, str) or not re.fullmatch(NAME_PATTERN, tenant):
        return f"tenant must be a name of letters, digits, '_', '.', '-' (up to 128), got {_short(tenant)}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
