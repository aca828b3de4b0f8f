"""Conversations: a follow-up becomes a standalone question for retrieval, routing and the caches; the recent
history and the client's system message reach the prompt within their budget; the rewrite falls back to the
expansion when its engine is down or slow; degenerate loops are stopped and never cached.

Scripted engines check the logic around an engine (what the prompt holds, the fallbacks); the real engines
(`llm_served`) check the same end to end over HTTP, with the OpenAI client too."""
from __future__ import annotations

import dataclasses

import pytest
from openai import OpenAI

from appliance.answers import AskRequest, Answerer, Done, Sources
from appliance.cache import ExactCache, SingleFlight
from appliance.answers import CachedAnswerer
from appliance.config import ConversationSettings
from appliance.generate import EngineSet
from appliance.library import DocumentInput
from appliance.retrieve import PartitionFilter
from appliance.answers.standalone import FollowUpAnswers, StandaloneQuestions, usable_rewrite
from appliance.text import Turn
from appliance.wiring import open_services

from scripted import Script, ScriptedEngine
from support import run

DOCS = [DocumentInput(id="psoriasis", title="Psoriasis", text="Psoriasis is treatable with creams and light therapy."),
        DocumentInput(id="malaria", title="Malaria", text="Malaria is treatable with artemisinin drugs.")]
WHERE = PartitionFilter("acme")


@pytest.fixture(scope="module")
def tokenizer(models_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(models_dir / "build" / "smollm2"))


def _history(topic: str) -> tuple[Turn, ...]:
    return (Turn("user", f"What is {topic}?"), Turn("assistant", f"{topic.capitalize()} is a disease."))


async def _answers(settings, engines: dict, conversation: ConversationSettings, cache_dir=None):
    services_cm = open_services(settings, warm_up=False, generation=False)
    services = await services_cm.__aenter__()
    await services.library.ingest("acme", "kb", DOCS)
    engine_set = EngineSet(engines, restart_delay_s=0.01)
    await engine_set.start()
    answerer = Answerer(services.retriever, engine_set, {}, settings.generate, settings.router, 60.0,
                        conversation)
    inner = answerer
    if cache_dir is not None:
        inner = CachedAnswerer(answerer, services.retriever, ExactCache(cache_dir, 64, 3600, 10_000_000), None,
                               SingleFlight(1.0), services.library.versions, True)
    return FollowUpAnswers(inner, StandaloneQuestions(engine_set, conversation)), engine_set, services_cm


async def _ask(answers, req: AskRequest) -> tuple[Sources, Done]:
    events = [event async for event in answers.ask(req)]
    return next(e for e in events if isinstance(e, Sources)), next(e for e in events if isinstance(e, Done))


def test_the_same_follow_up_in_two_conversations_gets_two_standalone_questions_and_two_cache_entries(
        settings, tokenizer, tmp_path):
    small = ScriptedEngine("small", tokenizer)

    async def go():
        answers, engines, services = await _answers(settings, {"small": small}, ConversationSettings(),
                                                    tmp_path / "cache")
        try:
            asked = [await _ask(answers, AskRequest("Is it treatable?", WHERE, history=_history(topic)))
                     for topic in ("psoriasis", "malaria", "psoriasis")]
            lone = await _ask(answers, AskRequest("Is it treatable?", WHERE))
        finally:
            await engines.stop()
            await services.__aexit__(None, None, None)
        return asked, lone

    (first, second, again), lone = run(go())
    assert "psoriasis" in first[0].standalone_question.lower() and "malaria" in second[0].standalone_question.lower()
    assert first[0].sources[0].document_id == "psoriasis" and second[0].sources[0].document_id == "malaria"
    assert [d.cache for _, d in (first, second, again)] == ["none", "none", "exact"], "keyed by the conversation"
    assert lone[0].standalone_question == "Is it treatable?" and lone[1].cache == "none"
    assert "rewrite" in first[1].timings.as_dict() and "rewrite" not in lone[1].timings.as_dict()


