"""`appliance backup` while clients ingest and ask, `appliance restore` into a new data folder: every document
acknowledged before the backup began is there, with its original file, and the restored box answers searches
exactly as the original; bad destinations and sources are refused with a clear message, losing nothing. A backup
is private (0700/0600), and restore treats it as hostile: links, names outside it, caches (pickles) and a keys file
the server would refuse never reach the data folder."""
from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from support import SCIFACT, LiveServer, beir_slice, make_settings, write_keys

CLIENTS = 8
QUERIES = ["vitamin D deficiency", "tumour suppressor genes", "antibiotic resistance in bacteria"]


def _cli(settings_env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **settings_env}
    return subprocess.run([sys.executable, "-m", "appliance", *args], env=env, capture_output=True, text=True,
                          timeout=600)


def _env(data_dir: Path, models_dir: Path, keys_file: Path) -> dict[str, str]:
    return {"APPLIANCE_DATA_DIR": str(data_dir), "APPLIANCE_MODELS_DIR": str(models_dir),
            "APPLIANCE_ADMISSION_KEYS_FILE": str(keys_file), "APPLIANCE_DEMO_CORPUS": "false",
            "APPLIANCE_GENERATE_ENABLED": "false"}


class Clients:
    """CLIENTS threads, each ingesting one document at a time (wait=false: acknowledged once stored) and asking."""

    def __init__(self, live: LiveServer, key: str, docs: list[dict]):
        self.live, self.key, self.docs = live, key, docs
        self.acked: list[tuple[float, str]] = []  # (when acknowledged, id)
        self.asked = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(n,)) for n in range(CLIENTS)]

    def _run(self, n: int) -> None:
        with self.live.client(self.key) as client:
            for doc in self.docs[n::CLIENTS]:
                if self.stop.is_set():
                    return
                reply = client.post("/v1/documents", json={"partition": "live", "wait": False, "documents": [doc]})
                if reply.status_code != 202:  # stored, indexing continues
                    self.errors.append(f"ingest {reply.status_code}: {reply.text[:200]}")
                    continue
                self.acked.append((time.monotonic(), doc["id"]))
                ask = client.post("/v1/ask", json={"question": doc["title"][:80], "partitions": ["live"]})
                if ask.status_code != 200:
                    self.errors.append(f"ask {ask.status_code}: {ask.text[:200]}")
                self.asked += 1

    def __enter__(self) -> "Clients":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)


def _ids(client: httpx.Client, partition: str) -> set[str]:
    ids, after = set(), None
    while True:
        page = client.get("/v1/documents", params={"partition": partition, "limit": 1000,
                                                    **({"after": after} if after else {})}).json()
        ids |= {d["id"] for d in page["documents"]}
        after = page.get("next")
        if not after:
            return ids


def _search(client: httpx.Client) -> list[list[tuple[str, float]]]:
    results = []
    for query in QUERIES:
        reply = client.post("/v1/search", json={"query": query, "k": 10})
        assert reply.status_code == 200, reply.text
        results.append([(hit["document_id"], round(hit["score"], 5)) for hit in reply.json()["results"]])
    return results


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    data = beir_slice(SCIFACT, queries=20, distractors=400)
    return [{"id": str(d["_id"]), "title": d.get("title", ""), "text": d["text"]} for d in data.corpus]


