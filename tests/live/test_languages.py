"""Chinese and English on one box: language detection, an encoder per partition, searches over both, re-indexing
to another language, and a conflict or a bad value refused without losing anything."""
from __future__ import annotations

import pytest

from appliance.evaluate import beir_documents
from appliance.library import DocumentInput
from appliance.retrieve import PartitionFilter
from appliance.text import detect_language, question_language
from appliance.wiring import open_services
from support import CMRC, SCIFACT, LiveServer, beir_slice, make_settings, run


@pytest.mark.parametrize("texts, expected", [
    (["The pump restarts itself after a power cut, then checks its pressure."], "en"),
    (["泵在断电后会自动重启，然后检查压力。"], "zh"),
    (["花呗 is Alipay's credit line; 借呗 lends cash. 两者都可以在支付宝里申请，额度由系统评估。"], "zh"),  # mostly
    (["The pump restarts after a power cut and then checks its pressure. 泵会自动重启并检查压力。"], "multi"),
    (["def restart(pump):\n    pump.stop()\n    return pump.start(timeout=30)\n"], "en"),  # code is English
    (["2024-03-01 12:00 17.5 % 3,400"], "multi"),  # numbers only: nothing to tell by
    (["Q3"], "en"), (["年度报告"], "zh"),  # short titles
    (["", "   "], "multi"),
    (["RAG系统的检索增强生成在本地运行，不需要网络。它使用BM25和向量检索。"], "zh"),  # Chinese with Latin terms
    (["This report covers the year. 本报告涵盖全年。"] * 3, "multi"),
])
def test_detect_language(texts, expected):
    assert detect_language(texts) == expected


def test_question_language():
    assert question_language("what does XK-4471 mean?") == "en"
    assert question_language("2+2?") == "en"  # no letters to tell by, no CJK: English's encoder
    assert question_language("花呗怎么还款") == "zh"
    assert question_language("What is 花呗 and how do I repay it with the Alipay app?") == "multi"


@pytest.fixture(scope="module")
def bilingual(tmp_path_factory, models_dir):
    """One server with the default settings: an English (SciFact) and a Chinese (CMRC) partition of one tenant, both
    created with language auto."""
    english, chinese = beir_slice(SCIFACT, queries=12, distractors=30), beir_slice(CMRC, queries=12, distractors=30)
    with LiveServer(make_settings(tmp_path_factory.mktemp("bilingual"), models_dir)) as live:
        with live.client() as c:
            for partition, data in (("papers", english), ("wiki", chinese)):
                docs = [{"id": d.id, "title": d.title, "text": d.text} for d in beir_documents(data.corpus)]
                reply = c.post("/v1/documents", json={"tenant": "box", "partition": partition, "documents": docs})
                assert reply.status_code == 200, reply.text
        live.data = {"papers": english, "wiki": chinese}
        yield live


def test_each_partition_gets_the_encoder_of_its_language(bilingual):
    with bilingual.client() as c:
        listed = {p["name"]: p for p in c.get("/v1/partitions", params={"tenant": "box"}).json()["partitions"]}
    assert (listed["papers"]["language"], listed["papers"]["encoder"]) == ("en", "minilm")
    assert (listed["wiki"]["language"], listed["wiki"]["encoder"]) == ("zh", "use")


def test_a_question_in_either_language_finds_its_own_partitions_documents_first(bilingual):
    found = {}
    with bilingual.client() as c:
        for partition, data in bilingual.data.items():
            firsts, own = [], []
            for qid, text in data.queries.items():
                reply = c.post("/v1/search", json={"tenant": "box", "query": text, "k": 10})
                assert reply.status_code == 200, reply.text
                body = reply.json()
                own.append(body["results"][0]["partition"] == partition)
                firsts.append(body["results"][0]["document_id"] in data.qrels[qid])
                assert body["encoders"] and "encode" in body["timings_ms"]
            found[partition] = (sum(own) / len(own), sum(firsts) / len(firsts), body["encoders"])
    assert found["papers"][0] == 1.0 and found["wiki"][0] == 1.0, found
    assert found["papers"][1] >= 0.6 and found["wiki"][1] >= 0.8, found  # each still finds its own documents
    assert found["wiki"][2] == ["use"], "a Chinese question's own lists filled the page: MiniLM never ran"


