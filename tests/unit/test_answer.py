"""The answer path (answers/answer.py, answers/cached.py) around scripted engines: routing, degrade, retry on a dead
engine, deadlines, single flight. A real retriever over a real index feeds it; the engines inject the faults."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import pytest

from appliance.answers import AskRequest, Answerer, Done, Failed, Sources, Token
from appliance.cache import ExactCache, SingleFlight
from appliance.answers import CachedAnswerer
from appliance.answers.checks import NOT_COVERED
from appliance.generate import EngineSet
from appliance.generate.prompts import ANSWERABLE_CHECK
from appliance.library import DocumentInput
from appliance.retrieve import PartitionFilter
from appliance.timings import Stage
from appliance.wiring import open_services

from scripted import Script, ScriptedEngine
from support import run

DOCS = [DocumentInput(id="pump", title="Pump", text="Error code XK-4471 means the pump's pressure sensor failed."),
        DocumentInput(id="cells", title="Cells", text="The mitochondria produce most of the energy a cell uses.")]
WHERE = PartitionFilter("acme")


@pytest.fixture(scope="module")
def tokenizer(models_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(models_dir / "build" / "smollm2"))


@contextlib.asynccontextmanager
async def answer_path(settings, engines: dict, deadline_s: float = 60.0, wait_budget_s: float = float("inf")):
    """A real retriever over DOCS and the given scripted engines, started; yields (answerer, engine set)."""
    async with open_services(settings, warm_up=False, generation=False) as services:
        await services.library.ingest("acme", "kb", DOCS)
        engine_set = EngineSet(engines, wait_budget_s, restart_delay_s=0.01)
        await engine_set.start()
        try:
            yield Answerer(services.retriever, engine_set, {}, settings.generate, settings.router, deadline_s), \
                engine_set, services
        finally:
            await engine_set.stop()


async def collect(events) -> list:
    return [event async for event in events]


def done_of(events) -> Done:
    return next(e for e in events if isinstance(e, Done))


def test_short_questions_go_small_long_ones_large_and_a_forced_model_wins(settings, tokenizer):
    small, large = ScriptedEngine("small", tokenizer), ScriptedEngine("large", tokenizer)
    long_question = "why " * (settings.router.max_words_small + 1)

    async def go():
        async with answer_path(settings, {"small": small, "large": large}) as (answerer, _, _):
            short = await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE)))
            long = await collect(answerer.ask(AskRequest(long_question, WHERE)))
            forced = await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE, model="large")))
        return short, long, forced

    short, long, forced = run(go())
    assert done_of(short).route.engine == "small" and "by length" in done_of(short).route.reason
    assert done_of(long).route.engine == "large"
    assert done_of(forced).route.engine == "large" and done_of(forced).route.reason == "requested by the client"
    assert "".join(e.text for e in short if isinstance(e, Token)) == "The answer."
    sources = next(e for e in short if isinstance(e, Sources))
    assert sources.sources[0].document_id == "pump" and sources.sources[0].n == 1
    assert "XK-4471" in small.prompts[0], "the retrieved passage is in the prompt"
    assert done_of(short).usage.passages_in_prompt >= 1 and done_of(short).usage.cached_prompt_tokens == 64
    for stage in ("partitions", "encode", "route", "prompt", "ttft", "generation", "total"):
        assert stage in done_of(short).timings.as_dict()


def test_a_full_engine_sends_the_request_to_another_and_none_left_degrades(settings, tokenizer):
    small = ScriptedEngine("small", tokenizer, max_queue=0)  # full: takes nothing
    large = ScriptedEngine("large", tokenizer)

    async def go():
        async with answer_path(settings, {"small": small, "large": large}) as (answerer, _, _):
            moved = await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE)))
            large.mark_down()
            nothing = await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE)))
        return moved, nothing

    moved, nothing = run(go())
    assert done_of(moved).route.engine == "large" and "queue is full" in done_of(moved).route.reason
    degraded = done_of(nothing)
    assert degraded.degraded and degraded.route.engine is None and degraded.finish_reason == "degraded"
    assert "XK-4471" in degraded.text and "queue is full" in degraded.route.reason


def test_over_the_wait_budget_an_engine_takes_nothing(settings, tokenizer):
    small, large = ScriptedEngine("small", tokenizer), ScriptedEngine("large", tokenizer)
    small.estimated_wait_s = 9.0

    async def go():
        async with answer_path(settings, {"small": small, "large": large}, wait_budget_s=3) as (answerer, _, _):
            return await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE)))

    done = done_of(run(go()))
    assert done.route.engine == "large" and "over the 3 s budget" in done.route.reason


def test_an_engine_dying_before_its_first_token_hands_the_request_over_and_is_restarted(settings, tokenizer):
    small = ScriptedEngine("small", tokenizer, Script(die_after=0))
    large = ScriptedEngine("large", tokenizer)

    async def go():
        async with answer_path(settings, {"small": small, "large": large}) as (answerer, _, _):
            events = await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE)))
            for _ in range(100):  # the set restarts it in the background
                if small.up and small.starts == 2:
                    break
                await asyncio.sleep(0.02)
            return events, small.up

    events, came_back = run(go())
    done = done_of(events)
    assert done.route.engine == "large" and "died" in done.route.reason and not done.degraded
    assert done.text == "The answer." and small.starts == 2 and came_back


def test_an_engine_dying_mid_answer_ends_the_stream_with_a_failure(settings, tokenizer):
    small = ScriptedEngine("small", tokenizer, Script(die_after=1))

    async def go():
        async with answer_path(settings, {"small": small}) as (answerer, _, _):
            return await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE)))

    events = run(go())
    assert [type(e) for e in events] == [Sources, Token, Failed]
    assert "incomplete" in events[-1].message and events[-1].route.engine == "small"


def test_a_forced_engine_that_is_down_degrades_instead_of_using_another(settings, tokenizer):
    small, large = ScriptedEngine("small", tokenizer), ScriptedEngine("large", tokenizer)

    async def go():
        async with answer_path(settings, {"small": small, "large": large}) as (answerer, _, _):
            large.mark_down()
            return await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE, model="large")))

    done = done_of(run(go()))
    assert done.degraded and done.route.engine is None and not small.prompts


def test_no_engines_means_retrieval_only(settings, tokenizer):
    async def go():
        async with answer_path(settings, {}) as (answerer, _, _):
            return await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE)))

    done = done_of(run(go()))
    assert done.degraded and "generation is turned off" in done.route.reason and "XK-4471" in done.text


def test_the_deadline_stops_generation_and_aborts_the_engine_request(settings, tokenizer):
    # 10 s of tokens against a 2 s deadline: the retrieval before them may take over a second on a loaded box (with
    # 0.5 s, CI once saw the deadline pass before the first token)
    slow = ScriptedEngine("small", tokenizer, Script(tokens=["x"] * 50, token_delay_s=0.2))

    async def go():
        async with answer_path(settings, {"small": slow}, deadline_s=60) as (answerer, _, _):
            return await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE, timeout_s=2.0)))

    events = run(go())
    done = done_of(events)
    assert done.finish_reason == "deadline" and 0 < len([e for e in events if isinstance(e, Token)]) < 50
    assert slow.aborted == 1 and slow.in_flight == 0


def test_concurrent_identical_misses_compute_once(settings, tokenizer, tmp_path):
    slow = ScriptedEngine("small", tokenizer, Script(token_delay_s=0.1))

    async def go():
        async with answer_path(settings, {"small": slow}) as (answerer, _, services):
            exact = ExactCache(tmp_path / "exact", 16, 3600, 1 << 24)
            cached = CachedAnswerer(answerer, services.retriever, exact, None, SingleFlight(10),
                                    services.library.versions, deterministic=True)
            request = lambda: AskRequest("what does XK-4471 mean?", WHERE)  # noqa: E731
            first, second, third = await asyncio.gather(*(collect(cached.ask(request())) for _ in range(3)))
            later = await collect(cached.ask(request()))
            exact.close()
        return first, second, third, later

    first, second, third, later = run(go())
    assert len(slow.prompts) == 1, "three identical questions at once reached the engine once"
    assert sorted(done_of(e).cache for e in (first, second, third)) == ["exact", "exact", "none"]
    assert {done_of(e).text for e in (first, second, third, later)} == {"The answer."}
    assert done_of(later).cache == "exact"


def test_an_extractive_answer_is_cached_apart_from_generated_ones(settings, tokenizer, tmp_path):
    """Extractive answers are the passages' own sentences: the same for the same index versions, so a repeat comes
    from the cache; the box switched to generation does not replay them (nor the other way)."""
    engine = ScriptedEngine("small", tokenizer)
    extractive = dataclasses.replace(settings, generate=dataclasses.replace(settings.generate,
                                                                            answer_mode="extractive"))

    async def go(mode_settings):
        async with answer_path(mode_settings, {"small": engine}) as (answerer, _, services):
            exact = ExactCache(tmp_path / "exact", 16, 3600, 1 << 24)
            cached = CachedAnswerer(answerer, services.retriever, exact, None, SingleFlight(10),
                                    services.library.versions, deterministic=True)
            try:
                return [done_of(await collect(cached.ask(AskRequest("what does XK-4471 mean?", WHERE))))
                        for _ in range(2)]
            finally:
                exact.close()

    first, again = run(go(extractive))
    generated, generated_again = run(go(settings))
    assert first.finish_reason == "extractive" and "pressure sensor failed" in first.text and first.cache == "none"
    assert again.cache == "exact" and again.text == first.text and again.grounding.label == "supported"
    assert generated.cache == "none" and generated.text == "The answer." and generated_again.cache == "exact"
    assert len(engine.prompts) == 1, "only the generated answer asked the engine, once"


def _declining(settings, above: float):
    return dataclasses.replace(settings, generate=dataclasses.replace(settings.generate, decline_above=above))


@pytest.mark.parametrize("odds, declined", [((0.2, 0.8), True), ((0.7, 0.3), False), (None, False)])
def test_asked_first_the_model_declines_when_its_odds_of_no_are_over_the_setting(settings, tokenizer, odds, declined):
    # None: the engine could not say (it raised EngineDown for the odds): the answer is generated as without a check
    engine = ScriptedEngine("small", tokenizer, Script(odds=odds))

    async def go():
        async with answer_path(_declining(settings, 0.6), {"small": engine}) as (answerer, _, _):
            return await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE)))

    events = run(go())
    done = done_of(events)
    (asked,) = engine.odds_prompts
    assert asked.count(ANSWERABLE_CHECK) == 1 and "what does XK-4471 mean?" in asked and "XK-4471 means" in asked
    assert Stage.ANSWERABLE in done.timings.as_dict()
    if declined:  # nothing generated: the refusal is the text every client gets, streamed or not
        assert engine.prompts == [] and done.text == NOT_COVERED and done.finish_reason == "not_covered"
        assert "".join(e.text for e in events if isinstance(e, Token)) == NOT_COVERED
        assert 'odds of "no" 0.80 > generate.decline_above' in done.route.reason
    else:  # the answer prompt is the check's without the check (so the two share their cached passages)
        assert done.text == "The answer." and engine.prompts[0] == asked.replace(f"\n\n{ANSWERABLE_CHECK}", "")


def test_off_by_setting_the_model_is_not_asked_and_cached_answers_are_kept_apart(settings, tokenizer):
    engine = ScriptedEngine("small", tokenizer, Script(odds=(0.0, 1.0)))

    async def go():
        async with answer_path(_declining(settings, 1.0), {"small": engine}) as (answerer, _, _):
            events = await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE)))
            scopes = {answerer.cache_scope()}
        async with answer_path(_declining(settings, 0.6), {"small": engine}) as (answerer, _, _):
            scopes.add(answerer.cache_scope())
        return events, scopes

    events, scopes = run(go())
    assert engine.odds_prompts == [] and done_of(events).text == "The answer."
    assert len(scopes) == 2, "an answer cached without the check is not served with it (and the other way)"


def test_a_check_that_outlasts_the_deadline_ends_in_time_and_the_answer_is_not_declined(settings, tokenizer):
    slow = ScriptedEngine("small", tokenizer, Script(odds=(0.0, 1.0), token_delay_s=5.0))

    async def go():
        async with answer_path(_declining(settings, 0.6), {"small": slow}, deadline_s=60) as (answerer, _, _):
            return await collect(answerer.ask(AskRequest("what does XK-4471 mean?", WHERE, timeout_s=2.0)))

    done = done_of(run(go()))
    assert done.finish_reason == "deadline" and done.text != NOT_COVERED