def test_the_prompt_holds_recent_history_within_budget_and_the_client_system_message_after_ours(
        settings, tokenizer):
    small = ScriptedEngine("small", tokenizer)
    long_history = tuple(Turn("user" if i % 2 == 0 else "assistant", f"Turn {i} talks about topic {i}. " * 10)
                         for i in range(12))  # ~110 tokens a turn: two fit in 256
    conversation = ConversationSettings(history_turns=6, history_tokens=256)

    async def go():
        answers, engines, services = await _answers(settings, {"small": small}, conversation)
        try:
            await _ask(answers, AskRequest("And is it treatable?", WHERE, history=long_history,
                                           system="Answer in the style of a pirate."))
            await _ask(answers, AskRequest("Is psoriasis treatable?", WHERE))
        finally:
            await engines.stop()
            await services.__aexit__(None, None, None)

    run(go())
    follow_up, lone = small.prompts
    assert "Turn 11 talks" in follow_up and "Turn 10 talks" in follow_up, "the newest turns kept"
    assert "Turn 9 talks" not in follow_up, "older ones dropped first, past history_tokens"
    ours = follow_up.index("You are the answer service")
    assert ours < follow_up.index("Answer in the style of a pirate."), "the client's system message comes after ours"
    assert follow_up.rindex("And is it treatable?") > follow_up.index("Turn 11"), "the question as asked, last"
    assert "pirate" not in lone and "Turn" not in lone


def test_a_rewrite_falls_back_to_the_expansion_when_its_engine_is_down_or_slow(settings, tokenizer):
    down = ScriptedEngine("small", tokenizer)
    slow = ScriptedEngine("small", tokenizer, Script(tokens=["Is", " psoriasis", " treatable?"], token_delay_s=5))
    good = ScriptedEngine("small", tokenizer, Script(tokens=["Is psoriasis", " treatable?", "\nAnd more"]))
    conversation = ConversationSettings(standalone="rewrite", rewrite_timeout_s=0.5)

    async def resolve(engine, kill: bool = False):
        engines = EngineSet({"small": engine}, restart_delay_s=60)
        await engines.start()
        if kill:
            engine.mark_down()
        try:
            return await StandaloneQuestions(engines, conversation).resolve("Is it treatable?", _history("psoriasis"))
        finally:
            await engines.stop()

    results = [run(resolve(down, kill=True)), run(resolve(slow)), run(resolve(good))]
    assert [r.method for r in results] == ["expand_fallback", "expand_fallback", "rewrite"]
    assert "psoriasis" in results[0].text.lower() and results[2].text == "Is psoriasis treatable?"
    assert 0.4 < results[1].ms / 1000 < 3, "the slow rewrite was given up at rewrite_timeout_s"
    assert "You rewrite the last question" in good.prompts[0] and "User: What is psoriasis?" in good.prompts[0]


def test_a_rewrite_its_engine_cannot_take_is_expanded_not_sent_to_the_other_engine(settings, tokenizer):
    small, large = ScriptedEngine("small", tokenizer), ScriptedEngine("large", tokenizer)
    conversation = ConversationSettings(standalone="rewrite")

    async def resolve():
        engines = EngineSet({"small": small, "large": large}, restart_delay_s=60)
        await engines.start()
        small.mark_down()
        try:
            return await StandaloneQuestions(engines, conversation).resolve("Is it treatable?", _history("psoriasis"))
        finally:
            await engines.stop()

    result = run(resolve())
    assert result.method == "expand_fallback" and "psoriasis" in result.text.lower()
    assert large.prompts == [], "the answer engine was not taken for a rewrite"


def test_a_long_client_system_message_and_question_still_fit_the_engine(settings, tokenizer):
    """32,000 characters of system message (~7k tokens) and a 4,000-character question against a 2,048-token
    engine: both are cut or take room from the passages, and the prompt fits beside the answer."""
    small = ScriptedEngine("small", tokenizer)
    system = "Follow the house style for every answer you give. " * 620
    question = "Is psoriasis treatable, and how " + "exactly " * 480 + "?"

    async def go():
        answers, engines, services = await _answers(settings, {"small": small}, ConversationSettings())
        try:
            return await _ask(answers, AskRequest(question, WHERE, system=system, history=_history("psoriasis")))
        finally:
            await engines.stop()
            await services.__aexit__(None, None, None)

    _, done = run(go())
    prompt = small.prompts[0]
    tokens = len(tokenizer.encode(prompt, add_special_tokens=False))
    assert done.finish_reason == "stop" and "Follow the house style" in prompt
    assert tokens + small.limits.max_tokens <= small.limits.max_model_len, tokens


