"""The API keys file: SHA-256 hashes of keys -> tenants, checked at boot and followed while the server runs.

Keys are stored as hashes, so the file can be read by an operator without revealing a usable key (keys are 32
random bytes, so a fast hash is enough). Still, whoever can write the file can let any key in, and whoever can read
it learns the tenants: a file others can read or any but its owner can write stops the boot. Revoking a key must
not need a restart, so the server re-reads the file when it changes (and on SIGHUP); a change that is wrong never
costs the keys it has.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import secrets
import signal
import stat
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .validation import NAME_PATTERN

log = logging.getLogger("appliance.serve")
KEY_PREFIX = "rak_"
CHECK_EVERY_S = 1.0  # how stale a revoked key may be; a check is one stat() on a worker thread
_DIGEST = re.compile(r"[0-9a-f]{64}")
_OTHERS_MAY = stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP  # read by anyone, or written by anyone but the owner
_TOML_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", ord("\b"): "\\b", ord("\t"): "\\t", ord("\n"): "\\n",
                 ord("\f"): "\\f", ord("\r"): "\\r",
                 **{c: f"\\u{c:04X}" for c in (*range(0x20), 0x7F) if chr(c) not in "\b\t\n\f\r"}}
Stamp = tuple[int, int, int, int, int] | None  # what a stat() says of the file; None: it cannot be stat'ed
ADMIN = "admin"  # the role of a key that may name any tenant and see the box (the console's admin views)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a key lets in: a tenant, or an admin (tenant None), who names the tenant per request as clients do on
    a box without keys."""
    tenant: str | None
    admin: bool = False


class KeysFileError(ValueError):
    """The API keys file cannot be read, has a wrong entry, or others may read it."""


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def toml_string(text: str) -> str:
    """`text` as a TOML basic string. JSON's escapes are not TOML's (an emoji becomes two surrogate escapes, which
    TOML refuses), so quotes, backslashes and control characters are escaped here and the rest is written as is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise KeysFileError(f"{text!r} is not valid Unicode text (a lone surrogate)") from None
    return '"' + text.translate(_TOML_ESCAPES) + '"'


class ApiKeys:
    """Key hash -> tenant. Made by `load`, it follows its file: a lookup at most every CHECK_EVERY_S seconds has a
    worker thread stat the file (the event loop never waits on the disk) and re-read it if it changed; `reload`
    (also run on SIGHUP) replaces the whole table at once, or keeps it and logs why when the new file is wrong."""

    def __init__(self, callers_by_hash: dict[str, Caller], path: Path | None = None, stamp: Stamp = None):
        self._callers = callers_by_hash
        self.path, self._stamp = path, stamp
        self._next_check = time.monotonic() + CHECK_EVERY_S
        self._checking = False
        self._reload_lock = threading.Lock()  # a SIGHUP during a periodic check reads the file after it

    @classmethod
    def load(cls, path: Path) -> "ApiKeys":
        """[[keys]] entries with `sha256` (hex or "sha256:<hex>"), `tenant` (or `role = "admin"`) and an optional
        `name`."""
        callers, stamp = _read(Path(path))
        return cls(callers, Path(path), stamp)

    def tenant_hashes(self) -> list[tuple[str, str]]:
        """(sha256 of the key, tenant) of every tenant key: what a balancer maps a key to its tenant with."""
        return [(digest, c.tenant) for digest, c in self._callers.items() if c.tenant is not None]

    def caller_for(self, key: str) -> Caller | None:
        self._maybe_check()
        # Looked up by hash: how long the lookup takes depends on the digest, not on how close a guess came.
        return self._callers.get(hash_key(key)) if key else None

    def caller_for_header(self, authorization: str) -> Caller | None:
        """Who an `Authorization: Bearer <key>` header's key lets in."""
        scheme, _, key = authorization.partition(" ")
        return self.caller_for(key.strip()) if scheme.lower() == "bearer" else None

    def tenant_for(self, key: str) -> str | None:
        """The key's tenant (None for an unknown key and for an admin key)."""
        caller = self.caller_for(key)
        return caller.tenant if caller is not None else None

    def __len__(self) -> int:
        return len(self._callers)

    def reload(self, force: bool = True) -> bool:
        """Re-read the file (unless `force` is off and its stat is unchanged); True when the keys were replaced."""
        assert self.path is not None
        with self._reload_lock:
            stamp = _stat_stamp(self.path)
            if not force and stamp == self._stamp:
                return False
            self._stamp = stamp  # a wrong file is reported once, not at every check
            try:
                callers, self._stamp = _read(self.path)
            except KeysFileError as exc:
                log.error("API keys file not reloaded, keeping the previous %d keys: %s", len(self._callers), exc)
                return False
            self._callers = callers  # one assignment: a lookup sees the old table or the new one, never a mix
        log.info("API keys file %s reloaded: %d keys", self.path, len(callers))
        return True

    def _maybe_check(self) -> None:
        if self.path is None or self._checking or time.monotonic() < self._next_check:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on a server's event loop (a tool): the file as loaded
        self._next_check = time.monotonic() + CHECK_EVERY_S
        self._checking = True
        try:
            checked = loop.run_in_executor(None, self.reload, False)
        except RuntimeError:  # the loop's executor is shut down: the server is stopping
            self._checking = False
            return
        checked.add_done_callback(self._checked)

    def _checked(self, future: asyncio.Future) -> None:
        self._checking = False
        if not future.cancelled() and future.exception() is not None:
            log.error("checking the API keys file failed", exc_info=future.exception())


