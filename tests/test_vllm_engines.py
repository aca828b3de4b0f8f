"""vLLM engine-set helpers that need no engine: socket folder, leftover processes."""
import shutil
import uuid
from pathlib import Path

from appliance.generate.vllm_engines import _socket_dir


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

    from appliance.generate.vllm_engines import PIDS_FILE, _reap_leftovers

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
