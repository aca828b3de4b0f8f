"""The API keys file: written as valid TOML whatever the key's name, refused at boot when it is wrong or readable by
others, and followed while the server runs (on change, and on SIGHUP) without losing the keys it has to a wrong edit;
a file that is deleted or unreadable refuses every key until it is back (fails closed)."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import stat
import subprocess
import sys
import time
import tomllib

import httpx
import pytest
import uvicorn

from appliance.serve import create_app
from appliance.serve.admission.keys import ApiKeys, KeysFileError, add_key, hash_key
from support import LiveServer, free_port, make_settings, write_keys

HOSTILE_NAMES = ["bot 🤖", 'say "hi"', "C:\\keys\\new", "two\nlines\r\n", "tab\tbell\x07nul\x00del\x7f",
                 "\\u0041 not an escape", "'''", '"""', "中文名字", "trailing \\"]


def _entry(digest: str, tenant: str, name: str | None = None) -> str:
    return f'[[keys]]\nsha256 = "{digest}"\ntenant = "{tenant}"\n' + (f'name = "{name}"\n' if name else "") + "\n"


def _wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_keys_add_writes_valid_toml_for_any_name(tmp_path):
    path = tmp_path / "new" / "keys.toml"
    keys = {name: add_key(path, f"t{i}", name) for i, name in enumerate(HOSTILE_NAMES)}
    assert (path.stat().st_mode & 0o777) == 0o600, "created readable by its owner only"
    parsed = tomllib.loads(path.read_text(encoding="utf-8"))["keys"]
    assert [entry["name"] for entry in parsed] == HOSTILE_NAMES
    loaded = ApiKeys.load(path)
    assert all(loaded.tenant_for(key) == f"t{i}" for i, key in enumerate(keys.values()))
    with pytest.raises(KeysFileError, match="not valid Unicode"):
        add_key(path, "t", "lone surrogate \udcff")  # what argv decodes invalid UTF-8 to
    assert len(ApiKeys.load(path)) == len(HOSTILE_NAMES), "a refused name adds nothing"


@pytest.mark.parametrize("text, expected", [
    ('keys = "x"\n', "must be [[keys]] tables"),
    ("keys = [1, 2]\n", "keys entry 1: must be a table"),
    ('[[keys]]\nsha256 = 5\ntenant = "a"\n', "keys entry 1: sha256 must be 64 hex digits"),
    (_entry("a" * 64, "a") + '[[keys]]\nsha256 = "' + "b" * 64 + '"\nname = "ci"\n',
     "keys entry 2 (name 'ci'): tenant must be"),
    (_entry("a" * 64, "a b"), "keys entry 1: tenant must be"),
    ('[[keys]]\nsha256 = "' + "a" * 64 + '"\ntenant = "a"\nname = 7\n', "keys entry 1: name must be a string"),
    ("[[keys]\n", "not valid TOML"),
    (b"name = '\xff'\n", "not UTF-8"),
])
def test_a_malformed_entry_is_a_clear_error_naming_it(tmp_path, text, expected):
    path = tmp_path / "keys.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    path.chmod(0o600)
    with pytest.raises(KeysFileError, match=expected.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        ApiKeys.load(path)


def test_a_hash_listed_twice_is_refused_not_given_to_the_last_tenant(tmp_path):
    path = tmp_path / "keys.toml"
    digest = hash_key("rak_shared")
    path.write_text(_entry(digest, "alpha") + _entry(digest.upper().replace("SHA256:", ""), "beta", "copy"))
    path.chmod(0o600)
    with pytest.raises(KeysFileError, match=r"keys entry 2 \(name 'copy'\): same sha256 as keys entry 1"):
        ApiKeys.load(path)


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620, 0o602], ids=oct)
def test_a_keys_file_others_can_read_or_write_stops_the_boot(tmp_path, models_dir, mode):
    path, _ = write_keys(tmp_path, ["alpha"])
    path.chmod(mode)
    settings = make_settings(tmp_path / "state", models_dir, admission_keys_file=str(path))
    with pytest.raises(KeysFileError, match=f"chmod 600 {path}"):
        create_app(settings)
    path.chmod(0o640)  # group-readable is an operator's choice (e.g. a service group)
    create_app(settings)


def test_the_server_follows_the_keys_file_and_keeps_its_keys_when_a_change_is_wrong(tmp_path, models_dir, caplog):
    path, keys = write_keys(tmp_path, ["alpha", "beta"])
    settings = make_settings(tmp_path / "state", models_dir, admission_keys_file=str(path))
    good = path.read_text()
    with LiveServer(settings) as live, caplog.at_level(logging.INFO, logger="appliance.serve"):
        def status(key: str) -> int:
            with live.client(key) as c:
                return c.get("/v1/partitions").status_code

        assert status(keys["alpha"]) == 200
        gamma = add_key(path, "gamma", "added while running")
        assert _wait_for(lambda: status(gamma) == 200), "a key added to the file works without a restart"
        without_beta = "\n\n".join(block for block in path.read_text().split("\n\n")
                                     if hash_key(keys["beta"]) not in block and block.strip()) + "\n\n"
        _replace(path, without_beta)
        assert _wait_for(lambda: status(keys["beta"]) == 401), "a key removed from the file is revoked"
        for wrong in ("[[keys]\n", without_beta + _entry(hash_key(keys["alpha"]), "beta")):
            _replace(path, wrong)
            # the file is checked on the request path: keep asking while waiting
            assert _wait_for(lambda: status(keys["alpha"]) and "keeping the previous 2 keys" in caplog.text)
            caplog.clear()
            assert status(keys["alpha"]) == 200 and status(gamma) == 200, "a wrong file changes nothing"
        _replace(path, good, 0o644)
        assert _wait_for(lambda: status(keys["alpha"]) and f"chmod 600 {path}" in caplog.text), \
            "a file others can read is not taken"
        assert status(keys["beta"]) == 401
        path.chmod(0o600)
        assert _wait_for(lambda: status(keys["beta"]) == 200)