def test_a_real_engine_rewrites_a_follow_up(llm_served):
    """The rewrite path on vLLM (the real chat template, streaming, the stop at the first line): the small engine
    is asked, and what comes back is a question to search (the tiny test model writes noise: then the expansion)."""
    live, _ = llm_served
    questions = live.app.state.services.questions
    history = (Turn("user", "How is ingest made durable?"),
               Turn("assistant", "The store commits with synchronous=FULL before acknowledging."))
    with live.client() as c:
        before = c.get("/v1/engines").json()["engines"]["small"]["generation_tokens"]
        result = live.call(questions.resolve("What happens to it after a crash?", history, mode="rewrite"))
        after = c.get("/v1/engines").json()["engines"]["small"]["generation_tokens"]
    assert after > before, "the rewrite engine generated"
    assert result.method in ("rewrite", "expand_fallback") and result.text.strip(), result
    assert result.method == "rewrite" or "durable" in result.text.lower(), result
    assert result.ms < (questions.settings.rewrite_timeout_s + 1) * 1000


def test_unusable_rewrites_are_refused():
    assert usable_rewrite('"Is psoriasis treatable?"\nextra', "Is it treatable?") == "Is psoriasis treatable?"
    assert usable_rewrite("Standalone question: Is psoriasis treatable?", "q?") == "Is psoriasis treatable?"
    assert usable_rewrite("", "Is it treatable?") is None
    assert usable_rewrite("x" * 1000, "Is it?") is None


def test_a_looping_answer_is_stopped_and_never_cached(settings, tokenizer, tmp_path):
    loop = ScriptedEngine("small", tokenizer, Script(tokens=["The answer is: 2"] + ["0"] * 200))

    async def go():
        answers, engines, services = await _answers(settings, {"small": loop}, ConversationSettings(),
                                                    tmp_path / "cache")
        try:
            return [await _ask(answers, AskRequest("How long does that take?", WHERE)) for _ in range(2)]
        finally:
            await engines.stop()
            await services.__aexit__(None, None, None)

    (_, first), (_, second) = run(go())
    assert first.finish_reason == "repetition" and first.text.startswith("The answer is: 2")
    assert len(first.text) < 40 and second.cache == "none", "a loop is cut short and not replayed"
    assert loop.aborted == 2, "the engine's request was stopped, not run to its token budget"