def test_a_partition_of_the_other_language_fills_in_after_the_own_ones(bilingual):
    """An English question over both partitions with k past what the English partition holds: its own chunks
    come first, then the Chinese partition's (encoded by USE) follow instead of being left out."""
    with bilingual.client() as c:
        listed = {p["name"]: p for p in c.get("/v1/partitions", params={"tenant": "box"}).json()["partitions"]}
        k = min(100, listed["papers"]["chunks"] + 5)
        body = c.post("/v1/search", json={"tenant": "box", "query": "cancer cells and tumour growth",
                                          "k": k}).json()
    partitions = [r["partition"] for r in body["results"]]
    assert set(body["encoders"]) == {"minilm", "use"}
    first_wiki = partitions.index("wiki")
    assert set(partitions[:first_wiki]) == {"papers"} and "papers" not in partitions[first_wiki:], partitions


def test_a_language_that_conflicts_or_is_not_one_is_refused_and_nothing_is_lost(bilingual):
    with bilingual.client() as c:
        before = {p["name"]: p for p in c.get("/v1/partitions", params={"tenant": "box"}).json()["partitions"]}
        conflict = c.post("/v1/documents", json={"tenant": "box", "partition": "wiki", "language": "en",
                                                 "documents": [{"id": "x", "text": "an English note"}]})
        bad = [c.post("/v1/documents", json={"tenant": "box", "partition": "wiki", "language": value,
                                             "documents": [{"id": "y", "text": "x"}]})
               for value in ("fr", 3, "", ["zh"])]
        upload = c.post("/v1/files", data={"partition": "wiki", "tenant": "box", "language": "klingon"},
                        files=[("file", ("note.txt", b"hello", "text/plain"))])
        same = c.post("/v1/documents", json={"tenant": "box", "partition": "wiki", "language": "zh",
                                             "documents": [{"id": "zh-note", "text": "泵在断电后会自动重启。"}]})
        after = {p["name"]: p for p in c.get("/v1/partitions", params={"tenant": "box"}).json()["partitions"]}
        c.request("DELETE", "/v1/documents/zh-note", params={"tenant": "box", "partition": "wiki"})
    assert conflict.status_code == 409, conflict.text
    error = conflict.json()["error"]
    assert error["code"] == "language_conflict" and error["field"] == "language" and "reindex" in error["message"]
    for reply in bad:
        assert 400 <= reply.status_code < 500 and reply.json()["error"]["field"] == "language", reply.text
    assert upload.status_code == 422 and upload.json()["error"]["field"] == "language", upload.text
    assert same.status_code == 200, same.text
    assert after["wiki"]["language"] == "zh" and after["wiki"]["chunks"] == before["wiki"]["chunks"] + 1


def test_a_partition_reindexed_to_another_language_gets_that_encoder(tmp_path, models_dir):
    docs = [DocumentInput(id=d.id, title=d.title, text=d.text)
            for d in beir_documents(beir_slice(SCIFACT, queries=3, distractors=10).corpus)]

    async def go():
        settings = make_settings(tmp_path, models_dir)
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("t", "kb", docs)
            first = services.library.partitions("t")[0]
            same = (await services.library.reindex("t", "kb"))[0]  # the same encoder: what it retrieves is unchanged
            announced = []
            services.library.on_version(lambda partition, version: announced.append((partition.name, version)))
            moved = (await services.library.reindex("t", "kb", "multi"))[0]
            multi = services.library.partitions("t")[0]
            keyed = services.library.versions(PartitionFilter("t"))
            hits = (await services.retriever.search(docs[0].title, PartitionFilter("t"), 3)).hits
            with pytest.raises(ValueError):
                await services.library.reindex("t", "kb", "klingon")
        async with open_services(settings, warm_up=False, generation=False) as services:  # it stays after a boot
            reopened = services.library.partitions("t")[0]
            await services.library.reindex("t", "kb", "auto")
            back = services.library.partitions("t")[0]
        return first, same, moved, announced, keyed, multi, hits, reopened, back

    first, same, moved, announced, keyed, multi, hits, reopened, back = run(go())
    assert (first.language, first.encoder) == ("en", "minilm")
    assert (same.version, same.indexed_version) == (first.version, first.version)
    # another encoder: a new version, which cached answers' keys name and the semantic cache is told of
    assert (moved.version, moved.indexed_version) == (first.version + 1, first.version + 1)
    assert (multi.version, multi.indexed_version) == (first.version + 1, first.version + 1)
    assert keyed == {"kb": first.version + 1} and announced == [("kb", first.version + 1)]
    assert (multi.language, multi.encoder, multi.chunks) == ("multi", "use", first.chunks)
    assert hits and hits[0].chunk.doc_key == docs[0].id and hits[0].late is None  # USE: no token vectors
    assert (reopened.language, reopened.encoder) == ("multi", "use")
    assert (back.language, back.encoder, back.version) == ("en", "minilm", first.version + 2)


