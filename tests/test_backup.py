"""`appliance backup` while clients ingest and ask, `appliance restore` into a new data folder: every document
acknowledged before the backup began is there, with its original file, and the restored box answers searches
exactly as the original; bad destinations and sources are refused with a clear message, losing nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
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
