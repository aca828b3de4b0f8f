"""Per-tenant prefix-cache salts: a tenant's prompts share vLLM's prefix cache only with that tenant's.

vLLM's prefix cache is keyed by the prompt's tokens; a prompt another tenant sent before comes back faster and
counts as cached tokens, so one tenant could test guesses at another's questions and passages. A `cache_salt`
goes into the hash of a prompt's first block, so prompts with different salts never share a block. The salt is
an HMAC of the tenant under a random key kept in the data folder: a tenant cannot compute another's salt (and
no client can send one), while the tenant's own stable system prefix still hits the cache across its requests.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_FILE = "cache-salt.key"
KEY_BYTES = 32


class CacheSalts:
    """tenant -> salt; None (no tenant: a tool's or the warm-up's own prompt) is unsalted."""

    def __init__(self, key: bytes):
        if len(key) < KEY_BYTES:
            raise ValueError(f"a cache-salt key has at least {KEY_BYTES} bytes, got {len(key)}")
        self._key = key

    def for_tenant(self, tenant: str | None) -> str | None:
        if tenant is None:
            return None
        return hmac.new(self._key, tenant.encode("utf-8"), hashlib.sha256).hexdigest()

    @classmethod
    def load(cls, folder: Path) -> "CacheSalts":
        return cls(load_key(Path(folder) / KEY_FILE))


def load_key(path: Path) -> bytes:
    """The box's salt key, made on first use (32 random bytes, readable by this user only). A lost key only costs
    a cold prefix cache, so a key that cannot be read is replaced rather than stopping the boot."""
    with contextlib.suppress(OSError):
        key = path.read_bytes()
        if len(key) >= KEY_BYTES:
            return key
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(KEY_BYTES)
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "wb") as f:
        f.write(key)
    os.replace(tmp, path)
    return key
