"""The worker process's side of `ParserPool`, and the wire format both sides share.

Frames are an 8-byte length then the payload: the input as raw bytes, the reply pickled. A reply is ("ready",)
once warm, then per job ("ok", document, grown) or ("error", code, message, retire, detail).

Memory: before each job the worker sets RLIMIT_AS to its current address space plus `max_memory_mib`, so a hog
gets MemoryError (-> OUT_OF_MEMORY) rather than the kernel's OOM killer. Relative, because the warm worker's own
mappings vary by box (OpenBLAS maps tens of MiB per core at import): an absolute 512 MiB would leave a 64-core
box's workers nothing. A C parser that aborts on a failed allocation is reported as CRASHED.
"""
from __future__ import annotations

import importlib
import io
import os
import pickle
import pkgutil
import pwd
import resource
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Callable

from .confine import confine, installation_folders
from .document import Block, Format, ParsedDocument, ParseError, ParseErrorCode, ParseLimits

ParseFunction = Callable[[bytes, ParseLimits], ParsedDocument]

HEADER = struct.Struct("!Q")  # frame length
READY = ("ready",)
_MIB = 1024 * 1024
_CODES = frozenset(code.value for code in ParseErrorCode)


# ---------------------------------------------------------------- runs in the child process

def main(sock: socket.socket, function: ParseFunction | None, limits: ParseLimits, max_memory_mib: int) -> None:
    """The worker process's target: serves jobs on `sock` until the pool closes its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the server decides
    if function is None:
        from .dispatch import parse_bytes as function
    _warm_up()
    if limits.ocr_models:
        _preload_ocr(limits.ocr_models)
    _drop_privileges()  # after the imports, which read the installation; before the first hostile byte
    unconfined = confine(installation_folders())
    if unconfined:
        print(f"appliance parser: the worker reads and writes what its user may: {unconfined}", file=sys.stderr)
    warm_vm = _address_space()
    _send_frame(sock, pickle.dumps(READY))
    while (data := _recv_frame(sock)) is not None:  # None: the pool closed its end, or the server died
        reply = _run_job(function, data, limits, max_memory_mib, warm_vm)
        del data  # two large inputs need not be alive at once
        _send_frame(sock, reply)


def _warm_up() -> None:
    """Imports every module of this package, so the format parsers' libraries load now, not in the first job (and
    not after `_drop_privileges`, when the installation may be out of the worker's reach)."""
    import encodings  # codecs load on first use: all now, while the worker may still read the installation

    package = importlib.import_module(__package__)
    names = [f"{__package__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)] + ["charset_normalizer"]
    for name in names + [f"encodings.{m.name}" for m in pkgutil.iter_modules(encodings.__path__)]:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a parser that cannot import fails its own jobs, with a reason
            pass


def _preload_ocr(models_dir: str) -> None:
    """The OCR graphs read while the models folder is still within reach; if they cannot be, scanned pages fail
    their own jobs with the reason."""
    from .ocr import reader

    try:
        reader(models_dir).preload()
    except (OSError, ImportError) as exc:
        print(f"appliance parser: the OCR models could not be read: {exc}", file=sys.stderr)


def _drop_privileges() -> None:
    """A server run as root has its workers become `nobody`, without groups: a parser exploited by a hostile file
    can then neither write the data folder nor read it where the folder is not world-readable, nor signal the server.

    Not root (the packaged unit runs as its own user, `appliance`): the worker keeps the server's user, as an
    unprivileged process cannot change user; Landlock (confine.py) then keeps it out of the data folder. Spawn
    already closed every inherited descriptor but the job socket and stdin/out/err, so the worker holds no open
    database or blob file either way."""
    if os.geteuid() != 0:
        return
    try:
        nobody = pwd.getpwnam("nobody")
        os.setgroups([])
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)
    except (KeyError, OSError) as exc:  # no such user, or root without CAP_SETUID (a container): parse anyway
        print(f"appliance parser: could not drop root privileges: {exc!r}", file=sys.stderr)


