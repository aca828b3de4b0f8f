"""Engine pool helpers that need no engine."""
import shutil
import uuid
from pathlib import Path

from appliance.generate.pool import _socket_dir


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
