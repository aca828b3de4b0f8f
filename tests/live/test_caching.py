"""Answer caches over HTTP with real engines (`llm_served`): exact repeats, paraphrases, near-misses,
invalidation on ingest, single flight, and per-tenant entries; an extractive box's answers (no engine)."""
from concurrent.futures import ThreadPoolExecutor

from prometheus_client.parser import text_string_to_metric_families

from support import LiveServer, make_settings


def ask(live, question: str, key: str | None = None, **extra) -> dict:
    with live.client(key) as c:
        reply = c.post("/v1/ask", json={"question": question, "model": "large", "max_tokens": 8, **extra})
    assert reply.status_code == 200, reply.text
    return reply.json()


def metric(live, name: str, **labels) -> float:
    with live.client() as c:
        text = c.get("/metrics").text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def test_repeat_is_answered_from_the_exact_cache(llm_served):
    live, _ = llm_served
    hits_before = metric(live, "appliance_cache_hits_total", layer="exact")
    first = ask(live, "How does the appliance keep ingest durable?")
    again = ask(live, "  how does the APPLIANCE keep ingest durable??")  # same question once normalised
    assert first["cache"] == "none" and first["degraded"] is False
    assert again["cache"] == "exact" and again["answer"] == first["answer"]
    assert again["sources"] == first["sources"] and "cached answer" in again["route"]["reason"]
    assert again["usage"]["completion_tokens"] == 0, "nothing was generated for the repeat"
    assert "exact_cache" in again["timings_ms"] and "ttft" not in again["timings_ms"]
    assert metric(live, "appliance_cache_hits_total", layer="exact") == hits_before + 1


def test_paraphrase_hits_the_semantic_cache_but_near_misses_do_not(llm_served):
    live, _ = llm_served
    first = ask(live, "How do I make ingest durable after a crash?")
    paraphrase = ask(live, "How can I make ingest durable after a crash?")
    assert first["cache"] == "none"
    assert paraphrase["cache"] == "semantic" and paraphrase["answer"] == first["answer"]
    negated = ask(live, "Why is ingest not durable after a crash?")
    assert negated["cache"] == "none"
    numbered = ask(live, "What happens in step 3 of an ingest?")
    other_number = ask(live, "What happens in step 4 of an ingest?")
    assert numbered["cache"] == "none" and other_number["cache"] == "none"


def test_an_ingest_into_the_partition_invalidates_its_answers(llm_served):
    live, _ = llm_served
    question = "What does the HTTP API return for a search?"
    assert ask(live, question)["cache"] == "none"
    assert ask(live, question)["cache"] == "exact"
    with live.client() as c:
        reply = c.post("/v1/documents", json={"tenant": "default", "partition": "demo", "documents": [
            {"id": "cache-note", "text": "Searches return the fused passages with their scores and timings."}]})
    assert reply.status_code == 200, reply.text
    assert ask(live, question)["cache"] == "none", "the partition changed: the cached answer may be stale"
    assert ask(live, "What does the HTTP API return for a search ?")["cache"] == "exact"


def test_a_new_fusion_weight_for_the_partition_retires_its_answers(llm_served):
    live, _ = llm_served
    question = "What does the library keep in step with the store?"
    assert ask(live, question)["cache"] == "none"
    assert ask(live, question)["cache"] == "exact"
    try:
        with live.client() as c:
            assert c.patch("/v1/partitions/demo", json={"dense_weight": 2}).status_code == 200
        assert ask(live, question)["cache"] == "none", "retrieved under another weight: the cached answer may differ"
        assert ask(live, question)["cache"] == "exact"
    finally:
        with live.client() as c:
            back = c.patch("/v1/partitions/demo", json={"dense_weight": "default"})
    assert back.status_code == 200 and back.json()["dense_weight"] is None
    # the same weight as at first, but the settings moved on: what was cached meanwhile may have been ranked under
    # either (a change between a request's cache key and its search), so none of it is served
    assert ask(live, question)["cache"] == "none"