def _run_job(function: ParseFunction, data: bytes, limits: ParseLimits, max_memory_mib: int, warm_vm: int) -> bytes:
    """One parse -> a pickled reply: ("ok", document, grown) or ("error", code, message, retire, detail)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    budget = max_memory_mib * _MIB
    start_vm = _address_space()
    try:
        if budget:  # an operator's own, lower `ulimit -v` still wins
            cap = start_vm + budget if soft == resource.RLIM_INFINITY else min(start_vm + budget, soft)
            resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
        try:
            document = function(data, limits)
        finally:  # pickling our own reply is not the file's doing: it gets the room back
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    except Exception as exc:  # noqa: BLE001 - whatever a parser raises becomes a reply, never a dead worker
        return _error_reply(exc, max_memory_mib)
    # memory kept from job to job (fragmentation, caches) past one budget: the pool recycles this worker
    grown = bool(budget) and _address_space() - len(data) > warm_vm + budget
    try:
        return pickle.dumps(("ok", document, grown), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001
        return _error_reply(exc, max_memory_mib)


def _error_reply(exc: Exception, max_memory_mib: int) -> bytes:
    if _caused_by_memory(exc):  # also when a parser wrapped the MemoryError in an error of its own
        # retire (True): malloc's state after a failed allocation is not to be trusted
        message = f"the parser needed more than {max_memory_mib} MiB" if max_memory_mib else "out of memory"
        return pickle.dumps(("error", ParseErrorCode.OUT_OF_MEMORY.value, message, True, ""))
    if isinstance(exc, ParseError):
        return pickle.dumps(("error", ParseErrorCode(exc.code).value, str(exc.message), False, ""))
    detail = "".join(traceback.format_exception(exc))
    message = f"the file could not be parsed ({type(exc).__name__})"
    return pickle.dumps(("error", ParseErrorCode.CORRUPT.value, message, False, detail))


def _caused_by_memory(exc: BaseException | None) -> bool:
    for _ in range(20):  # a bounded walk: a cycle of causes must not hang the worker
        if exc is None or isinstance(exc, MemoryError):
            return exc is not None
        exc = exc.__cause__ or exc.__context__
    return False


def _address_space() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the limit is then absolute (and advisory on macOS anyway)
        return 0


def _send_frame(sock: socket.socket, payload: bytes) -> None:
    header = HEADER.pack(len(payload))
    if len(payload) < 65536:  # one syscall for a small reply
        sock.sendall(header + payload)
    else:
        sock.sendall(header)
        sock.sendall(payload)


def _recv_frame(sock: socket.socket) -> bytes | None:
    header = _recv_exactly(sock, HEADER.size)
    return None if header is None else _recv_exactly(sock, HEADER.unpack(header)[0])


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    """`size` bytes, or None at end of stream. MSG_WAITALL fills one bytes object: a 256 MB input is not copied."""
    parts, got = [], 0
    while got < size:
        part = sock.recv(size - got, socket.MSG_WAITALL)  # short only at end of stream or on a signal
        if not part:
            return None
        parts.append(part)
        got += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# ---------------------------------------------------------------- the pool's reading of a reply

class _ReplyUnpickler(pickle.Unpickler):
    """Only the document types: a worker is where hostile bytes meet C parsers, so a reply may not name callables."""
    _ALLOWED = {("appliance.parse.document", cls.__name__): cls for cls in (ParsedDocument, Block, Format)}

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"unexpected type in a parser reply: {module}.{name}")
        return self._ALLOWED[module, name]


def load_reply(body: bytes | bytearray) -> tuple:
    """A reply frame's body -> a non-empty tuple; pickle.UnpicklingError if it is anything else."""
    try:
        reply = _ReplyUnpickler(io.BytesIO(body)).load()
    except Exception as exc:  # noqa: BLE001 - a garbled pickle raises anything from EOFError to TypeError
        raise pickle.UnpicklingError(f"a parser reply could not be read: {exc!r}") from exc
    if not isinstance(reply, tuple) or not reply:
        raise pickle.UnpicklingError("a parser reply is not a tuple")
    return reply


def check_job_reply(reply: tuple) -> tuple:
    """The reply's shape, checked before the pool acts on it."""
    if reply[0] == "ok" and len(reply) == 3 and isinstance(reply[1], ParsedDocument):
        return reply
    if reply[0] == "error" and len(reply) == 5 and reply[1] in _CODES and isinstance(reply[2], str):
        return reply
    raise pickle.UnpicklingError(f"a parser reply of the wrong shape: {reply[0]!r}")
