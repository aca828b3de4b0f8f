"""vLLM engine-set helpers that need no engine: socket folder, leftover processes, the device check; how an engine
set starts its engines (scripted engines: the order is the engine set's logic)."""
import asyncio
import shutil
import uuid
from pathlib import Path

import pytest

from appliance.generate import EngineSet
from appliance.generate.vllm_setup import EngineConfigError, _socket_dir, build_vllm_engines

from scripted import ScriptedEngine


def test_socket_dir_stays_short_enough_for_unix_sockets(tmp_path):
    state = Path("/tmp") / f"st-{uuid.uuid4().hex[:8]}"
    try:
        assert _socket_dir(state) == state / "tmp", "a short state folder keeps its sockets inside"
    finally:
        shutil.rmtree(state, ignore_errors=True)
    deep = tmp_path / ("very-long-folder-name-" * 6) / "state"
    moved = _socket_dir(deep)
    assert moved.is_dir() and len(str(moved / "0a1b2c3d-0000-0000-0000-000000000000")) < 107
    assert _socket_dir(deep) == moved, "the same state folder always gets the same socket folder"
    assert (moved.stat().st_mode & 0o777) == 0o700


def test_engine_processes_left_by_a_killed_run_are_ended_at_boot(tmp_path):
    """A run killed with -9 leaves vLLM's engine core behind; the next boot ends the recorded ones only."""
    import json
    import subprocess
    import sys
    import time

    import psutil

    from appliance.generate.vllm_setup import PIDS_FILE, _reap_leftovers

    code = ("import ctypes, sys, time; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0); "
            "print('ok', flush=True); time.sleep(120)")
    engine = subprocess.Popen([sys.executable, "-c", code, "VLLM::EngineCore"], stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", code, "not-an-engine"], stdout=subprocess.PIPE, text=True)
    try:
        assert engine.stdout.readline() == "ok\n" and other.stdout.readline() == "ok\n"
        procs = [{"pid": p.pid, "created": psutil.Process(p.pid).create_time()} for p in (engine, other)]
        (tmp_path / PIDS_FILE).write_text(json.dumps(procs))
        _reap_leftovers(tmp_path / PIDS_FILE)
        assert not psutil.pid_exists(engine.pid), "the engine was ended (and reaped)"
        time.sleep(0.2)
        assert other.poll() is None, "a process that is not an engine is left alone"
    finally:
        for p in (engine, other):
            p.kill()
            p.wait()


def test_a_socket_folder_in_tmp_that_is_not_ours_alone_is_refused(tmp_path):
    """Someone who made the folder first (or can write into it) could read or replace the engines' sockets."""
    import os

    import pytest

    from appliance.generate.vllm_setup import EngineConfigError

    state = tmp_path / ("very-long-folder-name-" * 6) / "state"
    folder = _socket_dir(state)
    try:
        for make in ("world-writable", "someone else's", "a link"):
            shutil.rmtree(folder, ignore_errors=True)
            if folder.is_symlink():
                folder.unlink()
            if make == "a link":
                (tmp_path / "elsewhere").mkdir(mode=0o700)
                folder.symlink_to(tmp_path / "elsewhere")
            else:
                folder.mkdir()
                folder.chmod(0o777 if make == "world-writable" else 0o700)
            if make == "someone else's":
                if os.geteuid() != 0:
                    continue  # only root can hand a folder to another user
                os.chown(folder, 65534, 65534)
            with pytest.raises(EngineConfigError, match=str(folder)):
                _socket_dir(state)
    finally:
        if folder.is_symlink():
            folder.unlink()
        shutil.rmtree(folder, ignore_errors=True)
    assert _socket_dir(state) == folder and (folder.stat().st_mode & 0o777) == 0o700, "made afresh when absent"
    shutil.rmtree(folder)


def test_an_engine_sets_its_environment_on_the_event_loop_thread(tmp_path, monkeypatch):
    """vLLM reads VLLM_CPU_OMP_THREADS_BIND when the engine spawns its processes; os.environ is process-wide and
    not safe to change from a worker thread while others read it, so an engine sets it before handing off."""
    import asyncio
    import os
    import threading

    from vllm.v1.engine.async_llm import AsyncLLM

    from appliance.config import EngineSettings
    from appliance.generate.protocol import EngineLimits
    from appliance.generate.vllm_engine import VllmEngine

    writes: list[tuple[str, threading.Thread]] = []

    class RecordingEnviron(dict):
        def __setitem__(self, name, value):
            writes.append((name, threading.current_thread()))
            super().__setitem__(name, value)

        def pop(self, name, *default):
            writes.append((name, threading.current_thread()))
            return super().pop(name, *default)

    class Started:
        errored = False

        def get_tokenizer(self):
            return None

    seen: dict = {}

    def from_engine_args(args, **kwargs):  # in place of spawning vLLM's processes
        seen.update(bind=os.environ.get("VLLM_CPU_OMP_THREADS_BIND"), thread=threading.current_thread())
        return Started()

    monkeypatch.setattr(os, "environ", RecordingEnviron({**os.environ, "VLLM_CPU_KVCACHE_SPACE": "4"}))
    monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(from_engine_args))
    engine = VllmEngine("small", EngineSettings(cpu_cores="0-1"), EngineLimits(2048, 256, 512, 64), tmp_path, "cpu")

    async def start() -> threading.Thread:
        await engine.start()
        return threading.current_thread()

    loop_thread = asyncio.run(start())
    assert engine.state == "up" and seen["bind"] == "0-1" and seen["thread"] is not loop_thread
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ, "the legacy variable would override kv_cache_gib"
    assert {name for name, _ in writes} == {"VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE"}
    assert all(thread is loop_thread for _, thread in writes), "set on the event loop's thread only"


