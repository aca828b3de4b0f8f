"""The product's default answer engine, as `just serve` runs it: Qwen2.5-Coder-1.5B-Instruct (joined from its PyPI
parts and converted at build time) on both cores, the only engine. One boot for the module (~40 s on 2 cores) and
a few answers (~10 s each): the other answer tests run on SmolLM2 and a tiny model, which start and answer faster.
"""
from __future__ import annotations

import dataclasses
import json

import httpx
import pytest

from appliance.answers import Answerer, AskRequest, Done
from appliance.answers.checks import NOT_COVERED
from appliance.config import GenerateSettings, Settings
from appliance.generate import Passage, build_prompt
from appliance.grounding import LABELS, strip_citations
from appliance.models import load_manifests
from appliance.retrieve import PartitionFilter
from appliance.timings import Stage
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


def test_asked_first_the_default_model_tells_a_stated_answer_from_a_missing_one(default_served):
    """The odds generate.decline_above reads (the prompt's check_text, as the answer path builds it): its "no"
    outweighs its "yes" for a detail the passage leaves out, and the other way for one it states."""
    engine = default_served.app.state.services.engines["large"]
    passage = Passage("XK-4471 pump", "The XK-4471 pump runs at 1,450 rpm. Its bearings are greased every 500 hours "
                                      "with lithium grease.")

    def odds(question: str) -> tuple[float, float]:
        prompt = build_prompt(engine.tokenizer, "cited", False, [passage], question, 256, with_check=True)
        return default_served.call(engine.next_word_odds(prompt.check_text, ("yes", "no")))

    stated, missing = odds("How fast does the XK-4471 pump run?"), odds("Who manufactures the XK-4471 pump?")
    assert all(0 <= p <= 1 for p in (*stated, *missing)) and sum(stated) > 0.5 and sum(missing) > 0.5
    assert stated[0] > stated[1] and missing[1] > missing[0], (stated, missing)


def test_with_decline_above_set_the_answer_path_asks_the_engine_first(default_served):
    """The answer path with generate.decline_above on, on the default engine: at 0 any odds of "no" decline, so
    the model's odds were asked for and read (the setting's level is measured in bench/answers.py)."""
    services, settings = default_served.app.state.services, default_served.settings
    declining = dataclasses.replace(settings.generate, decline_above=0.0)
    answerer = Answerer(services.retriever, services.engines, {}, declining, settings.router)

    async def ask():
        return [event async for event in answerer.ask(AskRequest("What happens after a crash?",
                                                                 PartitionFilter("default")))]

    done = next(e for e in default_served.call(ask(), timeout=300) if isinstance(e, Done))
    assert done.text == NOT_COVERED and done.finish_reason == "not_covered", done
    assert 'odds of "no"' in done.route.reason and done.timings.get(Stage.ANSWERABLE) > 0
