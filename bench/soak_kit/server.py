"""The real server for the soak: `python -m appliance serve` on a free loopback port, API keys on, default models
and settings otherwise, and a sampler of its open files and memory (engine processes included)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from machine import REPO
from server_process import free_port, stop, wait_ready

from .stats import Recorder


class KeyedServer:
    def __init__(self, folder: Path, tenants: list[str]):
        from appliance.serve.admission.keys import add_key

        self.folder, self.port = folder, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        keys_file = folder / "keys.toml"
        self.keys = {tenant: add_key(keys_file, tenant, f"soak {tenant}") for tenant in tenants}
        self.env = {**os.environ, "APPLIANCE_DATA_DIR": str(folder / "state"),
                    "APPLIANCE_MODELS_DIR": str(REPO / "models"), "APPLIANCE_ADMISSION_KEYS_FILE": str(keys_file),
                    "APPLIANCE_SERVER_PORT": str(self.port), "APPLIANCE_LOG_LEVEL": "warning"}
        self.log_path = folder / "server.log"
        self.proc: subprocess.Popen | None = None
        self.boot_s: float | None = None

    async def __aenter__(self) -> "KeyedServer":
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "appliance", "serve"], cwd=REPO, env=self.env,
                                         stdout=subprocess.DEVNULL, stderr=log)
        self.boot_s = await wait_ready(self.proc, self.url, self.log_path, 900)
        return self

    async def __aexit__(self, *exc) -> None:
        await stop(self.proc, 60)

    def processes(self) -> list[psutil.Process]:
        root = psutil.Process(self.proc.pid)
        return [root, *root.children(recursive=True)]

    async def sample(self, rec: Recorder, every_s: float, until: float) -> None:
        """fds and RSS of the server process and of all its processes, every `every_s` seconds."""
        while time.monotonic() < until:
            procs = self.processes()
            server = procs[0]
            fds = sum(_safe(p.num_fds) for p in procs)
            rss = sum(_safe(lambda p=p: p.memory_info().rss) for p in procs)
            rec.sample({"t_s": rec.elapsed(), "server_fds": server.num_fds(), "all_fds": fds,
                        "server_rss_mib": round(server.memory_info().rss / 2**20, 1),
                        "all_rss_mib": round(rss / 2**20, 1), "processes": len(procs),
                        "server_threads": server.num_threads()})
            await asyncio.sleep(every_s)

    def facts(self) -> dict:
        return {"boot_s": self.boot_s, "log_tail": self.log_path.read_text(errors="replace")[-2000:]}


def _safe(fn) -> int:
    try:
        return fn()
    except psutil.Error:  # a process that ended between listing and reading
        return 0
