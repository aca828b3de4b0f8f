"""Tenants and the answer caches (issue 10, items 6, 7, 14): semantic-cache ids never repeat, even when the
size-limited store culls, and an id names an entry only together with its tenant; the embedding cache is per tenant,
keyed by the exact text the encoder saw and bounded in bytes; the answer path neither answers nor stores a question
its encoder cannot represent."""
from __future__ import annotations


import diskcache
import numpy as np
import pytest

from appliance.answers import Answerer, AskRequest, Done
from appliance.cache import EmbeddingCache, ExactCache, SemanticCache, SemanticParams, SingleFlight
from appliance.answers import CachedAnswerer
from appliance.encode import Encoded, EncoderSet, MicroBatcher, Query
from appliance.generate import EngineSet
from appliance.library import DocumentInput
from appliance.retrieve import PartitionFilter, Retriever
from appliance.wiring import open_services

from scripted import ScriptedEngine
from support import make_settings, run

DIM = 8
PARAMS = SemanticParams(threshold=0.9, late_threshold=0.0, max_entries=1000, ttl_s=3600)
CULLING = 1 << 17  # bytes: a store this small holds 3 of the entries below; the 4th set culls every row
QUESTION = "same question"  # one text for every entry: the second check cannot tell entries apart, only tenants


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def fill(cache: SemanticCache, rng: np.random.Generator, tenants: str) -> dict[str, list[tuple[int, np.ndarray]]]:
    """One entry per letter of `tenants` ("aab": two of tenant a's, then one of b's), answering with its tenant."""
    stored: dict[str, list[tuple[int, np.ndarray]]] = {"a": [], "b": []}
    for tenant in tenants:
        vector = unit(rng)
        entry_id = cache.store(tenant, "s", QUESTION, vector, {"p": 1}, {"answer": tenant, "pad": "x" * 30_000})
        stored[tenant].append((entry_id, vector))
    return stored


def ids_of(stored: dict[str, list[tuple[int, np.ndarray]]]) -> list[int]:
    return [entry_id for pairs in stored.values() for entry_id, _ in pairs]


def test_ids_never_repeat_when_the_store_culls_restarts_or_upgrades(tmp_path):
    rng = np.random.default_rng(0)
    cache = SemanticCache(tmp_path / "sem", DIM, PARAMS, CULLING)
    ids = ids_of(fill(cache, rng, "ab" * 60))
    assert sum(len(cache.entries(t, 1000)) for t in "ab") < len(ids) / 10, "culling ran"
    cache.close()
    cache = SemanticCache(tmp_path / "sem", DIM, PARAMS, CULLING)
    ids += ids_of(fill(cache, rng, "ab" * 20))
    cache.close()
    assert len(set(ids)) == len(ids), "an id was handed out twice"
    # A store written by an earlier version kept its counter among the entries; its ids are not handed out again.
    legacy = diskcache.Cache(str(tmp_path / "old"))
    legacy.set("next_id", 500)
    legacy.close()
    upgraded = SemanticCache(tmp_path / "old", DIM, PARAMS, CULLING)
    assert upgraded.store("a", "s", QUESTION, unit(rng), {}, {"answer": "a"}) == 501
    upgraded.close()


def test_another_tenant_can_neither_see_hold_nor_delete_entries_by_id(tmp_path):
    rng = np.random.default_rng(1)
    cache = SemanticCache(tmp_path / "sem", DIM, PARAMS, CULLING)
    stored = fill(cache, rng, "aaabbbb")  # b's first entry culls every row: once the counter too, before the fix
    kept = {t: {e["id"] for e in cache.entries(t, 1000)} for t in "ab"}
    assert len(kept["b"]) == 3, "b's newest entries outlived culling"
    for tenant, other in (("a", "b"), ("b", "a")):
        for entry_id, vector in stored[tenant]:
            assert not cache.holds(other, entry_id) and not cache.delete(other, entry_id)
            found = cache.lookup(other, "s", QUESTION, vector, {"p": 1})
            assert found.hit is None or found.hit.payload["answer"] == other, "served another tenant's answer"
        assert {e["answer"] for e in cache.entries(other, 1000)} <= {other}
    assert {t: {e["id"] for e in cache.entries(t, 1000)} for t in "ab"} == kept, "the other's deletes removed none"
    cache.close()


def test_an_entry_stored_as_another_tenants_is_never_listed_held_deleted_or_served(tmp_path):
    """Defence in depth: whatever put it there (an id reused by an earlier version), an entry whose stored tenant
    is not the asker's is not theirs, though the asker's index names its id."""
    rng = np.random.default_rng(2)
    cache = SemanticCache(tmp_path / "sem", DIM, PARAMS, 1 << 26)
    (listed, _), (served, vector) = fill(cache, rng, "aa")["a"]
    b_entry = cache._disk.get(f"e{cache.store('b', 's', QUESTION, unit(rng), {'p': 1}, {'answer': 'b'})}")
    for entry_id in (listed, served):
        cache._disk.set(f"e{entry_id}", b_entry)  # tenant b's entry under ids that tenant a's index holds
    assert cache.entries("a") == [] and not cache.holds("a", listed)
    assert not cache.delete("a", listed) and cache._disk.get(f"e{listed}")["tenant"] == "b", "b's entry stays"
    assert cache.lookup("a", "s", QUESTION, vector, {"p": 1}).hit is None
    assert cache._disk.get(f"e{served}")["tenant"] == "b"
    cache.close()