def _replace(path, text: str, mode: int = 0o600) -> None:
    """As an editor or a config tool saves: a new file renamed over the old one."""
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def test_sighup_reloads_the_keys_file(tmp_path, models_dir):
    """A change the periodic check cannot see (same inode, size, mtime and mode) is read on SIGHUP. The server runs
    on this test's main thread: only there can a signal reach its event loop."""
    path, keys = write_keys(tmp_path, ["alpha"])
    settings = make_settings(tmp_path / "state", models_dir, admission_keys_file=str(path))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    other_key = "rak_" + "o" * 43
    caught: list[int] = []
    previous = signal.signal(signal.SIGHUP, lambda signum, frame: caught.append(signum))  # never kill the test run

    async def status(client: httpx.AsyncClient, key: str) -> int:
        return (await client.get("/v1/partitions", headers={"Authorization": f"Bearer {key}"})).status_code

    async def go() -> list[int]:
        serving = asyncio.create_task(server.serve())
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            while not (await _ready(client)):
                await asyncio.sleep(0.2)
            before = [await status(client, keys["alpha"]), await status(client, other_key)]
            st = path.stat()
            with open(path, "r+") as f:  # in place, same length: only the content differs
                f.write(path.read_text().replace(hash_key(keys["alpha"]), hash_key(other_key)))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            await asyncio.sleep(2.5)  # past the periodic check, which must not see it
            unseen = [await status(client, keys["alpha"]), await status(client, other_key)]
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(50):
                await asyncio.sleep(0.1)
                if await status(client, other_key) == 200:
                    break
            after = [await status(client, keys["alpha"]), await status(client, other_key)]
        server.should_exit = True
        await serving
        return before + unseen + after

    try:
        statuses = asyncio.run(go())
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert caught == [], "the server handles SIGHUP itself"
    assert statuses == [200, 401, 200, 401, 401, 200]


async def _ready(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/readyz")).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_deleted_or_unreadable_keys_file_refuses_every_keyed_request_until_it_is_back(tmp_path, models_dir,
                                                                                          caplog):
    """Revocation fails closed: deleting the file (or chmod 000, which stops even root here) takes every key away,
    with a 503 JSON error and a log line, until the file can be read again."""
    path, keys = write_keys(tmp_path, ["alpha"])
    good = path.read_text()
    settings = make_settings(tmp_path / "state", models_dir, admission_keys_file=str(path))
    with LiveServer(settings) as live, live.client(keys["alpha"]) as client, \
            caplog.at_level(logging.INFO, logger="appliance.serve"):
        assert client.get("/v1/partitions").status_code == 200
        for take_away, give_back in ((path.unlink, lambda: _replace(path, good)),
                                     (lambda: path.chmod(0), lambda: path.chmod(0o600))):
            take_away()
            assert _wait_for(lambda: client.get("/v1/partitions").status_code == 503), "the old keys were kept"
            refused = client.get("/v1/partitions")
            assert refused.json()["error"]["code"] == "keys_unavailable", refused.text
            assert "refusing every keyed request" in caplog.text
            caplog.clear()
            give_back()
            assert _wait_for(lambda: client.get("/v1/partitions").status_code == 200), "not served again"
            assert "reloaded: 1 keys" in caplog.text


def test_keys_add_as_root_on_a_service_install_lets_the_service_group_read_the_file(tmp_path, models_dir):
    """The installer gives the data folder to the service user; `sudo appliance keys add` then writes the file
    0640 with that user's group (0600 root-only would stop the service's boot), and the server takes 0640."""
    if os.geteuid() != 0:
        pytest.skip("writes a file for another group: needs root (CI runs as root)")
    data_dir, path = tmp_path / "data", tmp_path / "etc" / "keys.toml"
    data_dir.mkdir()
    os.chown(data_dir, 64123, 64124)  # the service user and its group
    env = {**os.environ, "APPLIANCE_DATA_DIR": str(data_dir), "APPLIANCE_MODELS_DIR": str(models_dir),
           "APPLIANCE_ADMISSION_KEYS_FILE": str(path)}
    for tenant in ("alpha", "beta"):  # created, then appended to
        done = subprocess.run([sys.executable, "-m", "appliance", "keys", "add", "--tenant", tenant], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        st = path.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 0, 64124)
    assert len(ApiKeys.load(path)) == 2
    create_app(make_settings(tmp_path / "state", models_dir, admission_keys_file=str(path)))

    mine, _ = write_keys(tmp_path, ["gamma"])  # a data folder root owns: no service, the file stays 0600
    assert stat.S_IMODE(mine.stat().st_mode) == 0o600
