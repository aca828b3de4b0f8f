"""The server as a service runs it: through the installed console script, killed with -9 mid-answer, restarted at
once. Engine processes must not hold the data-folder lock or the listening socket, and must not import the CLI's
heavy dependencies through the console script (vLLM re-imports the main module in the processes it spawns)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from support import ROOT, free_port

SCRIPT = Path(sys.executable).parent / "appliance"
HEAVY = ("bm25s", "numba", "llvmlite", "usearch", "jieba", "vllm", "torch")


def test_the_console_script_imports_nothing_heavy_as_a_spawned_main_module():
    code = ("import runpy, sys; runpy.run_path(sys.argv[1], run_name='__mp_main__'); "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(SCRIPT)], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _start(env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(SCRIPT), "serve"], env=env, cwd=ROOT, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT)


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
        try:
            ready = httpx.get(url + "/readyz", timeout=2)
        except httpx.HTTPError:
            ready = None
        if ready is not None and ready.status_code == 200:
            return
        assert ready is None or ready.json().get("status") != "failed", ready.text
        time.sleep(0.5)
    raise TimeoutError(log.read_text()[-3000:])


def _engine_processes(server: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(server).children(recursive=True) if p.name().startswith("VLLM")]


def _first_token_then_kill(url: str, proc: subprocess.Popen) -> None:
    body = {"tenant": "default", "question": "what happens after a crash?", "stream": True, "max_tokens": 200}
    with httpx.stream("POST", url + "/v1/ask", json=body, timeout=120) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line == "event: token":
                os.kill(proc.pid, signal.SIGKILL)
                break
    proc.wait(30)


def test_killed_with_9_mid_answer_and_restarted_at_once(tmp_path, models_dir, tiny_llm):
    port = free_port()
    env = {**os.environ, "APPLIANCE_DATA_DIR": str(tmp_path / "state"), "APPLIANCE_MODELS_DIR": str(models_dir),
           "APPLIANCE_SERVER_PORT": str(port), "APPLIANCE_SMALL_ENABLED": "true",
           "APPLIANCE_SMALL_MODEL": str(tiny_llm),
           "APPLIANCE_SMALL_KV_CACHE_GIB": "0.125", "APPLIANCE_LOG_LEVEL": "warning",
           "APPLIANCE_LARGE_ENABLED": "false"}  # one engine shows what each must do (two took 150 s of CI)
    url, log = f"http://127.0.0.1:{port}", tmp_path / "server.log"
    first = _start(env, log)
    try:
        _wait_ready(url, first, log)
        engines = _engine_processes(first.pid)
        assert engines, "the engine runs in a process of its own"
        lock = str((tmp_path / "state" / ".lock").resolve())
        for engine in engines:
            held = {f.path for f in engine.open_files()}
            assert lock not in held, f"engine process {engine.pid} holds the data-folder lock"
            listening = [c for c in engine.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
            assert not any(c.laddr.port == port for c in listening), "an engine holds the server's socket"
        _first_token_then_kill(url, first)
        second = _start(env, log)  # at once: no waiting for the orphans to go
        try:
            _wait_ready(url, second, log)
            assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in engines), \
                "the engine processes of the killed run were ended"
            reply = httpx.post(url + "/v1/ask", json={"tenant": "default", "question": "what happens after a crash?",
                                                       "max_tokens": 8}, timeout=120)
            assert reply.status_code == 200 and reply.json()["sources"], reply.text
        finally:
            second.terminate()
            second.wait(60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
