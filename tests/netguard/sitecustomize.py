"""No outbound network: an audit hook that records and blocks every attempt to reach a non-loopback address.

Put this folder first on PYTHONPATH and set APPLIANCE_NETGUARD_LOG to a file: every Python process started with
that environment imports this module at start-up (site.py imports `sitecustomize`), the test process and every
subprocess it spawns included (vLLM's engine processes start with multiprocessing "spawn", which runs a fresh
interpreter with the parent's environment). A process that is already running calls `install(log_path)`.

Watched audit events: socket.connect, socket.sendto, socket.sendmsg (a destination other than loopback) and
socket.getaddrinfo, socket.gethostbyname(_ex), socket.gethostbyaddr (a name other than localhost's or a
non-loopback number: resolving a name may itself query a DNS server). On a violation one JSON line (pid, event,
address, a short stack) is appended to the log and PermissionError is raised from the hook, which aborts the
call before the system call, so nothing is sent. Unix sockets, netlink and other non-IP families are allowed,
and so are loopback (127.0.0.0/8, ::1, ::ffff:127.x) and the unspecified address (0.0.0.0, ::, ""), which
connect() reaches on this host only.

Limits: audit hooks cannot be removed, so once installed the guard holds for the rest of the process. It sees
Python's socket calls only, not C libraries that open sockets themselves. connect()/sendto() given a host *name*
resolve it inside the C call before their audit event fires, so that DNS query escapes the hook; the connection
itself is still blocked and logged.
"""
from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
import time
import traceback

ENV = "APPLIANCE_NETGUARD_LOG"
ARMED_ENV = "APPLIANCE_NETGUARD_ARMED"  # optional: a file where each guarded process appends its pid at install
_CONNECTS = frozenset({"socket.connect", "socket.sendto", "socket.sendmsg"})
_LOOKUPS = frozenset({"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
                      "socket.gethostbyaddr"})
_EVENTS = _CONNECTS | _LOOKUPS
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", ""})
_state: dict = {"log": None, "installed": False}


def install(log_path: str | os.PathLike) -> None:
    """Guard this process from now on, logging violations to `log_path`. Idempotent: a second call only changes
    the log file. Sets APPLIANCE_NETGUARD_LOG so that subprocesses (given this folder on PYTHONPATH) log there."""
    _state["log"] = os.fspath(log_path)
    os.environ[ENV] = _state["log"]
    if not _state["installed"]:
        _state["installed"] = True
        sys.addaudithook(_hook)
        armed = os.environ.get(ARMED_ENV)
        if armed:  # lets a test see which processes the guard was in, not only that none complained
            with open(armed, "a", encoding="utf-8") as f:
                f.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[:3]}) + "\n")


def is_local_host(host) -> bool:
    """True for None, localhost names and loopback or unspecified numbers (IPv4, IPv6, mapped, with %scope)."""
    if host is None:
        return True
    if isinstance(host, (bytes, bytearray)):
        host = bytes(host).decode("idna", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip().strip("[]").split("%", 1)[0].rstrip(".").lower()
    if name in _LOCAL_NAMES or name.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    ip = mapped or ip
    return ip.is_loopback or ip.is_unspecified


def _violation(event: str, args: tuple):
    """The offending address, or None when the call is allowed."""
    if event in _LOOKUPS:
        host = args[0] if args else None
        return None if is_local_host(host) else host
    sock, address = args[0], args[1] if len(args) > 1 else None
    if address is None:  # sendmsg on a connected socket: its connect() was checked
        return None
    family = getattr(sock, "family", None)
    if family is not None and family not in (socket.AF_INET, socket.AF_INET6):
        return None  # AF_UNIX paths, netlink, packet sockets bound to an interface: not a route off this host
    if isinstance(address, (str, bytes, bytearray)):  # a Unix socket path given to an unknown socket type
        return None
    if isinstance(address, tuple) and address and is_local_host(address[0]):
        return None
    return address


def _hook(event: str, args: tuple) -> None:
    if event not in _EVENTS:
        return
    address = _violation(event, args)
    if address is None:
        return
    stack = [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_stack(limit=13)[:-1]]
    record = {"time": round(time.time(), 3), "pid": os.getpid(), "argv0": (sys.argv or [""])[0], "event": event,
              "address": repr(address), "stack": stack}
    log = _state["log"]
    if log:
        try:
            with open(log, "a", encoding="utf-8") as f:  # one short append per line: whole lines across processes
                f.write(json.dumps(record) + "\n")
        except OSError:
            pass
    raise PermissionError(f"netguard: {event} to {address!r} blocked (not loopback; see {log or 'no log'})")


def _chain_next_sitecustomize() -> None:
    """Import the sitecustomize this one shadows (the next one on sys.path), if any, so its set-up still runs."""
    import importlib.machinery
    import importlib.util

    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    rest = [p for p in sys.path if os.path.realpath(os.path.abspath(p or os.curdir)) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_netguard_chained_sitecustomize"] = module
    spec.loader.exec_module(module)


if os.environ.get(ENV):
    install(os.environ[ENV])
if __name__ == "sitecustomize":  # imported by site.py, in place of the next one on sys.path
    try:
        _chain_next_sitecustomize()
    except Exception:  # site.py would report it and carry on; so does this
        traceback.print_exc()