def test_backup_while_eight_clients_ingest_and_ask_then_restore_answers_the_same(tmp_path, models_dir, corpus):
    keys_file, keys = write_keys(tmp_path, ["acme"])
    box = tmp_path / "box"
    env = _env(box, models_dir, keys_file)
    # one query graph on both boxes (auto picks by timing at load), so their scores can be compared exactly
    settings = make_settings(box, models_dir, admission_keys_file=str(keys_file), encoder_graph="fp32")
    with LiveServer(settings, api_key=keys["acme"]) as live:
        with live.client() as client:
            first = client.post("/v1/documents", json={"partition": "live", "documents": corpus[:40]})
            assert first.status_code == 200, first.text
            note = b"# Backup drill\n\nThe spare keys are in the blue cabinet on the third floor.\n"
            upload = client.post("/v1/files", data={"partition": "files"},
                                 files=[("file", ("drill.md", note, "text/markdown"))])
            assert upload.status_code == 200, upload.text
        with Clients(live, keys["acme"], corpus[40:]) as clients:
            while len(clients.acked) < 40 and not clients.errors:
                time.sleep(0.1)
            began = time.monotonic()
            during = _cli(env, "backup", str(tmp_path / "during"), "--caches")
            assert during.returncode == 0, during.stderr
            while len(clients.acked) < 80 and not clients.errors:  # clients go on after the backup too
                time.sleep(0.1)
        assert not clients.errors, clients.errors[:3]
        assert clients.asked >= 40
        acked_before = {doc["id"] for doc in corpus[:40]} | {i for t, i in clients.acked if t < began}
        with live.client() as client:  # waits until everything stored before it is indexed too
            last = client.post("/v1/documents", json={"partition": "live", "documents": corpus[-1:], "wait": True})
            assert last.status_code == 200, last.text
        quiet = _cli(env, "backup", str(tmp_path / "quiet"))
        assert quiet.returncode == 0, quiet.stderr
        with live.client() as client:
            original = _search(client)

    manifest = json.loads((tmp_path / "during" / "backup.json").read_text())
    assert manifest["documents"] >= len(acked_before) + 1 and manifest["keys"] and manifest["caches"]
    assert (tmp_path / "during" / "keys.toml").stat().st_mode & 0o077 == 0
    for name, source in (("during", tmp_path / "during"), ("quiet", tmp_path / "quiet")):
        restored_keys = tmp_path / f"{name}-keys.toml"
        restored = _cli(_env(tmp_path / f"restored-{name}", models_dir, restored_keys), "restore", str(source))
        assert restored.returncode == 0, restored.stderr
        assert restored_keys.read_text() == keys_file.read_text()  # the same keys let the same clients in
        new_settings = make_settings(tmp_path / f"restored-{name}", models_dir,
                                     admission_keys_file=str(restored_keys), encoder_graph="fp32")
        with LiveServer(new_settings, api_key=keys["acme"]) as again, again.client() as client:
            assert acked_before <= _ids(client, "live")
            listing = client.get("/v1/documents", params={"partition": "files"}).json()["documents"]
            file_reply = client.get(f"/v1/documents/{listing[0]['id']}/file")
            assert file_reply.status_code == 200 and file_reply.content == note
            if name == "quiet":
                assert _search(client) == original


def test_bad_destinations_and_sources_are_refused_and_nothing_is_lost(tmp_path, models_dir, corpus):
    keys_file, keys = write_keys(tmp_path, ["acme"])
    env = _env(tmp_path / "box", models_dir, keys_file)
    nothing = _cli(env, "backup", str(tmp_path / "b0"))
    assert nothing.returncode != 0 and "nothing to back up" in nothing.stderr

    settings = make_settings(tmp_path / "box", models_dir, admission_keys_file=str(keys_file))
    with LiveServer(settings, api_key=keys["acme"]) as live, live.client() as client:
        assert client.post("/v1/documents", json={"partition": "p", "documents": corpus[:5]}).status_code == 200
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "mine.txt").write_text("keep me")
    refused = _cli(env, "backup", str(occupied))
    assert refused.returncode != 0 and "not empty" in refused.stderr
    assert (occupied / "mine.txt").read_text() == "keep me"

    assert _cli(env, "backup", str(tmp_path / "b1")).returncode == 0
    onto_data = _cli(env, "restore", str(tmp_path / "b1"))  # the box's own data folder is not empty
    assert onto_data.returncode != 0 and "not empty" in onto_data.stderr
    not_a_backup = _cli(_env(tmp_path / "new", models_dir, tmp_path / "k.toml"), "restore", str(occupied))
    assert not_a_backup.returncode != 0 and "not a backup" in not_a_backup.stderr
    manifest = tmp_path / "b1" / "backup.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "version": "0.0.1"}))
    other_version = _cli(_env(tmp_path / "new", models_dir, tmp_path / "k.toml"), "restore", str(tmp_path / "b1"))
    assert other_version.returncode != 0 and "version 0.0.1" in other_version.stderr
    assert not (tmp_path / "new" / "store.sqlite3").exists()


# -- a backup is untrusted input: hand-made hostile backups -------------------------------------------------------

