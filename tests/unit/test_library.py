"""The library and the retriever in one process: real encoder, real SQLite, real indexes on disk."""
import asyncio
import contextlib
import json
import threading
from dataclasses import replace

import pytest

from appliance.index import PartitionSnapshot
from appliance.library import DocumentInput, KindConflict
from appliance.retrieve import PartitionFilter
from appliance.wiring import DataDirBusy, Services, open_services

from support import make_settings, run

DOCS = [
    DocumentInput(id="aspirin", title="Aspirin", text="Daily low-dose aspirin reduces the risk of a first heart attack."),
    DocumentInput(id="vitd", title="Vitamin D", text="Vitamin D deficiency is common in winter in northern countries."),
    DocumentInput(id="mito", title="Cells", text="The mitochondria produce most of the energy a cell uses."),
    DocumentInput(id="code", title="Codes", text="Error code XK-4471 means the pump's pressure sensor failed."),
]


class Box:
    """The services as these tests drive them: the library's writes, the retriever's search, then close."""

    def __init__(self, services: Services, stack: contextlib.AsyncExitStack):
        self.library, self.stop = services.library, stack.aclose
        self.ingest, self.delete, self.partitions = self.library.ingest, self.library.delete, self.library.partitions
        self.search = services.retriever.search


async def started(settings) -> Box:
    stack = contextlib.AsyncExitStack()
    return Box(await stack.enter_async_context(open_services(settings)), stack)


def ids(result) -> list[str]:
    return [h.chunk.doc_key for h in result.hits]


def test_ingest_then_search_hybrid_with_timings(settings):
    async def go():
        app = await started(settings)
        result = await app.ingest("acme", "kb", DOCS)
        assert [d.status for d in result.documents] == ["created"] * 4 and result.indexed_version == result.version
        paraphrase = await app.search("not enough sunshine vitamin in cold places", PartitionFilter("acme"), 2)
        exact = await app.search("XK-4471", PartitionFilter("acme"), 2)
        await app.stop()
        return paraphrase, exact

    paraphrase, exact = run(go())
    assert ids(paraphrase)[0] == "vitd"
    assert ids(exact)[0] == "code" and exact.hits[0].bm25_rank == 1  # an exact code: BM25 finds it
    for stage in ("encode", "bm25", "ann", "fuse", "total"):
        assert stage in paraphrase.timings
    hit = paraphrase.hits[0]
    assert hit.partition == "kb" and hit.chunk.chunk_id > 0 and hit.score > 0 and "Vitamin D" in hit.chunk.text


def test_late_interaction_stage_runs_when_asked(settings):
    async def go():
        app = await started(settings)
        await app.ingest("acme", "kb", DOCS)
        result = await app.search("energy of the cell", PartitionFilter("acme"), 2, late_interaction=True)
        await app.stop()
        return result

    result = run(go())
    assert "late_interaction" in result.timings and ids(result)[0] == "mito"
    assert result.hits[0].late is not None and result.hits[0].late >= result.hits[1].late


def test_k_beyond_the_late_interaction_head_still_returns_k_results(settings, models_dir):
    few = make_settings(settings.data_dir, models_dir, retrieve_late_candidates="2")
    docs = [DocumentInput(id=f"d{i}", text=f"Note {i} about the maintenance of pump model {i}.") for i in range(8)]

    async def go():
        app = await started(few)
        await app.ingest("acme", "kb", docs)
        result = await app.search("pump maintenance", PartitionFilter("acme"), 6)
        await app.stop()
        return result

    result = run(go())
    assert len(result.hits) == 6 and len(set(ids(result))) == 6
    assert [h.late is not None for h in result.hits] == [True, True, False, False, False, False]


def test_hits_are_read_off_the_event_loop(settings, monkeypatch):
    """A hit's text comes from a memory map that may fault on the disk when cold: the loop must not wait for it."""
    read_on: list[int] = []  # the threads that read hits
    real_chunk = PartitionSnapshot.chunk

    def chunk(self, row):
        read_on.append(threading.get_ident())
        return real_chunk(self, row)

    monkeypatch.setattr(PartitionSnapshot, "chunk", chunk)

    async def go():
        app = await started(settings)
        await app.ingest("acme", "kb", DOCS)
        plain = await app.search("energy of the cell", PartitionFilter("acme"), 3, late_interaction=False)
        late = await app.search("energy of the cell", PartitionFilter("acme"), 3, late_interaction=True)
        await app.stop()
        return plain, late, threading.get_ident()

    plain, late, loop_thread = run(go())
    assert ids(plain)[0] == "mito" and plain.hits[0].late is None
    assert ids(late)[0] == "mito" and late.hits[0].late is not None
    assert len(read_on) >= 6 and loop_thread not in read_on