def add_key(path: Path, tenant: str | None, name: str = "") -> str:
    """Append a new key to the keys file (created readable by its owner only) and return the key: a key for
    `tenant`, or an admin key when `tenant` is None."""
    key = new_key()
    who = f'role = "{ADMIN}"' if tenant is None else f"tenant = {toml_string(tenant)}"
    entry = f'\n[[keys]]\nsha256 = "{hash_key(key)}"\n{who}\n'
    if name:
        entry += f"name = {toml_string(name)}\n"
    if path.exists():
        ApiKeys.load(path)  # a file the server would refuse gets nothing added
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a", encoding="utf-8") as f:
        f.write(entry)
    ApiKeys.load(path)  # the file must still parse
    return key


@contextlib.contextmanager
def reload_on_hangup(keys: ApiKeys | None) -> Iterator[None]:
    """While the server runs, SIGHUP re-reads the keys file (on a worker thread). Signals reach only an event loop
    on the main thread; a server run on another thread (tests) still follows the file's changes."""
    loop = asyncio.get_running_loop()
    installed = False
    if keys is not None and keys.path is not None:
        try:
            loop.add_signal_handler(signal.SIGHUP, lambda: loop.run_in_executor(None, keys.reload))
            installed = True
        except (ValueError, RuntimeError, NotImplementedError):
            log.debug("no SIGHUP handler off the main thread; the keys file is still followed on change")
    try:
        yield
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGHUP)


def _stat_stamp(path: Path) -> Stamp:
    try:
        return _stamp(os.stat(path))
    except OSError:
        return None


def _stamp(st: os.stat_result) -> Stamp:
    # The mode too: a chmod that makes a refused file acceptable is a change worth reading.
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode


def _read(path: Path) -> tuple[dict[str, Caller], Stamp]:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())  # the stamp of what is read, even if the file is replaced meanwhile
            if st.st_mode & _OTHERS_MAY:
                raise KeysFileError(f"API keys file {path} may be read or changed by other users (mode "
                                    f"{stat.S_IMODE(st.st_mode):o}): run `chmod 600 {path}`")
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        raise KeysFileError(f"API keys file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise KeysFileError(f"API keys file {path} is not UTF-8 text: {exc}") from None
    except OSError as exc:
        raise KeysFileError(f"API keys file {path} cannot be read: {exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KeysFileError(f"API keys file {path} is not valid TOML: {exc}") from None
    return _callers(path, raw.get("keys", [])), _stamp(st)


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