class _RunsOnLoad:
    """A cache value whose unpickling runs code: it touches `marker` (pathlib's own function, found by name)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def _manifest(**extra) -> bytes:
    from appliance import __version__

    return json.dumps({"format": 1, "version": __version__, "created": 0, "partitions": 0, "documents": 0,
                       "files": 0, "caches": False, "keys": False, **extra}).encode()


def _tar(path: Path, members: list[tuple[str, bytes | None, bytes, str]]) -> Path:
    """A tar archive of (name, type, data, linkname) members, written member by member as an attacker would."""
    with tarfile.open(path, "w") as tar:
        for name, kind, data, linkname in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, linkname, len(data)
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return path


def _restore_env(tmp_path: Path, models_dir: Path) -> dict[str, str]:
    return _env(tmp_path / "restored", models_dir, tmp_path / "restored-keys.toml")


@pytest.mark.parametrize("member, refusal", [
    (("files/ab/abc", tarfile.SYMTYPE, b"", "VICTIM"), "is a symlink"),
    (("store.sqlite3", tarfile.LNKTYPE, b"", "VICTIM"), "is a hard link"),
    (("indexes", tarfile.SYMTYPE, b"", "/"), "is a symlink"),
    (("files/dev", tarfile.CHRTYPE, b"", ""), "not a plain file"),
    (("ESCAPE", tarfile.REGTYPE, b"planted", ""), "absolute"),
    (("files/../../planted", tarfile.REGTYPE, b"planted", ""), "`..`"),
], ids=["symlink", "hard-link", "linked-folder", "device", "absolute", "dot-dot"])
def test_restore_refuses_an_archive_with_links_or_names_outside_it_and_writes_nothing(tmp_path, models_dir, member,
                                                                                     refusal):
    victim = tmp_path / "victim.txt"
    victim.write_text("the box's own file")
    name, kind, data, linkname = member
    name = name.replace("ESCAPE", str(tmp_path / "planted"))
    archive = _tar(tmp_path / "hostile.tar", [("backup.json", tarfile.REGTYPE, _manifest(), ""),
                                              (name, kind, data, linkname.replace("VICTIM", str(victim))),
                                              ("store.sqlite3" if kind != tarfile.LNKTYPE else "files/x",
                                               tarfile.REGTYPE, b"not read", "")])
    done = _cli(_restore_env(tmp_path, models_dir), "restore", str(archive))
    assert done.returncode != 0 and refusal in done.stderr and "nothing was restored" in done.stderr, done.stderr
    assert victim.read_text() == "the box's own file"
    assert not list(tmp_path.rglob("planted")), "a name outside the backup was written"
    assert not (tmp_path / "restored").exists() or {p.name for p in (tmp_path / "restored").iterdir()} <= {".lock"}
    assert not (tmp_path / "restored-keys.toml").exists()


def test_restore_refuses_a_backup_folder_with_a_symlink(tmp_path, models_dir):
    """A folder backup (what `appliance backup` writes) with a link to a file only root may read: a restore run as
    root would have copied the file's contents into the data folder."""
    secret = tmp_path / "secret"
    secret.write_text("root's secret")
    source = tmp_path / "backup"
    (source / "files" / "ab").mkdir(parents=True)
    (source / "backup.json").write_bytes(_manifest())
    (source / "store.sqlite3").write_bytes(b"")
    (source / "files" / "ab" / "abc").symlink_to(secret)
    done = _cli(_restore_env(tmp_path, models_dir), "restore", str(source))
    assert done.returncode != 0 and "files/ab/abc is a symlink" in done.stderr, done.stderr
    assert not any(p.is_file() and p.read_bytes() == secret.read_bytes()
                   for p in (tmp_path / "restored").rglob("*")), "the linked file was copied"
    (source / "files" / "ab" / "abc").unlink()
    (source / "backup.json").unlink()
    (source / "backup.json").symlink_to(tmp_path / "elsewhere.json")
    linked_manifest = _cli(_restore_env(tmp_path, models_dir), "restore", str(source))
    assert linked_manifest.returncode != 0 and "backup.json is a symlink" in linked_manifest.stderr


