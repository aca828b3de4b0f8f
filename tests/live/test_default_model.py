"""The product's default answer engine, as `just serve` runs it: Qwen2.5-Coder-1.5B-Instruct (joined from its PyPI
parts and converted at build time) on both cores, the only engine. One boot for the module (~40 s on 2 cores) and
a few answers (~10 s each): the other answer tests run on SmolLM2 and a tiny model, which start and answer faster.
"""
from __future__ import annotations

import json

import httpx
import pytest

from appliance.config import GenerateSettings, Settings
from appliance.grounding import LABELS, strip_citations
from appliance.models import load_manifests
from support import LiveServer, make_settings

DEFAULT = Settings().large.model


@pytest.fixture(scope="module")
def default_served(tmp_path_factory, models_dir):
    settings = make_settings(tmp_path_factory.mktemp("default-model"), models_dir, generate_enabled="true",
                             demo_corpus="true", generate_min_relevance=str(GenerateSettings().min_relevance))
    assert settings.large.model == DEFAULT and not settings.small.enabled, "the product's engine settings"
    with LiveServer(settings) as live:
        yield live


def test_default_model_is_built_from_its_pinned_parts_with_its_licence(models_dir):
    manifest = load_manifests(models_dir)[DEFAULT]
    (gguf,) = manifest.files
    assert len(gguf.parts) == 22 and all(len(p.sha256) == 64 for p in gguf.parts)
    assert manifest.licence.startswith("Apache-2.0")
    folder = models_dir / "build" / DEFAULT
    assert "Apache License" in (folder / "LICENSE").read_text() and "Qwen" in (folder / "NOTICE").read_text()
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]


def test_default_model_answers_from_the_demo_corpus_cited_and_checked(default_served):
    with httpx.Client(base_url=default_served.url, timeout=300) as c:
        body = c.post("/v1/ask", json={"tenant": "default", "question": "What happens after a crash?"}).json()
    answer = body["answer"]
    assert body["route"]["engine"] == "large" and not body["degraded"], body
    assert body["finish_reason"] in ("stop", "length"), body["finish_reason"]  # not a loop, not refused
    assert any(word in answer.lower() for word in ("store", "index", "rebuil", "boot", "restart")), answer
    given = {s["n"] for s in body["sources"]}
    assert body["cited"] and set(body["cited"]) <= given, body["cited"]
    assert body["grounding"]["label"] in ("supported", "partly"), body["grounding"]
    # the passages that support it are among those the prompt showed (the JSON answer lists the cited ones)
    assert set(body["grounding"]["passages"]) <= set(range(1, GenerateSettings().passages + 1))


def test_default_model_streams_its_answer_and_the_check_comes_with_done(default_served):
    events, name = [], None
    with httpx.Client(base_url=default_served.url, timeout=300) as c, c.stream("POST", "/v1/ask", json={
            "tenant": "default", "question": "Does a search see half of a document while it is re-indexed?",
            "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    assert [kind for kind, _ in events[:1] + events[-1:]] == ["sources", "done"], events[:2]
    given = {s["n"] for s in events[0][1]["sources"]}
    done = events[-1][1]
    streamed = "".join(data["text"] for kind, data in events if kind == "token")
    # what was streamed is the answer (the check may add or drop citation marks, nothing else)
    assert streamed.strip() and _letters(streamed) == _letters(done["answer"])
    assert done["grounding"]["label"] in LABELS and set(done["cited"]) <= given, done
    assert done["timings_ms"]["check"] >= 0 and done["finish_reason"] in ("stop", "length")


def _letters(text: str) -> str:
    return "".join(strip_citations(text).split())