def test_a_vllm_that_finds_no_device_is_a_clear_boot_error(settings, monkeypatch, tmp_path):
    """The gpu package on a box without a GPU: vLLM's CUDA build reports its UnspecifiedPlatform (device type "")
    and would fail later with "Device string must not be empty"."""
    import vllm.platforms
    from vllm.platforms.interface import UnspecifiedPlatform

    monkeypatch.setattr(vllm.platforms, "current_platform", UnspecifiedPlatform())
    with pytest.raises(EngineConfigError, match="no device to run on.*cpu package"):
        build_vllm_engines(settings.engines(), settings.generate, settings.models_dir, tmp_path)
    assert not list(tmp_path.iterdir()), "nothing was prepared"


class SlowStart(ScriptedEngine):
    def __init__(self, role: str, log: list, fails: bool = False):
        super().__init__(role, tokenizer=None)
        self.log, self.fails = log, fails

    async def start(self) -> None:
        self.log.append(("begin", self.role))
        await asyncio.sleep(0.05 if self.fails else 0.3)
        if self.fails:
            raise RuntimeError(f"{self.role}: no model")
        await super().start()
        self.log.append(("end", self.role))


@pytest.mark.parametrize("together", [True, False])
def test_engines_start_together_or_in_order_and_a_failed_start_waits_for_the_others(together):
    async def boot(fails: bool) -> tuple[list, list, RuntimeError | None, list[str]]:
        log, recorded = [], []
        engines = EngineSet({"small": SlowStart("small", log), "large": SlowStart("large", log, fails)},
                            after_start=lambda: recorded.append(list(log)), start_together=together)
        error = None
        try:
            await engines.start()
        except RuntimeError as exc:
            error = exc
        states = [engines[role].state for role in engines]
        await engines.stop()
        return log, recorded, error, states

    log, recorded, error, states = asyncio.run(boot(fails=False))
    assert error is None and states == ["up", "up"]
    if together:
        assert log[:2] == [("begin", "small"), ("begin", "large")], log
    else:
        assert log == [("begin", "small"), ("end", "small"), ("begin", "large"), ("end", "large")], log
    assert recorded == [log], "the processes are recorded once every engine has started"

    log, recorded, error, states = asyncio.run(boot(fails=True))
    assert str(error) == "large: no model"
    assert ("end", "small") in log, "the set failed only once the other start had ended"
    assert states == ["up", "stopped"] and recorded == [log], "what did start is recorded"