def test_reingest_is_idempotent_update_replaces_and_delete_removes(settings):
    async def go():
        app = await started(settings)
        await app.ingest("acme", "kb", DOCS)
        again = await app.ingest("acme", "kb", DOCS)
        changed = await app.ingest("acme", "kb", [DocumentInput(id="vitd", title="Vitamin D",
                                                                text="Sunlight lets the skin make calciferol.")])
        after_update = await app.search("calciferol skin sunlight", PartitionFilter("acme"), 4)
        old_text = await app.search("deficiency winter northern countries", PartitionFilter("acme"), 4)
        deleted = await app.delete("acme", "aspirin")
        after_delete = await app.search("aspirin heart attack", PartitionFilter("acme"), 4)
        missing = await app.delete("acme", "nope")
        await app.stop()
        return again, changed, after_update, old_text, deleted, after_delete, missing

    again, changed, after_update, old_text, deleted, after_delete, missing = run(go())
    assert {d.status for d in again.documents} == {"unchanged"} and again.version == 1
    assert changed.documents[0].status == "updated" and changed.version == 2
    assert ids(after_update)[0] == "vitd" and "calciferol" in after_update.hits[0].chunk.text
    assert all("winter" not in h.chunk.text for h in old_text.hits)  # the replaced text is gone from the index
    assert deleted[0].documents[0].status == "deleted"
    assert "aspirin" not in ids(after_delete)
    assert missing == []


def test_tenants_never_see_each_other(settings):
    async def go():
        app = await started(settings)
        await app.ingest("t1", "kb", DOCS[:2])
        await app.ingest("t2", "kb", DOCS[2:])
        r1 = await app.search("heart attack aspirin", PartitionFilter("t1"), 10)
        r2 = await app.search("heart attack aspirin", PartitionFilter("t2"), 10)
        cross = await app.search("aspirin", PartitionFilter("t2", names=("kb",)), 10)
        cross_delete = await app.delete("t2", "aspirin")
        await app.stop()
        return r1, r2, cross, cross_delete

    r1, r2, cross, cross_delete = run(go())
    assert set(ids(r1)) <= {"aspirin", "vitd"} and "aspirin" in ids(r1)
    assert set(ids(r2)) <= {"mito", "code"} and set(ids(cross)) <= {"mito", "code"}
    assert cross_delete == []


def test_partition_filters_by_kind_and_time(settings):
    async def go():
        app = await started(settings)
        await app.ingest("t", "old", [replace(DOCS[0], time=1_000.0)], kind="mail")
        await app.ingest("t", "new", [replace(DOCS[0], id="aspirin2", time=9_000.0)], kind="wiki")
        recent = await app.search("aspirin", PartitionFilter("t", time_from=5_000.0), 5)
        mail = await app.search("aspirin", PartitionFilter("t", kinds=("mail",)), 5)
        none = await app.search("aspirin", PartitionFilter("t", kinds=("nothing",)), 5)
        await app.stop()
        return recent, mail, none

    recent, mail, none = run(go())
    assert recent.partitions == ["new"] and ids(recent) == ["aspirin2"]
    assert mail.partitions == ["old"] and ids(mail) == ["aspirin"]
    assert none.partitions == [] and none.hits == []


def test_restart_catches_up_an_index_left_behind_the_store(settings):
    async def go():
        app = await started(settings)
        await app.ingest("acme", "kb", DOCS[:2])
        # Commit to the store without building the index, as after a crash between commit and publish.
        await app.ingest("acme", "kb", DOCS[2:], wait=False)
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        await app.stop()
        app = await started(settings)
        result = await app.search("XK-4471 pressure sensor", PartitionFilter("acme"), 4)
        parts = app.partitions("acme")
        await app.stop()
        return result, parts

    result, parts = run(go())
    assert ids(result)[0] == "code"
    assert parts[0].version == parts[0].indexed_version == 2 and parts[0].chunks == 4


def test_a_data_dir_is_used_by_one_process_at_a_time(settings):
    async def go():
        first = await started(settings)
        try:
            with pytest.raises(DataDirBusy):
                await started(settings)
        finally:
            await first.stop()
        second = await started(settings)  # released on stop
        await second.stop()

    run(go())


def test_search_during_ingest_sees_old_or_new_state(settings):
    before = "Tokamak plasma confinement uses strong magnetic fields in a torus."
    after = "Tokamak plasma confinement was improved by shaping the magnetic torus."

    async def go():
        app = await started(settings)
        await app.ingest("acme", "kb", DOCS + [DocumentInput(id="fusion", title="Fusion", text=before)])
        seen = []
        stop = asyncio.Event()

        async def searcher():
            while not stop.is_set():
                r = await app.search("tokamak plasma magnetic torus", PartitionFilter("acme"), 3)
                seen.append([h.chunk.text for h in r.hits if h.chunk.doc_key == "fusion"])

        task = asyncio.create_task(searcher())
        for i in range(3):
            text = after if i % 2 == 0 else before
            await app.ingest("acme", "kb", [DocumentInput(id="fusion", title="Fusion", text=text)]
                             + [DocumentInput(id=f"extra{i}", title="x", text=f"filler document {i}")])
        stop.set()
        await task
        await app.stop()
        return seen

    seen = run(go())
    assert len(seen) > 3
    for texts in seen:
        assert len(texts) == 1 and texts[0] in (before, after)  # never missing, never half of each


