"""A box with a booted systemd, for the package's service install: a Debian root file system (debootstrap, made
once and kept in build/systemd-box) booted in a container by systemd-nspawn, with only loopback for a network.
The installer runs inside it as on an admin's box: useradd, the unit, `systemctl restart`, the readiness wait.

The container is entered with nsenter: `run` in all of its namespaces (its files, its systemd), `on_loopback` in
its network namespace only (the host's files and Python: the test's HTTP driver reaches the box's 127.0.0.1).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from support import ROOT

TOOLS = ("debootstrap", "systemd-nspawn", "nsenter")
MISSING_TOOLS = [tool for tool in TOOLS if shutil.which(tool) is None]
SUITE = "bookworm"
# minbase plus what the installer and an admin use: systemd as init, useradd, ps, ip
INCLUDE = "systemd,systemd-sysv,dbus,passwd,procps,iproute2"
TEMPLATE = ROOT / "build" / "systemd-box" / SUITE
LOCK = TEMPLATE.with_name(SUITE + ".lock")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _mirror() -> str:
    """The Debian mirror this machine's apt uses (the registry CI reaches), else Debian's own."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    lines = sources.read_text().splitlines() if sources.exists() else []
    uris = [line.split()[1] for line in lines if line.startswith("URIs:") and len(line.split()) > 1]
    return next((uri for uri in uris if "security" not in uri), "http://deb.debian.org/debian")


def template() -> Path:
    """The root file system, made by debootstrap when missing or made with another package list (~1 min). A lock
    keeps two makers apart: conftest.py starts one in the background when a session collects the service test."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made():
            _debootstrap()
    return TEMPLATE


def made() -> bool:
    """The template is there, made with today's package list."""
    stamp = TEMPLATE / ".made-with"
    return stamp.exists() and stamp.read_text() == INCLUDE


def _debootstrap() -> None:
    incoming = TEMPLATE.with_name(TEMPLATE.name + ".incoming")
    shutil.rmtree(incoming, ignore_errors=True)
    incoming.parent.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["debootstrap", "--variant=minbase", f"--include={INCLUDE}", SUITE, str(incoming),
                           _mirror()], capture_output=True, text=True, timeout=1200)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    (incoming / ".made-with").write_text(INCLUDE)
    shutil.rmtree(TEMPLATE, ignore_errors=True)
    incoming.rename(TEMPLATE)


def start_in_background() -> subprocess.Popen:
    """`template()` in a process of its own at idle priority, overlapping the tests before the service test."""
    return subprocess.Popen(["nice", "-n", "19", sys.executable, __file__], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, cwd=ROOT)


class Box:
    """A copy of the template booted by systemd-nspawn; `read_only` maps host paths into it read-only."""

    def __init__(self, folder: Path, read_only: dict[Path, str]) -> None:
        self.root = folder / "root"
        subprocess.run(["cp", "-a", f"{template()}/.", str(self.root)], check=True)
        binds = [f"--bind-ro={source}:{target}" for source, target in read_only.items()]
        # --keep-unit --register=no: the host has no systemd to register with; --private-network: only loopback
        self._nspawn = subprocess.Popen(
            ["systemd-nspawn", "--quiet", "--keep-unit", "--register=no", "--private-network", "--boot",
             "--console=passive", "--directory", str(self.root), *binds],
            stdout=subprocess.DEVNULL, stderr=open(folder / "nspawn.log", "wb"), start_new_session=True)
        self._log = folder / "nspawn.log"
        try:
            self.leader = self._find_leader()
            self._wait_booted()
        except BaseException:
            self.stop()
            raise

    def _wait_booted(self, timeout: float = 300) -> None:
        """Until the boot is done (`is-system-running` answers only once the system bus is up)."""
        deadline, state = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            state = self.run("systemctl", "is-system-running", "--wait", timeout=timeout)
            if state.stdout.strip() in ("running", "degraded"):
                return
            time.sleep(0.5)
        raise AssertionError(f"the box did not boot: {state}; "
                             + self.run("systemctl", "--failed", "--no-pager").stdout)

    def _find_leader(self, timeout: float = 60) -> int:
        """The container's init: nspawn's child whose command is systemd."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._nspawn.poll() is None, self._log.read_text(errors="replace")[-3000:]
            for task in Path(f"/proc/{self._nspawn.pid}/task").iterdir():
                for child in (task / "children").read_text().split():
                    if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                        return int(child)
            time.sleep(0.2)
        raise AssertionError("the container's systemd did not start: " + self._log.read_text(errors="replace"))

    def run(self, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """A command inside the box, as its root, in a clean environment."""
        return subprocess.run(["nsenter", "--target", str(self.leader), "--all", "env", "-i", f"PATH={PATH}",
                               *command], capture_output=True, text=True, timeout=timeout)

    def on_loopback(self, *command: str, timeout: float = 900) -> subprocess.CompletedProcess:
        """A host command in the box's network namespace: it reaches the box's 127.0.0.1."""
        return subprocess.run(["nsenter", "--target", str(self.leader), "--net", *command], capture_output=True,
                              text=True, timeout=timeout)

    def unit(self, name: str, *properties: str) -> dict[str, str]:
        shown = self.run("systemctl", "show", name, *(f"--property={p}" for p in properties)).stdout
        return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)

    def journal(self, unit: str) -> str:
        return self.run("journalctl", "--no-pager", "-n", "60", "-u", unit).stdout

    def stop(self) -> None:
        """SIGTERM: nspawn asks the container's systemd to power off, which stops the units in order."""
        if self._nspawn.poll() is None:
            self._nspawn.send_signal(signal.SIGTERM)
            try:
                self._nspawn.wait(180)
            except subprocess.TimeoutExpired:  # the container's init too: it outlives a killed nspawn
                for pid in (getattr(self, "leader", None), self._nspawn.pid):
                    if pid:
                        os.kill(pid, signal.SIGKILL)
                self._nspawn.wait(30)
        shutil.rmtree(self.root, ignore_errors=True)


if __name__ == "__main__":
    template()
