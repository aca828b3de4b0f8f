"""A full disk, for real: a small tmpfs (needs root to mount) filled to the last block at a chosen step.

After the fault nothing acknowledged is lost, the old index version still serves, no partial file is left behind,
and the next write succeeds once space is back (issue 10, item 10).
"""
from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest

import appliance.index.builder as builder
import appliance.index.token_shards as token_shards
import appliance.index.tokens as tokens_module
import appliance.library.ingest as ingest_module
from appliance.config import IndexSettings
from appliance.encode import load_encoder
from appliance.index import NewChunks, PartitionSnapshot, build_version, current_version
from appliance.library import DocumentInput
from appliance.paths import model_folder
from appliance.retrieve import PartitionFilter
from appliance.store import NewDocument, Store
from appliance.text import BM25Tokenizer
from appliance.wiring import open_services

from support import make_settings

TEXTS = ["Aspirin reduces the risk of heart attack in adults.", "Vitamin D deficiency is common in the north.",
         "The mitochondria is the powerhouse of the cell.", "Regular exercise lowers blood pressure."]


class SmallDisk:
    def __init__(self, path: Path):
        self.path = path
        self._filler = path / "filler"

    def fill(self) -> None:
        """Take every free block (write() fills the last partial one before it fails)."""
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                os.write(fd, b"\0" * 65536)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)


@pytest.fixture
def small_disk(tmp_path):
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield SmallDisk(folder)
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)  # lazy: open snapshots may still map files


@pytest.fixture(scope="module")
def encoder(models_dir):
    return load_encoder("minilm", model_folder(models_dir, "minilm"))


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def chunks(encoder, ids: list[int]) -> NewChunks:
    enc = encoder.encode([TEXTS[i - 1] for i in ids])
    docs = [{"key": f"d{i}", "title": "", "source": "", "metadata": {}} for i in ids]
    return NewChunks(np.asarray(ids, np.int64), np.zeros(len(ids), np.int32), [TEXTS[i - 1] for i in ids], docs,
                     enc.dense, enc.tokens)


def build(folder: Path, encoder, version: int, previous, added: NewChunks) -> PartitionSnapshot:
    return build_version(folder, 7, version, encoder.name, encoder.dim, previous, np.zeros(0, np.int64), added,
                         IndexSettings(), BM25Tokenizer().many)


def test_the_store_on_a_full_disk_keeps_what_was_acknowledged(small_disk):
    store = Store(small_disk.path / "s.sqlite3")
    p = store.ensure_partition("t", "p")
    store.upsert_documents(p.id, [NewDocument("a", "a", "alpha", ["alpha"], "h-a")])
    small_disk.fill()
    # a small write fails at COMMIT; a large one mid-transaction, where SQLite has already rolled back (before the
    # fix, the second ROLLBACK hid the real error behind "no transaction is active")
    for text in ("beta", "b" * 3_000_000):
        with pytest.raises(sqlite3.OperationalError, match="full"):
            store.upsert_documents(p.id, [NewDocument("b", "b", text, [text], f"h-{len(text)}")])
    assert store.count_documents(p.id) == 1 and store.partition_by_id(p.id).version == 1
    small_disk.free()
    assert store.upsert_documents(p.id, [NewDocument("b", "b", "beta", ["beta"], "h-b")]).version == 2
    assert {c.doc_key for c in store.chunks(store.chunk_ids(p.id))} == {"a", "b"}


@pytest.mark.parametrize("step", ["_write_rows", "token_shards._publish", "_point_current"])  # version, shards, CURRENT
def test_an_index_build_on_a_full_disk_leaves_the_old_version_and_nothing_else(small_disk, encoder, monkeypatch,
                                                                               step):
    folder = small_disk.path / "p"
    v1 = build(folder, encoder, 1, None, chunks(encoder, [1, 2]))
    before = files(folder)
    module, name = (token_shards, step.split(".")[1]) if "." in step else (builder, step)
    real = getattr(module, name)

    def full_then(*args, **kwargs):
        small_disk.fill()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, full_then)
    with pytest.raises(OSError) as failure:
        build(folder, encoder, 2, v1, chunks(encoder, [3, 4]))
    monkeypatch.undo()
    assert failure.value.errno == errno.ENOSPC
    assert files(folder) == before  # no .tmp-* folder, .part file, unreferenced shard or CURRENT temp
    assert current_version(folder) == v1.folder
    rows, _ = PartitionSnapshot(v1.folder).ann(encoder.encode(["heart attack"]).dense[0], 1)
    assert v1.chunk(int(rows[0])).doc_key == "d1"  # the old version still serves, from disk and mapped
    small_disk.free()
    v2 = build(folder, encoder, 2, v1, chunks(encoder, [3, 4]))
    assert list(v2.chunk_ids) == [1, 2, 3, 4] and len(v2.token_codes([0, 3]).lengths) == 2