def test_restore_never_takes_the_caches_nor_a_keys_file_the_server_would_refuse(tmp_path, models_dir):
    """Cache values are pickles: a hostile backup's cache would run code at the first cache hit. Restored boxes start
    with cold caches; the keys file must pass the server's own check; everything is written 0600 in 0700 folders."""
    import diskcache

    from appliance.cache import ExactCache

    marker, source = tmp_path / "code-ran", tmp_path / "backup"
    (source / "files" / "ab").mkdir(parents=True)
    (source / "backup.json").write_bytes(_manifest(caches=True, keys=True))
    (source / "store.sqlite3").write_bytes(b"store")
    (source / "files" / "ab" / "abc").write_bytes(b"original")
    hostile = diskcache.Cache(str(source / "cache" / "exact"))
    hostile.set("question", _RunsOnLoad(marker))
    hostile.close()
    with diskcache.Cache(str(source / "cache" / "exact")) as check:  # the payload is real: reading it runs code
        check.get("question")
    assert marker.exists()
    marker.unlink()
    (source / "keys.toml").write_text('[[keys]]\nsha256 = "not a digest"\nrole = "admin"\n')
    env = _restore_env(tmp_path, models_dir)
    refused = _cli(env, "restore", str(source))
    assert refused.returncode != 0 and "keys file is refused" in refused.stderr, refused.stderr
    assert not (tmp_path / "restored" / "store.sqlite3").exists() and not (tmp_path / "restored-keys.toml").exists()

    (source / "keys.toml").unlink()
    write_keys(source, ["acme"])
    for path in source.rglob("*"):
        path.chmod(0o777 if path.is_dir() else 0o644)  # as a careless copy leaves it
    (source / "keys.toml").chmod(0o600)
    done = _cli(env, "restore", str(source))
    assert done.returncode == 0, done.stderr
    restored = tmp_path / "restored"
    assert not (restored / "cache").exists() and (restored / "files" / "ab" / "abc").read_bytes() == b"original"
    cache = ExactCache(restored / "cache" / "exact", 10, 60, 1 << 20)  # as the restored server opens it
    assert cache.get("question") is None and not marker.exists()
    cache.close()
    shutil.rmtree(restored / "cache")
    for path in [*restored.rglob("*"), tmp_path / "restored-keys.toml"]:
        if path.name != ".lock":
            assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path


def test_backups_are_private_and_a_tar_archive_restores_as_a_folder_does(tmp_path, models_dir, corpus):
    from appliance.box.backup import backup, restore

    keys_file, keys = write_keys(tmp_path, ["acme"])
    settings = make_settings(tmp_path / "box", models_dir, admission_keys_file=str(keys_file))
    with LiveServer(settings, api_key=keys["acme"]) as live, live.client() as client:
        assert client.post("/v1/documents", json={"partition": "p", "documents": corpus[:5]}).status_code == 200
    folder, archive = backup(settings, tmp_path / "b-folder"), backup(settings, tmp_path / "b.tar")
    assert stat.S_IMODE((tmp_path / "b.tar").stat().st_mode) == 0o600 and archive.folder.is_file()
    for path in [folder.folder, *folder.folder.rglob("*")]:
        mode, links = stat.S_IMODE(path.stat().st_mode), path.stat().st_nlink
        assert mode == 0o700 if path.is_dir() else (mode == 0o600 or links > 1), (path, oct(mode))
    with tarfile.open(tmp_path / "b.tar") as tar:
        assert all(m.isreg() or m.isdir() for m in tar.getmembers()), "no link members, even for linked files"
        assert {"backup.json", "store.sqlite3", "keys.toml"} <= set(tar.getnames())
    assert _cli(_env(tmp_path / "b2", models_dir, keys_file), "backup", str(tmp_path / "b.tar")).returncode != 0

    new_keys = tmp_path / "new-keys.toml"
    restored = make_settings(tmp_path / "restored", models_dir, admission_keys_file=str(new_keys))
    report = restore(restored, tmp_path / "b.tar")
    assert report.documents == 5 and report.keys and new_keys.read_text() == keys_file.read_text()
    with LiveServer(restored, api_key=keys["acme"]) as again, again.client() as client:
        assert len(_ids(client, "p")) == 5
    if os.geteuid() == 0:  # root restoring a service install (its data folder the service user's): 0640 to its group
        service = tmp_path / "service-data"
        service.mkdir()
        os.chown(service, 64123, 64124)
        service_keys = tmp_path / "etc" / "keys.toml"
        restore(make_settings(service, models_dir, admission_keys_file=str(service_keys)), tmp_path / "b.tar")
        st = service_keys.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 0, 64124)
        # the restored store is the service user's, or the service could not write it
        owners = {(p.lstat().st_uid, p.lstat().st_gid) for p in service.rglob("*")}
        assert owners == {(64123, 64124)}, owners