def test_concurrent_identical_misses_compute_once(llm_served):
    live, _ = llm_served
    question = "Which stage re-scores the best candidates with token-level similarity?"  # the demo corpus says
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda _: ask(live, question, max_tokens=24), range(4)))
    layers = sorted(r["cache"] for r in replies)
    assert layers == ["exact", "exact", "exact", "none"], (layers, [r["finish_reason"] for r in replies])
    assert len({r["answer"] for r in replies}) == 1


def test_cache_entries_belong_to_their_tenant(llm_served):
    live, _ = llm_served
    other = live.keys["other"]
    ask(live, "What is a partition in the appliance?")
    with live.client() as c:
        mine = c.get("/v1/cache/entries", params={"limit": 50}).json()["entries"]
    entry = next(e for e in mine if e["question"] == "What is a partition in the appliance?")
    with live.client(other) as c:
        theirs = c.get("/v1/cache/entries").json()
        assert theirs["tenant"] == "other" and entry["id"] not in {e["id"] for e in theirs["entries"]}
        assert c.delete(f"/v1/cache/entries/{entry['id']}").status_code == 404
        forbidden = c.get("/v1/cache/entries", params={"tenant": "default"})
        assert forbidden.status_code == 403 and forbidden.json()["error"]["field"] == "tenant"
        stolen = c.post("/v1/ask", json={"tenant": "default", "question": "What is a partition in the appliance?"})
        assert stolen.status_code == 403
    # the other tenant asking the same question gets no cached answer (and no documents of `default`)
    theirs = ask(live, "What is a partition in the appliance?", key=other)
    assert theirs["cache"] == "none" and theirs["sources"] == []
    with live.client() as c:
        assert c.delete(f"/v1/cache/entries/{entry['id']}").status_code == 200
        left = c.get("/v1/cache/entries", params={"limit": 50}).json()["entries"]
    assert entry["id"] not in {e["id"] for e in left}
    again = ask(live, "What is a partition in the appliance?")
    assert again["cache"] == "none", "a deleted answer is not served again from its exact copy"


def test_an_extractive_box_answers_without_engines_and_caches_its_answers(tmp_path, models_dir):
    """`generate.answer_mode = "extractive"` with generation off (a box with no room for an engine): the answer is
    the passages' best sentences, cited, as text through /v1/ask, the chat endpoint and its stream; a repeat comes
    from the exact cache."""
    settings = make_settings(tmp_path, models_dir, generate_answer_mode="extractive")
    question = {"role": "user", "content": "How long do the pump's seals last?"}
    with LiveServer(settings) as live, live.client() as c:
        stored = c.post("/v1/documents", json={"tenant": "t", "partition": "kb", "documents": [
            {"id": "pump", "text": "The XK pump turns at 2900 rpm. Its seals last 4000 hours of running."},
            {"id": "valve", "text": "The XK valve closes in two seconds."}]})
        first = c.post("/v1/chat/completions", json={"model": "auto", "tenant": "t", "messages": [question]})
        again = c.post("/v1/chat/completions", json={"model": "auto", "tenant": "t", "messages": [question]})
        streamed = c.post("/v1/chat/completions", json={"model": "auto", "tenant": "t", "messages": [question],
                                                        "stream": True})
        asked = c.post("/v1/ask", json={"tenant": "t", "question": question["content"]})
    assert stored.status_code == 200 and first.status_code == 200, (stored.text, first.text)
    answer = first.json()["choices"][0]["message"]["content"]
    assert "4000 hours" in answer and "[1]" in answer and first.json()["cache"] == "none", first.json()
    assert again.json()["cache"] == "exact" and again.json()["choices"][0]["message"]["content"] == answer
    assert "4000 hours" in streamed.text and asked.json()["cache"] == "exact" and asked.json()["answer"] == answer
