"""The real server as a child process, for benchmarks that measure it over loopback: wait until it says ready,
stop it the way systemd would."""
from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_ready(proc: subprocess.Popen, url: str, log_path: Path, timeout_s: float) -> float:
    """Seconds until /readyz answered 200; raises if the server exits or does not get ready in time."""
    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=2) as client:
        while time.perf_counter() - started < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {log_path.read_text(errors='replace')[-2000:]}")
            try:
                if (await client.get(url + "/readyz")).status_code == 200:
                    return round(time.perf_counter() - started, 1)
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    await stop(proc)
    raise TimeoutError(f"server did not become ready in {timeout_s:.0f} s")


async def stop(proc: subprocess.Popen | None, wait_s: float = 30) -> None:
    """SIGTERM (answers in progress drain), then SIGKILL if it takes longer than `wait_s`."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(proc.wait, wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
