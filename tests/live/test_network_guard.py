"""No outbound network: the guard in tests/netguard blocks it, and the whole appliance runs under it without a try.

The guard (tests/netguard/sitecustomize.py) is an audit hook every Python process started with
PYTHONPATH=tests/netguard and APPLIANCE_NETGUARD_LOG=<file> installs at start-up, engine processes included.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx

from support import ROOT, free_port

GUARD_DIR = ROOT / "tests" / "netguard"

BOOT_TIMEOUT_S = 900  # one vLLM engine (the tiny test model) starts in about a minute here


def guarded_env(log: Path, armed: Path | None = None, extra_path: str | None = None, **more: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(GUARD_DIR), extra_path, env.get("PYTHONPATH")) if p)
    env["APPLIANCE_NETGUARD_LOG"] = str(log)
    if armed is not None:
        env["APPLIANCE_NETGUARD_ARMED"] = str(armed)
    env.update(more)
    return env


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


PROBE = textwrap.dedent('''
    import asyncio, json, multiprocessing, os, socket, sys, tempfile, urllib.error, urllib.request

    TARGET = ("192.0.2.1", 9)  # TEST-NET-1 (RFC 5737): documentation only, routed nowhere

    def outcome(fn):
        try:
            fn()
            return "allowed"
        except PermissionError:
            return "blocked"
        except urllib.error.URLError as exc:
            return "blocked" if isinstance(exc.reason, PermissionError) else f"URLError: {exc.reason!r}"
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"

    def tcp():
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(TARGET)
        finally:
            s.close()

    def in_spawned_child(queue):
        queue.put(outcome(lambda: socket.create_connection(TARGET, timeout=2)))

    def v6(address):
        try:
            s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        except OSError:
            return "no-ipv6"
        with s:
            return outcome(lambda: s.connect(address))

    async def via_asyncio():
        await asyncio.wait_for(asyncio.open_connection(*TARGET), 2)

    if __name__ == "__main__":
        import sitecustomize
        result = {"sitecustomize": sitecustomize.__file__, "pid": os.getpid()}
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        result["loopback"] = outcome(lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close())
        result["localhost"] = outcome(lambda: socket.create_connection(("localhost", port), timeout=2).close())
        unix_path = os.path.join(tempfile.mkdtemp(), "s")
        unix = socket.socket(socket.AF_UNIX)
        unix.bind(unix_path)
        unix.listen()
        result["unix"] = outcome(lambda: socket.socket(socket.AF_UNIX).connect(unix_path))
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        result["udp_loopback"] = outcome(lambda: udp.sendto(b"x", ("127.0.0.1", port)))
        result["create_connection"] = outcome(lambda: socket.create_connection(TARGET, timeout=2))
        result["connect"] = outcome(tcp)
        result["sendto"] = outcome(lambda: udp.sendto(b"x", TARGET))
        result["sendmsg"] = outcome(lambda: udp.sendmsg([b"x"], [], 0, TARGET))
        result["ipv6_loopback"] = v6(("::1", 9))
        result["ipv6"] = v6(("2001:db8::1", 9))  # documentation range (RFC 3849)
        result["mapped"] = v6(("::ffff:192.0.2.1", 9))
        result["dns"] = outcome(lambda: socket.getaddrinfo("example.invalid", 80))
        result["urllib"] = outcome(lambda: urllib.request.urlopen("http://192.0.2.1:9/", timeout=2))
        result["asyncio"] = outcome(lambda: asyncio.run(via_asyncio()))
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        child = ctx.Process(target=in_spawned_child, args=(queue,))
        child.start()
        result["spawned_child"] = queue.get(timeout=120)
        child.join(60)
        result["child_pid"] = child.pid
        print(json.dumps(result))
''')


def test_guard_blocks_and_logs_what_leaves_the_host(tmp_path):
    log, armed = tmp_path / "net.log", tmp_path / "armed.log"
    shadowed = tmp_path / "other"  # a sitecustomize further down sys.path: it must still run
    shadowed.mkdir()
    (shadowed / "sitecustomize.py").write_text(f"open({str(tmp_path / 'chained')!r}, 'a').write('ran\\n')\n")
    (tmp_path / "probe.py").write_text(PROBE)
    done = subprocess.run([sys.executable, str(tmp_path / "probe.py")], capture_output=True, text=True,
                          timeout=240, env=guarded_env(log, armed, str(shadowed)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["sitecustomize"]).parent == GUARD_DIR
    assert (tmp_path / "chained").read_text().count("ran") >= 1  # the shadowed one ran (child processes too)
    for allowed in ("loopback", "localhost", "unix", "udp_loopback"):
        assert result[allowed] == "allowed", (allowed, result)
    assert result["ipv6_loopback"] in ("allowed", "no-ipv6"), result
    for name in ("create_connection", "connect", "sendto", "sendmsg", "dns", "urllib", "asyncio", "spawned_child"):
        assert result[name] == "blocked", (name, result)
    for name in ("ipv6", "mapped"):
        assert result[name] in ("blocked", "no-ipv6"), (name, result)
    lines = read_lines(log)
    assert {line["pid"] for line in lines} == {result["pid"], result["child_pid"]}
    events = {line["event"] for line in lines}
    assert {"socket.connect", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo"} <= events, events
    assert all(line["stack"] and line["address"] for line in lines)
    assert any("192.0.2.1" in line["address"] for line in lines)
    assert any("example.invalid" in line["address"] for line in lines)
    assert {a["pid"] for a in read_lines(armed)} >= {result["pid"], result["child_pid"]}


def test_install_guards_a_running_process(tmp_path):
    log = tmp_path / "net.log"
    code = textwrap.dedent(f'''
        import importlib.util, socket
        spec = importlib.util.spec_from_file_location("netguard", {str(GUARD_DIR / "sitecustomize.py")!r})
        guard = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(guard)
        guard.install({str(log)!r})
        guard.install({str(log)!r})  # idempotent: one hook
        try:
            socket.create_connection(("192.0.2.1", 9), timeout=2)
        except PermissionError as exc:
            print("blocked:", exc)
    ''')
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_NETGUARD")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and done.stdout.startswith("blocked:"), done.stdout + done.stderr
    assert len(read_lines(log)) == 1


def _wait_ready(url: str, server: subprocess.Popen, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert server.poll() is None, f"server exited with {server.returncode}"
        try:
            reply = httpx.get(url + "/readyz", timeout=5)
            if reply.status_code == 200:
                return
            assert reply.json().get("status") != "failed", reply.text
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError("server did not become ready")


def test_full_flow_sends_nothing_off_the_host_and_drains_on_sigterm(tmp_path, models_dir, tiny_llm):
    """`appliance serve` in a guarded subprocess with a real engine: boot, ingest, search, ask (generated, then
    from the cache), stream, delete; then SIGTERM in the middle of a stream: the port closes, the stream runs to
    its end, the process exits 0. Not one network attempt leaves the host, from the server or its engine."""
    log, armed, port = tmp_path / "net.log", tmp_path / "armed.log", free_port()
    env = guarded_env(log, armed, APPLIANCE_DATA_DIR=str(tmp_path / "state"), APPLIANCE_MODELS_DIR=str(models_dir),
                      APPLIANCE_DEMO_CORPUS="false", APPLIANCE_GENERATE_ENABLED="true",
                      APPLIANCE_SMALL_ENABLED="true", APPLIANCE_SMALL_MODEL=str(tiny_llm),
                      APPLIANCE_SMALL_KV_CACHE_GIB="0.125",
                      APPLIANCE_LARGE_ENABLED="false", APPLIANCE_SERVER_DRAIN_TIMEOUT_S="60")
    output = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "appliance", "serve", "--host", "127.0.0.1", "--port",
                               str(port)], env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, server, BOOT_TIMEOUT_S)
        with httpx.Client(base_url=url, timeout=300) as c:
            docs = [{"id": "paris", "title": "Paris", "text": "Paris is the capital and largest city of France."},
                    {"id": "nile", "title": "Nile", "text": "The Nile is a major river in northeastern Africa."}]
            stored = c.post("/v1/documents", json={"tenant": "t", "partition": "p", "documents": docs})
            assert stored.status_code == 200, stored.text
            hits = c.post("/v1/search", json={"tenant": "t", "query": "capital of France", "k": 2}).json()
            assert hits["results"][0]["document_id"] == "paris", hits
            question = {"tenant": "t", "question": "What is the capital of France?", "max_tokens": 8}
            answer = c.post("/v1/ask", json=question)
            assert answer.status_code == 200 and answer.json()["sources"], answer.text
            assert answer.json()["degraded"] is False and answer.json()["route"]["engine"] == "small"
            # the tiny model may answer only white space, which is never cached
            expected = "exact" if answer.json()["answer"].strip() else "none"
            assert c.post("/v1/ask", json=question).json()["cache"] == expected
            streamed = c.post("/v1/ask", json={"tenant": "t", "question": "Which river?", "stream": True,
                                               "max_tokens": 8})
            assert streamed.status_code == 200 and "event: done" in streamed.text, streamed.text
            assert c.delete("/v1/documents/nile", params={"tenant": "t"}).status_code == 200
            assert [h["document_id"] for h in c.post("/v1/search", json={"tenant": "t", "query": "river"})
                    .json()["results"]] == ["paris"]
            assert c.get("/metrics").status_code == 200
        events, refused, done = _stream_through_sigterm(url, server)
        assert refused, "no new connections once shutting down"
        assert events[0] == "sources" and events[-1] == "done", events[-3:]
        assert done["usage"]["completion_tokens"] > 1 and done["finish_reason"] in {"stop", "length"}
        # uvicorn re-raises the signal it handled once shut down, so a clean stop exits "killed by SIGTERM"
        assert server.wait(timeout=120) in (0, -signal.SIGTERM)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        output.close()
    assert "Application shutdown complete" in (tmp_path / "server.log").read_text(), "the lifespan ran to its end"
    guarded = {a["pid"] for a in read_lines(armed)}
    assert server.pid in guarded, "the guard was not installed in the server process"
    assert len(guarded) > 1, "no engine process ran under the guard"
    attempts = read_lines(log)
    assert not attempts, "outbound network attempts:\n" + "\n".join(json.dumps(a, indent=1) for a in attempts)


def _stream_through_sigterm(url: str, server: subprocess.Popen) -> tuple[list[str], bool, dict]:
    """Stream a long answer and send SIGTERM at its first token; returns the event names, whether a new
    connection was refused meanwhile, and the `done` event's data."""
    events, refused, done = [], False, {}
    with httpx.Client(base_url=url, timeout=300) as c, c.stream("POST", "/v1/ask", json={
            "tenant": "t", "question": "Describe the city of Paris at length.", "stream": True,
            "max_tokens": 200}) as response:
        for line in response.iter_lines():
            if line.startswith("event: "):
                events.append(line[7:])
                if events.count("token") == 1 and events[-1] == "token":
                    server.send_signal(signal.SIGTERM)
                    time.sleep(1)
                    try:
                        httpx.get(url + "/healthz", timeout=2)
                    except httpx.HTTPError:
                        refused = True
            elif line.startswith("data: ") and events and events[-1] == "done":
                done = json.loads(line[6:])
    return events, refused, done
