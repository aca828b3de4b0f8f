"""A site for the cluster tests: appliance boxes as their own processes (`python -m appliance serve`, each with
its data folder), the boxes file and secret they share, and Debian's haproxy with the configuration
`appliance cluster config` prints, all on loopback."""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from appliance.cluster import Site
from appliance.config import ClusterBox
from support import ROOT, free_port


class Box:
    def __init__(self, name: str, folder: Path, env: dict[str, str], cpus: str | None = None):
        self.name, self.folder, self.env, self.cpus = name, folder, env, cpus
        self.port = int(env["APPLIANCE_SERVER_PORT"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.folder / "server.log", "ab")
        pinned = ["taskset", "-c", self.cpus] if self.cpus else []  # a box on its share of the cores (bench)
        self.process = subprocess.Popen([*pinned, sys.executable, "-m", "appliance", "serve"], env=self.env,
                                        cwd=self.folder, stdout=log, stderr=subprocess.STDOUT)

    def ready(self) -> bool:
        try:
            return httpx.get(self.url + "/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout: float = 600) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.ready():
                return
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"box {self.name} exited {self.process.returncode}: {self.log_tail()}")
            time.sleep(0.3)
        raise TimeoutError(f"box {self.name} not ready: {self.log_tail()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def wait_exit(self, timeout: float = 60) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def log_tail(self, chars: int = 3000) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # no drain grace: the test is over
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class ClusterSite:
    """`names` boxes; `env` settings for every box (APPLIANCE_* without the prefix, as make_settings takes);
    `cpus`: a core list per box name, for taskset."""

    def __init__(self, folder: Path, models_dir: Path, names: list[str], cpus: dict[str, str] | None = None,
                 **env: str):
        self.folder = folder
        self.secret_file = folder / "secret"
        self.secret_file.write_text(secrets.token_hex(32))
        self.secret_file.chmod(0o600)
        ports = {name: free_port() for name in names}
        self.boxes_file = folder / "boxes.toml"
        self.boxes_file.write_text("".join(f'[[box]]\nname = "{n}"\nurl = "http://127.0.0.1:{p}"\n\n'
                                           for n, p in ports.items()))
        self.members = tuple(ClusterBox(n, f"http://127.0.0.1:{p}") for n, p in ports.items())
        self.site = Site(self.members, names[0])
        base = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
        base.update({"APPLIANCE_MODELS_DIR": str(models_dir), "APPLIANCE_DEMO_CORPUS": "false",
                     "APPLIANCE_GENERATE_ENABLED": "false", "APPLIANCE_CLUSTER_BOXES": str(self.boxes_file),
                     "APPLIANCE_CLUSTER_SECRET_FILE": str(self.secret_file), "APPLIANCE_SERVER_HOST": "127.0.0.1",
                     "PYTHONPATH": str(ROOT)})
        base.update({f"APPLIANCE_{k.upper()}": v for k, v in env.items()})
        self.base_env = base
        self.boxes: dict[str, Box] = {}
        for name, port in ports.items():
            self.boxes[name] = self._box(name, port, (cpus or {}).get(name))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.haproxy: subprocess.Popen | None = None

    def _box(self, name: str, port: int, cpus: str | None) -> Box:
        (self.folder / name).mkdir()
        own = {"APPLIANCE_CLUSTER_SELF": name, "APPLIANCE_DATA_DIR": str(self.folder / name / "data"),
               "APPLIANCE_SERVER_PORT": str(port)}
        if cpus:  # the box's engines on its own cores too
            own |= {"APPLIANCE_SMALL_CPU_CORES": cpus, "APPLIANCE_LARGE_CPU_CORES": cpus}
        return Box(name, self.folder / name, {**self.base_env, **own}, cpus)

    def add_box(self, name: str) -> Box:
        """A new box listed in the boxes file (not started): the running boxes read the file at their next
        start, as on a real site."""
        port = free_port()
        with self.boxes_file.open("a") as listing:
            listing.write(f'[[box]]\nname = "{name}"\nurl = "http://127.0.0.1:{port}"\n\n')
        self.members = (*self.members, ClusterBox(name, f"http://127.0.0.1:{port}"))
        self.site = Site(self.members, self.site.me.name)
        self.boxes[name] = self._box(name, port, None)
        return self.boxes[name]

    def restart_haproxy(self) -> None:
        """The configuration printed again from the boxes file, as an admin does after adding a box."""
        if self.haproxy is not None:
            self.haproxy.terminate()
            self.haproxy.wait(10)
        self.start_haproxy()

    def start(self) -> None:
        for box in self.boxes.values():
            box.start()
        for box in self.boxes.values():
            box.wait_ready()
        self.start_haproxy()

    def haproxy_config(self) -> str:
        out = subprocess.run([sys.executable, "-m", "appliance", "cluster", "config", "--boxes",
                              str(self.boxes_file), "--bind", "127.0.0.1", "--port", str(self.port)],
                             capture_output=True, text=True, check=True, env=self.boxes[self.site.me.name].env)
        return out.stdout

    def start_haproxy(self) -> None:
        config = self.folder / "haproxy.cfg"
        config.write_text(self.haproxy_config())
        log = open(self.folder / "haproxy.log", "ab")
        self.haproxy = subprocess.Popen([shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", str(config)],
                                        stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:  # up once every backend's home passed its checks
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    time.sleep(2.5)  # rise 2 at inter 1s for every server
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError("haproxy did not come up: " + (self.folder / "haproxy.log").read_text()[-2000:])

    def client(self, tenant: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, headers={"X-Tenant": tenant})

    def stop(self) -> None:
        if self.haproxy is not None:
            self.haproxy.terminate()
            self.haproxy.wait(10)
        for box in self.boxes.values():
            box.stop()