def test_a_three_turn_conversation_over_http_with_the_openai_client(llm_served):
    """Real engines: the follow-up is answered from the conversation, streamed and not; the standalone question
    it searched comes back; the same follow-up after another conversation is another question."""
    live, _ = llm_served
    turns = [{"role": "system", "content": "Keep answers short."},
             {"role": "user", "content": "How is ingest made durable?"},
             {"role": "assistant", "content": "The store commits with synchronous=FULL before acknowledging."},
             {"role": "user", "content": "What happens to it after a crash?"}]
    client = OpenAI(base_url=live.url + "/v1", api_key=live.api_key)
    plain = client.chat.completions.create(model="small", messages=turns, max_tokens=8)
    chunks = list(client.chat.completions.create(model="small", messages=turns, max_tokens=8, stream=True))
    other = client.chat.completions.create(model="small", max_tokens=8, messages=[
        {"role": "user", "content": "What does the router do?"},
        {"role": "assistant", "content": "It picks the small or the large engine."},
        {"role": "user", "content": "What happens to it after a crash?"}])
    extra = plain.model_extra
    assert plain.choices[0].message.content is not None and extra["sources"]
    assert extra["standalone_question"] != "What happens to it after a crash?"
    assert "ingest" in extra["standalone_question"].lower() or "durable" in extra["standalone_question"].lower()
    assert "rewrite" in extra["timings_ms"]
    assert chunks[0].model_extra["standalone_question"] == extra["standalone_question"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert other.model_extra["standalone_question"] != extra["standalone_question"]
    assert other.model_extra["cache"] == "none"


def test_ask_takes_history_and_refuses_a_bad_one(llm_served):
    live, _ = llm_served
    history = [{"role": "user", "content": "How is ingest made durable?"},
               {"role": "assistant", "content": "By committing before acknowledging."}]
    with live.client() as c:
        good = c.post("/v1/ask", json={"question": "And after a crash?", "history": history, "model": "small",
                                       "max_tokens": 8})
        bad_role = c.post("/v1/ask", json={"question": "q", "history": [{"role": "system", "content": "x"}]})
        too_long = c.post("/v1/ask", json={"question": "q", "history": [
            {"role": "user", "content": "x" * 30_000} for _ in range(5)]})  # past max_chat_chars, not the body
        metrics = c.get("/metrics").text
    assert good.status_code == 200, good.text
    assert good.json()["standalone_question"] != "And after a crash?" and "rewrite" in good.json()["timings_ms"]
    assert bad_role.status_code == 422 and bad_role.json()["error"]["field"].startswith("history")
    assert too_long.status_code == 422 and too_long.json()["error"]["field"] == "history"
    assert 'appliance_stage_seconds_count{stage="rewrite"}' in metrics


def test_sources_of_a_follow_up_replay_carry_its_standalone_question(settings, tokenizer, tmp_path):
    """A cached follow-up answer still says which standalone question it answered."""
    small = ScriptedEngine("small", tokenizer)

    async def go():
        answers, engines, services = await _answers(settings, {"small": small}, ConversationSettings(),
                                                    tmp_path / "cache")
        try:
            req = AskRequest("Is it treatable?", WHERE, history=_history("malaria"))
            return [await _ask(answers, dataclasses.replace(req)) for _ in range(2)]
        finally:
            await engines.stop()
            await services.__aexit__(None, None, None)

    (first, _), (again, done) = run(go())
    assert done.cache == "exact" and again.standalone_question == first.standalone_question


def test_sources_are_the_passages_the_answer_cites(settings, tokenizer):
    from appliance.serve.http.responses import Answer, answer_json

    citing = ScriptedEngine("small", tokenizer, Script(tokens=["Malaria is treatable", " [2]", "."]))
    silent = ScriptedEngine("small", tokenizer, Script(tokens=["Nobody knows for sure."]))  # supported by none
    replies = []
    for engine in (citing, silent):
        async def go(engine=engine):
            answers, engines, services = await _answers(settings, {"small": engine}, ConversationSettings())
            try:
                return await _ask(answers, AskRequest("Are psoriasis and malaria treatable?", WHERE))
            finally:
                await engines.stop()
                await services.__aexit__(None, None, None)
        sources, done = run(go())
        replies.append((len(sources.sources), answer_json(Answer(sources, done), "r")))
    (given, cited), (given_silent, uncited) = replies
    assert given == 2 and [s["n"] for s in cited["sources"]] == [2] and cited["cited"] == [2]
    assert len(uncited["sources"]) == given_silent == 2 and uncited["cited"] == [], "no citation: all are kept"


def test_a_question_no_passage_covers_is_not_answered_from_nothing(settings, tokenizer):
    """With generate.min_relevance on, an off-topic question gets no generated answer and no sources."""
    small = ScriptedEngine("small", tokenizer)
    grounded = dataclasses.replace(settings, generate=dataclasses.replace(settings.generate, min_relevance=0.42))

    async def go():
        answers, engines, services = await _answers(grounded, {"small": small}, ConversationSettings())
        try:
            return [await _ask(answers, AskRequest(q, WHERE)) for q in (
                "How long should sourdough bread rise before baking?", "Is psoriasis treatable with light therapy?",
                "面包发酵需要多长时间？")]
        finally:
            await engines.stop()
            await services.__aexit__(None, None, None)

    (off_sources, off), (on_sources, on), (_, chinese) = run(go())
    assert off.finish_reason == "not_covered" and off_sources.sources == [] and "min_relevance" in off.route.reason
    assert on.finish_reason == "stop" and on_sources.sources[0].document_id == "psoriasis"
    assert len(small.prompts) == 2, "the off-topic English question reached no engine"
    assert chinese.finish_reason == "stop", "the floor is measured for English only: Chinese questions skip it"


def test_a_follow_up_never_takes_a_cached_answer_on_its_bare_words(llm_served):
    """Real engines and caches: the words of a cached lone question, asked again inside a conversation (as they
    are, or nearly), are answered for that conversation: neither the exact nor the semantic cache serves them."""
    live, _ = llm_served
    history = [{"role": "user", "content": "What is a partition in the appliance?"},
               {"role": "assistant", "content": "A named set of one tenant's documents with its own index."}]
    ask = {"model": "large", "max_tokens": 6}  # SmolLM2: a real answer (the tiny model may loop: never cached)
    with live.client() as c:
        lone = c.post("/v1/ask", json={"question": "How is a partition searched?", **ask}).json()
        repeat = c.post("/v1/ask", json={"question": "How is a partition searched?", **ask}).json()
        followed = c.post("/v1/ask", json={"question": "How is a partition searched?", "history": history,
                                           **ask}).json()
        near = c.post("/v1/ask", json={"question": "How is a partition searched ?", "history": history,
                                       **ask}).json()
        again = c.post("/v1/ask", json={"question": "How is a partition searched?", "history": history,
                                        **ask}).json()
    assert lone["cache"] == "none" and lone["finish_reason"] != "not_covered", lone
    assert repeat["cache"] == "exact", "the lone question is cached"
    assert followed["cache"] == "none" and near["cache"] == "none", (followed["route"], near["route"])
    assert again["cache"] == "exact", "the same conversation again is its own cache entry"