def test_a_partition_keeps_its_kind(settings):
    async def go():
        app = await started(settings)
        await app.ingest("t", "mail", DOCS[:1], kind="mail")
        await app.ingest("t", "mail", DOCS[1:2])  # no kind named: the partition's own is kept
        with pytest.raises(KindConflict):
            await app.ingest("t", "mail", DOCS[2:3], kind="wiki")
        parts = app.partitions("t")
        await app.stop()
        return parts

    parts = run(go())
    assert [(p.kind, p.chunks) for p in parts] == [("mail", 2)]


def test_a_failed_index_build_keeps_the_documents_and_recovers(settings, monkeypatch):
    import appliance.library.ingest as ingest

    real = ingest.build_version

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    async def go():
        app = await started(settings)
        await app.ingest("acme", "kb", DOCS[:2])
        monkeypatch.setattr(ingest, "build_version", disk_full)  # the injected fault
        failed = await app.ingest("acme", "kb", DOCS[2:])
        during = await app.search("XK-4471 pump sensor", PartitionFilter("acme"), 4)
        monkeypatch.setattr(ingest, "build_version", real)
        recovered = await app.ingest("acme", "kb", [])  # the next write builds what is missing
        after = await app.search("XK-4471 pump sensor", PartitionFilter("acme"), 4)
        await app.stop()
        return failed, during, recovered, after

    failed, during, recovered, after = run(go())
    assert "No space left" in failed.index_error and failed.indexed_version < failed.version
    assert [d.status for d in failed.documents] == ["created", "created"]
    assert "code" not in ids(during)  # the old version keeps serving
    assert recovered.index_error is None and recovered.indexed_version == failed.version
    assert ids(after)[0] == "code"


@pytest.mark.parametrize("damage", ["garbage", "old format"])
def test_an_unreadable_index_is_rebuilt_from_the_store_at_boot(settings, damage):
    async def go():
        app = await started(settings)
        await app.ingest("acme", "kb", DOCS)
        folder = app.library.snapshots()[0].folder
        await app.stop()
        if damage == "garbage":
            (folder / "chunk_ids.npy").write_bytes(b"garbage")
        else:  # a folder written by an earlier release of the index format
            manifest = json.loads((folder / "manifest.json").read_text())
            (folder / "manifest.json").write_text(json.dumps({**manifest, "format": 1}))
        app = await started(settings)
        result = await app.search("XK-4471", PartitionFilter("acme"), 2)
        rebuilt = app.library.snapshots()[0].folder
        await app.stop()
        return result, folder, rebuilt

    result, folder, rebuilt = run(go())
    assert ids(result)[0] == "code" and rebuilt != folder


def test_a_partition_without_a_single_bm25_term_is_still_indexed(settings):
    """Punctuation or stop words only: bm25s cannot index an empty vocabulary; the vectors still serve."""
    async def go():
        app = await started(settings)
        result = await app.ingest("acme", "odd", [DocumentInput(id="bang", text="!!!"),
                                                  DocumentInput(id="stop", text="the a of")])
        found = await app.search("the", PartitionFilter("acme"), 2)
        await app.stop()
        return result, found

    result, found = run(go())
    assert result.index_error is None and result.indexed_version == result.version
    assert sorted(ids(found)) == ["bang", "stop"]


def test_an_encoder_change_rebuilds_the_indexes_and_the_services_get_ready(settings, models_dir):
    """Indexes built by another encoder have vectors of another size: kept, every search of them failed and so did
    warm-up, so the server never became ready. They are encoded again from the store at boot."""
    use = make_settings(settings.data_dir, models_dir, encoder_model="use")

    async def go():
        app = await started(settings)
        await app.ingest("acme", "kb", DOCS)
        before = app.library.snapshots()[0].encoder
        stored = app.partitions("acme")[0].version
        await app.stop()
        app = await started(use)  # warm-up searches every partition: this is the server getting ready
        result = await app.search("XK-4471 pressure sensor", PartitionFilter("acme"), 2)
        after = app.library.snapshots()[0].encoder
        parts = app.partitions("acme")
        await app.stop()
        return before, stored, after, result, parts

    before, stored, after, result, parts = run(go())
    assert (before, after) == ("minilm", "use")
    assert ids(result)[0] == "code" and parts[0].indexed_version == parts[0].version and parts[0].chunks == 4
    assert parts[0].version == stored + 1  # a new version: answers cached on MiniLM's retrieval are not served
