"""A partition kept with int8 token vectors (from before the residual codec) is re-coded from its own vectors."""
import asyncio
import logging

from support import SCIFACT, beir_slice, make_settings

from appliance.evaluate import beir_documents
from appliance.library import DocumentInput
from appliance.retrieve import PartitionFilter
from appliance.wiring import open_services

SMALL_CODEBOOK = {"index_codebook_centroids": "64", "index_codebook_min_tokens": "1024",
                  "index_codebook_sample": "8192"}


def test_reindex_tokens_recodes_an_int8_partition_without_encoding_text(tmp_path, models_dir, caplog):
    data = beir_slice(SCIFACT, queries=6, distractors=20)
    questions = list(data.queries.values())

    async def store_as_int8() -> list[list[str]]:
        settings = make_settings(tmp_path, models_dir, index_token_codec="int8")
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("acme", "kb", beir_documents(data.corpus))
            assert services.library.snapshot("acme", "kb").token_codec == "int8"
            return [await _top(services, q) for q in questions]

    async def recode() -> tuple[list[list[str]], int, list]:
        settings = make_settings(tmp_path, models_dir, **SMALL_CODEBOOK)
        async with open_services(settings, warm_up=False, generation=False) as services:
            before = services.library.snapshot("acme", "kb")
            assert before.token_codec == "int8"  # served as it is until re-coded
            int8_bytes = before.disk_bytes()[1]
            await services.library.ingest("acme", "kb", [DocumentInput(
                id="harbour", text="Harbour pilots logged every tug movement by hand in the winter of 1911.")])
            after_ingest = services.library.snapshot("acme", "kb")
            assert after_ingest.token_codec == "int8" and after_ingest.size == before.size + 1  # not re-coded by it
            int8_bytes = after_ingest.disk_bytes()[1]
            calls = _count_encodes(services)
            done = await services.library.reindex(tokens_only=True)
            after = services.library.snapshot("acme", "kb")
            assert after.token_codec == "residual" and after.size == before.size + 1
            assert after.disk_bytes()[1] * 5 < int8_bytes
            again = await services.library.reindex(tokens_only=True)  # nothing left to re-code
            return [await _top(services, q) for q in questions], calls(), [done, again]

    first = asyncio.run(store_as_int8())
    with caplog.at_level(logging.WARNING, logger="appliance"):
        second, encodes, (done, again) = asyncio.run(recode())
    assert any("reindex --tokens" in r.getMessage() for r in caplog.records), "boot says how to re-code"
    assert [(r.tenant, r.partition) for r in done] == [("acme", "kb")] and again == []
    assert encodes == 0, "re-coding read the index's vectors: no text was encoded"
    assert sum(a[0] == b[0] for a, b in zip(first, second)) >= len(questions) - 1  # the same best chunk
    for a, b in zip(first, second):
        assert len(set(a) & set(b)) >= 3  # and mostly the same top five


def test_a_fresh_partition_is_stored_as_residuals_past_the_threshold(tmp_path, models_dir):
    data = beir_slice(SCIFACT, queries=3, distractors=20)

    async def go():
        settings = make_settings(tmp_path, models_dir, **SMALL_CODEBOOK)
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("acme", "kb", beir_documents(data.corpus[:1]))
            small = services.library.snapshot("acme", "kb")
            await services.library.ingest("acme", "kb", beir_documents(data.corpus[1:]))
            big = services.library.snapshot("acme", "kb")
            hits = await services.retriever.search(list(data.queries.values())[0], PartitionFilter("acme"), 5)
            return small, big, hits

    small, big, hits = asyncio.run(go())
    assert small.token_codec == "int8" and small.token_count < 1024
    assert big.token_codec == "residual" and big.token_count >= 1024
    assert hits.hits and all(h.late is not None for h in hits.hits[:3])  # late interaction ran on the residuals


async def _top(services, question: str) -> list[str]:
    page = await services.retriever.search(question, PartitionFilter("acme"), 5, late_interaction=True)
    return [h.chunk.chunk_id for h in page.hits]


def _count_encodes(services):
    """Count the encoder's bulk calls (what an index build uses for new chunks) from here on."""
    counted = []
    for batcher in services.library.encoders:
        real = batcher.encode_many

        async def counting(texts, real=real):
            counted.append(len(texts))
            return await real(texts)

        batcher.encode_many = counting
    return lambda: len(counted)