def query(n_tokens: int) -> Query:
    return Query(np.zeros(384, np.float32), np.zeros((n_tokens, 384), np.float16))


def test_embedding_cache_is_per_tenant_keyed_by_exact_text_and_bounded_in_bytes():
    cache = EmbeddingCache(max_items=100, max_bytes=200_000)
    first = query(10)
    cache.put("a", "What is BM25?", first)
    assert cache.get("a", "What is BM25?") is first and cache.hits == 1
    assert cache.get("b", "What is BM25?") is None, "another tenant's entry"
    assert cache.get("a", "what is bm25") is None and cache.get("a", "What is BM25?   ") is None, "another text"
    for n in range(10):
        cache.put("a", f"long {n}", query(100))  # 78.6 KB each: token vectors dominate
    assert len(cache) == 2 and cache.nbytes <= 200_000, "bounded by bytes, not by its 100 entries"
    assert cache.get("a", "long 9") is not None and cache.get("a", "What is BM25?") is None, "oldest out first"
    cache.put("a", "huge", query(1000))  # larger than the whole budget: not kept, nothing evicted for it
    assert cache.get("a", "huge") is None and len(cache) == 2
    assert EmbeddingCache(max_items=4).max_bytes == 64 << 20


class CountingEncoder:
    name, dim, has_token_vectors = "counting", 3, False

    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode(self, texts: list[str]) -> Encoded:
        self.seen += texts
        return Encoded(np.array([[len(t), t.count(" "), 1.0] for t in texts], np.float32), None)


def test_retriever_encodes_each_tenants_exact_text():
    encoder = CountingEncoder()

    async def go():
        batcher = MicroBatcher(encoder, window_ms=0)
        encoders = EncoderSet({"counting": batcher}, lambda language: "counting")
        retriever = Retriever(None, encoders, None, None, EmbeddingCache(100), default_k=5)  # type: ignore[arg-type]
        try:
            padded = await retriever.encode("what is bm25        ", "a")
            plain = await retriever.encode("what is bm25", "b")
            again = await retriever.encode("what is bm25", "b")
            other = await retriever.encode("what is bm25", "a")
            for _ in range(2):
                await retriever.encode("warm up")  # no tenant: neither read from nor kept in the cache
        finally:
            await batcher.stop()
        return padded, plain, again, other

    padded, plain, again, other = run(go())
    assert encoder.seen == ["what is bm25        ", "what is bm25", "what is bm25", "warm up", "warm up"]
    assert again is plain and other.dense[0] == plain.dense[0] == 12 and padded.dense[0] == 20


DOCS = [DocumentInput(id="py", title="Python", text="Practice daily and read good code to learn Python quickly."),
        DocumentInput(id="hb", title="花呗", text="花呗的额度被冻结时，可以在支付宝里申请解冻。")]


@pytest.fixture(scope="module")
def tokenizer(models_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(models_dir / "build" / "smollm2"))


def test_the_answer_path_gives_no_semantic_answer_to_questions_the_encoder_cannot_represent(models_dir, tokenizer,
                                                                                             tmp_path):
    """A box told to use MiniLM for every language (`encoder.model`): Chinese questions then reach an encoder that
    sees [UNK]s, and the semantic cache neither answers nor stores them."""
    engine = ScriptedEngine("small", tokenizer)
    settings = make_settings(tmp_path / "data", models_dir, encoder_model="minilm")

    async def go():
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("acme", "kb", DOCS)
            engines = EngineSet({"small": engine}, float("inf"), restart_delay_s=0.01)
            await engines.start()
            exact = ExactCache(tmp_path / "exact", 16, 3600, 1 << 24)
            semantic = SemanticCache(tmp_path / "sem", {"minilm": 384}, PARAMS, 1 << 26)
            cached = CachedAnswerer(Answerer(services.retriever, engines, {}, settings.generate, settings.router),
                                    services.retriever, exact, semantic, SingleFlight(10), services.library.versions,
                                    deterministic=True)
            layers = []
            for tenant, question in (("acme", "为什么暂停借呗"), ("acme", "为何借呗冻结"),
                                     ("acme", "How do I learn Python quickly?"),
                                     ("acme", "How can I learn Python quickly?"),
                                     ("other", "How can I learn Python quickly?")):
                events = [e async for e in cached.ask(AskRequest(question, PartitionFilter(tenant)))]
                layers.append(next(e for e in events if isinstance(e, Done)).cache)
            stored = [e["question"] for e in semantic.entries("acme")]
            await engines.stop()
            exact.close()
            semantic.close()
            return layers, stored

    layers, stored = run(go())
    assert layers == ["none", "none", "none", "semantic", "none"], "Chinese paraphrase, English one, other tenant"
    assert stored == ["How do I learn Python quickly?"], "the Chinese question was not stored"
    assert len(engine.prompts) == 4