def test_a_store_from_before_languages_is_decided_at_boot(tmp_path, models_dir):
    """Partitions whose language is still auto (a store written before languages, where the column came in as
    auto) get the language of their stored text at the next boot, and the Chinese one its encoder."""
    settings = make_settings(tmp_path, models_dir, encoder_model="minilm")  # the old box: MiniLM for everything
    zh = [DocumentInput(id=d.id, title=d.title, text=d.text)
          for d in beir_documents(beir_slice(CMRC, queries=3, distractors=5).corpus)]

    async def go():
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("t", "wiki", zh)
            record = services.library.store.get_partition("t", "wiki")
            services.library.store.set_language(record.id, "auto")
            old = services.library.partitions("t")[0]
        async with open_services(make_settings(tmp_path, models_dir), warm_up=False, generation=False) as services:
            return old, services.library.partitions("t")[0]

    old, now = run(go())
    assert old.encoder == "minilm"
    assert (now.language, now.encoder, now.chunks) == ("zh", "use", old.chunks)


def test_concurrent_first_ingests_decide_one_language_and_tenants_decide_their_own(tmp_path, models_dir):
    """Two first ingests into a new partition at once, one English and one Chinese: the first admitted decides and
    both are stored; another tenant's partition of the same name decides its own language."""
    import asyncio

    english = [DocumentInput(id=f"en{i}", text=f"The pump number {i} restarts after a power cut.") for i in range(20)]
    chinese = [DocumentInput(id=f"zh{i}", text=f"第{i}号泵在断电后会自动重启，然后检查压力。") for i in range(20)]

    async def go():
        async with open_services(make_settings(tmp_path, models_dir), warm_up=False, generation=False) as services:
            library = services.library
            first, second = await asyncio.gather(library.ingest("a", "kb", english), library.ingest("a", "kb", chinese))
            await library.ingest("b", "kb", chinese)
            mine, theirs = library.partitions("a")[0], library.partitions("b")[0]
            hits = (await services.retriever.search("泵断电后会重启吗", PartitionFilter("a"), 40)).hits
        return first, second, mine, theirs, hits

    first, second, mine, theirs, hits = run(go())
    assert first.indexed and second.indexed
    assert mine.language in ("en", "zh") and mine.chunks == 40
    assert (theirs.language, theirs.encoder) == ("zh", "use")
    assert {h.chunk.doc_key[:2] for h in hits} == {"en", "zh"}, "both languages' documents are searchable"


def test_a_store_written_before_the_language_column_is_migrated_and_decided(tmp_path, models_dir):
    """The real migration: a store whose partitions table has no language column (as every store before this
    release) gets it as `auto` at the next open, and the boot decides each partition from its text."""
    import sqlite3

    settings = make_settings(tmp_path, models_dir)
    zh = [DocumentInput(id=d.id, title=d.title, text=d.text)
          for d in beir_documents(beir_slice(CMRC, queries=2, distractors=3).corpus)]
    en = [DocumentInput(id="pump", text="The pump restarts itself after a power cut.")]

    async def write():
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("t", "wiki", zh)
            await services.library.ingest("t", "notes", en)

    async def reopen():
        async with open_services(settings, warm_up=False, generation=False) as services:
            return {p.name: p for p in services.library.partitions("t")}

    run(write())
    db = sqlite3.connect(settings.store_path)
    db.execute("ALTER TABLE partitions DROP COLUMN language")
    db.commit()
    assert "language" not in {row[1] for row in db.execute("PRAGMA table_info(partitions)")}
    db.close()
    found = run(reopen())
    assert (found["wiki"].language, found["wiki"].encoder) == ("zh", "use")
    assert (found["notes"].language, found["notes"].encoder) == ("en", "minilm")
    assert found["wiki"].chunks > 0 and found["notes"].chunks == 1
