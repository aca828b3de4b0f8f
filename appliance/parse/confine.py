"""Landlock for the parse workers: once warm, a worker may read the installation (for the imports a parser makes
late) and nothing else: not the data folder (the store, every tenant's files, the keys and the cache salt), not
/etc, and it may write nowhere. It needs no file of its own: a job's bytes come over its socket.

This is what holds a worker of the packaged service, whose user (`appliance`) cannot switch to another one; a
root server's workers also become `nobody` (worker.py). Landlock needs no privilege (Linux >= 5.13 with the LSM
on); where the kernel has none the worker parses unconfined and says so once on stderr.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

# the same numbers on every Linux architecture (syscalls added after the table was unified)
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_ABI_VERSION = 1  # landlock_create_ruleset flag: ask the kernel's ABI version
_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_EXECUTE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 2, 1 << 3
# The file system rights each ABI knows (v1: 13, v2 adds refer, v3 truncate); all handled = all denied but ours
_HANDLED = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1}


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def installation_folders() -> list[str]:
    """What a late import may read: the interpreter's prefixes, the site-packages, this package's own folder
    (not its parent: a checkout's parent may hold a data folder), a frozen build's bundle, /usr and /lib."""
    import site

    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages(),
               str(Path(__file__).resolve().parents[1]), getattr(sys, "_MEIPASS", ""), "/usr", "/lib", "/lib64",
               "/proc/self"}
    return sorted(f for f in folders if f and os.path.isdir(f))


def confine(readable: list[str]) -> str | None:
    """Restrict this process to reading `readable` (folders); None when done, else why it could not be."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_CREATE_RULESET, None, 0, _ABI_VERSION)
    if abi < 0:
        return f"no Landlock in this kernel ({os.strerror(ctypes.get_errno())})"
    attr = _RulesetAttr(_HANDLED[min(abi, 3)])
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        return f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}"
    try:
        for folder in readable:
            fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(_EXECUTE | _READ_FILE | _READ_DIR, fd)
                if libc.syscall(_ADD_RULE, ruleset, _PATH_BENEATH, ctypes.byref(rule), 0) < 0:
                    return f"landlock_add_rule({folder}): {os.strerror(ctypes.get_errno())}"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 or libc.syscall(_RESTRICT_SELF, ruleset, 0) < 0:
            return f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    return None
