"""Each answer checked against its passages on the answer path (answers/checks.py): citations validated, the
grounding label, what an unsupported answer becomes under each `generate.unsupported` policy, extractive answers.
Scripted engines say exactly what a model might (a citation of a passage never given, an invented claim); a real
retriever over a real index gives the passages. The real engines' answers are checked in test_answers.py and
test_default_model.py."""
from __future__ import annotations

from dataclasses import replace

from appliance.answers import AskRequest, Done, Token, answer_citations
from appliance.answers.checks import NOT_COVERED, QUOTE_LEAD

from scripted import Script, ScriptedEngine
from support import run
from test_answer import WHERE, answer_path, collect, done_of, tokenizer  # noqa: F401  (the fixture)

QUESTION = "what does XK-4471 mean?"
INVENTED = ["The pump", " runs on diesel", " shipped from Norway", " since 1962."]


def ask(settings, tokens: list[str], unsupported: str = "label", mode: str = "generate", engines=True,
        tokenizer=None) -> tuple[list, ScriptedEngine]:
    settings = replace(settings, generate=replace(settings.generate, unsupported=unsupported, answer_mode=mode))
    engine = ScriptedEngine("small", tokenizer, Script(tokens=tokens))

    async def go():
        async with answer_path(settings, {"small": engine} if engines else {}) as (answerer, _, _):
            return await collect(answerer.ask(AskRequest(QUESTION, WHERE)))
    return run(go()), engine


def streamed(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, Token))


def test_a_citation_of_a_passage_never_given_is_removed_and_the_claim_is_found_in_its_passage(settings, tokenizer):
    events, _ = ask(settings, ["Error code XK-4471 means", " the pump's pressure sensor failed [1][9]."],
                    tokenizer=tokenizer)
    done = done_of(events)
    assert "[9]" not in done.text and "[1]" in done.text, done.text
    assert done.grounding.label == "supported" and done.grounding.passages == (1,), done.grounding
    assert done.finish_reason == "stop"


def test_an_answer_that_cites_nothing_gets_the_passage_that_supports_it(settings, tokenizer):
    events, _ = ask(settings, ["XK-4471 means", " the pump's pressure sensor failed."], tokenizer=tokenizer)
    done = done_of(events)
    assert done.grounding.label == "supported" and answer_citations(done) == [1], done.grounding
    assert done.text == streamed(events) == "XK-4471 means the pump's pressure sensor failed.", \
        "its citations are attached to the answer, not written into a text the stream already sent"


def test_label_policy_streams_an_unsupported_answer_and_labels_it(settings, tokenizer):
    events, _ = ask(settings, INVENTED, "label", tokenizer=tokenizer)
    done = done_of(events)
    assert done.grounding.label == "unsupported" and done.text == "".join(INVENTED)
    assert streamed(events) == "".join(INVENTED)
    assert all(s.label == "unsupported" for s in done.grounding.sentences)


def test_refuse_policy_never_streams_the_unsupported_answer(settings, tokenizer):
    events, _ = ask(settings, INVENTED, "refuse", tokenizer=tokenizer)
    done = done_of(events)
    assert done.text == NOT_COVERED and done.finish_reason == "unsupported"
    assert streamed(events) == NOT_COVERED, "held back until checked: no invented word reached the client"
    assert "diesel" not in streamed(events)


def test_quote_policy_answers_with_the_passages_own_sentences(settings, tokenizer):
    events, _ = ask(settings, INVENTED, "quote", tokenizer=tokenizer)
    done = done_of(events)
    assert done.text.startswith(QUOTE_LEAD) and "pressure sensor failed" in done.text and "[1]" in done.text
    assert streamed(events) == done.text and done.finish_reason == "unsupported"
    assert done.grounding.label == "supported"


def test_a_supported_answer_passes_every_policy_unchanged(settings, tokenizer):
    tokens = ["XK-4471 means the pump's pressure sensor failed [1]."]
    for policy in ("label", "quote", "refuse"):
        events, _ = ask(settings, tokens, policy, tokenizer=tokenizer)
        done = done_of(events)
        assert done.text == tokens[0] and streamed(events) == tokens[0], policy
        assert done.grounding.label == "supported", policy


def test_extractive_mode_answers_from_the_passages_without_an_engine(settings, tokenizer):
    events, engine = ask(settings, INVENTED, mode="extractive", tokenizer=tokenizer)
    done = done_of(events)
    assert not engine.prompts, "no engine was asked"
    assert "pressure sensor failed" in done.text and "[1]" in done.text, done.text
    assert done.finish_reason == "extractive" and done.grounding.label == "supported"
    assert streamed(events) == done.text and done.route.engine is None


def test_a_degraded_answer_is_streamed_as_text_and_quotes_the_best_sentence(settings, tokenizer):
    events, _ = ask(settings, INVENTED, engines=False, tokenizer=tokenizer)
    done = done_of(events)
    assert done.degraded and done.text.startswith("No generated answer") and "pressure sensor failed" in done.text
    assert streamed(events) == done.text
    assert isinstance(events[-1], Done)
