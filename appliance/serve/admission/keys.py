"""The API keys file: SHA-256 hashes of keys -> tenants, checked at boot and followed while the server runs.

Keys are stored as hashes, so the file can be read by an operator without revealing a usable key (keys are 32
random bytes, so a fast hash is enough). Still, whoever can write the file can let any key in, and whoever can read
it learns the tenants: a file others can read or any but its owner can write stops the boot. Revoking a key must
not need a restart, so the server re-reads the file when it changes (and on SIGHUP); a change that is wrong never
costs the keys it has, while a file that is gone or unreadable takes them all (revocation fails closed) until it
can be read again. The file's format and mode rule are in appliance/box/keys_file.py (doctor and restore use them too).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ...box import (ADMIN, Caller, KeysFileError, KeysFileUnreadable, Stamp, hash_key, read_keys,
               stamp_of)

log = logging.getLogger("appliance.serve")
KEY_PREFIX = "rak_"
CHECK_EVERY_S = 1.0  # how stale a revoked key may be; a check is one stat() on a worker thread
_TOML_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", ord("\b"): "\\b", ord("\t"): "\\t", ord("\n"): "\\n",
                 ord("\f"): "\\f", ord("\r"): "\\r",
                 **{c: f"\\u{c:04X}" for c in (*range(0x20), 0x7F) if chr(c) not in "\b\t\n\f\r"}}


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
        self.unavailable: str | None = None  # why the file cannot be read now; meanwhile no key is taken

    @classmethod
    def load(cls, path: Path) -> "ApiKeys":
        """[[keys]] entries with `sha256` (hex or "sha256:<hex>"), `tenant` (or `role = "admin"`) and an optional
        `name`."""
        callers, stamp = read_keys(Path(path))
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
                callers, self._stamp = read_keys(self.path)
            except KeysFileUnreadable as exc:
                # Fail closed: deleting the file (or chmod 000) is how keys are taken away, so none is kept.
                self.unavailable, self._callers = str(exc), {}
                log.error("API keys file unavailable, refusing every keyed request until it can be read: %s", exc)
                return True
            except KeysFileError as exc:  # a readable file with a mistake: an edit gone wrong, not a revocation
                log.error("API keys file not reloaded, keeping the previous %d keys: %s", len(self._callers), exc)
                return False
            self._callers = callers  # one assignment: a lookup sees the old table or the new one, never a mix
            self.unavailable = None
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


def add_key(path: Path, tenant: str | None, name: str = "", group: int | None = None) -> str:
    """Append a new key to the keys file and return the key: a key for `tenant`, or an admin key when `tenant` is
    None. The file is its owner's alone (0600), or also readable by `group` (0640): the service's group when root
    adds a key on a service install (keys_file.service_group), so the service user can still read it."""
    key = new_key()
    who = f'role = "{ADMIN}"' if tenant is None else f"tenant = {toml_string(tenant)}"
    entry = f'\n[[keys]]\nsha256 = "{hash_key(key)}"\n{who}\n'
    if name:
        entry += f"name = {toml_string(name)}\n"
    if path.exists():
        ApiKeys.load(path)  # a file the server would refuse gets nothing added
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600), "a",
              encoding="utf-8") as f:
        if group is not None:  # before the key is written: the file is never readable by the wrong group
            os.fchown(f.fileno(), -1, group)
            os.fchmod(f.fileno(), 0o640)
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
        return stamp_of(os.stat(path))
    except OSError:
        return None