def test_a_full_disk_while_a_codebook_is_trained_leaves_the_int8_version_and_nothing_else(small_disk, encoder,
                                                                                        monkeypatch):
    """The build that crosses `codebook_min_tokens` publishes a codebook and re-codes the int8 shard: a full disk
    there (the codebook, or the residual shard after it) must leave the int8 version as it was."""
    folder = small_disk.path / "p"
    v1 = build(folder, encoder, 1, None, chunks(encoder, [1]))
    params = IndexSettings(codebook_centroids=4, codebook_min_tokens=v1.token_count + 1, codebook_sample=1000)
    assert v1.token_codec == "int8"  # one chunk: below the threshold the next build crosses
    before = files(folder)
    for target, name in ((tokens_module.Codebook, "save"), (token_shards, "_publish")):
        real = getattr(target, name)

        def full_then(*args, real=real, **kwargs):
            small_disk.fill()
            return real(*args, **kwargs)

        monkeypatch.setattr(target, name, full_then)
        with pytest.raises(OSError) as failure:
            build_version(folder, 7, 2, encoder.name, encoder.dim, v1, np.zeros(0, np.int64),
                          chunks(encoder, [2, 3, 4]), params, BM25Tokenizer().many)
        monkeypatch.undo()
        small_disk.free()
        assert failure.value.errno == errno.ENOSPC
        assert files(folder) == before, name  # no codebook, residual shard or .part left behind
        assert current_version(folder) == v1.folder
    v2 = build_version(folder, 7, 2, encoder.name, encoder.dim, v1, np.zeros(0, np.int64), chunks(encoder, [2, 3, 4]),
                       params, BM25Tokenizer().many)
    assert v2.token_codec == "residual" and list(v2.chunk_ids) == [1, 2, 3, 4]


def test_an_ingest_on_a_full_disk_is_kept_and_indexed_once_space_is_back(small_disk, models_dir, monkeypatch):
    settings = make_settings(small_disk.path / "data", models_dir)
    docs = [DocumentInput(id=f"d{i}", text=text) for i, text in enumerate(TEXTS)]
    real = ingest_module.build_version

    def full_then(*args, **kwargs):
        small_disk.fill()
        return real(*args, **kwargs)

    async def keys(services, query: str) -> list[str]:
        return [h.chunk.doc_key for h in (await services.retriever.search(query, PartitionFilter("acme"), 4)).hits]

    async def go():
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("acme", "kb", docs[:1])
            before = files(settings.index_dir)
            monkeypatch.setattr(ingest_module, "build_version", full_then)
            stored = await services.library.ingest("acme", "kb", docs[1:2])
            monkeypatch.undo()
            assert "No space left" in stored.index_error and stored.indexed_version < stored.version
            assert files(settings.index_dir) == before and await keys(services, "vitamin D") == ["d0"]
            small_disk.free()
            later = await services.library.ingest("acme", "kb", docs[2:3])
            assert later.indexed and set(await keys(services, "vitamin D")) == {"d0", "d1", "d2"}

    asyncio.run(go())


def test_a_file_upload_on_a_full_disk_stores_nothing_and_leaves_no_partial_file(small_disk, models_dir):
    from appliance.library import FileInput

    settings = make_settings(small_disk.path / "data", models_dir)
    first = FileInput("first.md", b"# Pumps\n\nThe pump is serviced every March.\n")
    second = FileInput("second.md", ("# Boilers\n\n" + "The boiler restarts after a power cut. " * 2000).encode())

    def blobs() -> list[str]:
        return sorted(p.name for p in settings.files_dir.rglob("*") if p.is_file())

    async def go():
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.files.ingest("acme", "kb", [first])
            before = blobs()
            small_disk.fill()
            with pytest.raises(OSError) as failed:
                await services.files.ingest("acme", "kb", [second])
            assert failed.value.errno == errno.ENOSPC
            assert blobs() == before, "no partial or orphaned original is left behind"
            assert [d.key for d in services.library.list_documents("acme", "kb")] == ["first.md"]
            small_disk.free()
            later = await services.files.ingest("acme", "kb", [second])
            assert [f.status for f in later.files] == ["created"] and len(blobs()) == 2
            assert services.files.original("acme", "first.md")[1] == first.data

    asyncio.run(go())
