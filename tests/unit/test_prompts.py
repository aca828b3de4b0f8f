"""Prompt assembly with a real tokenizer (the tiny test model's): stable prefix first, numbered passages, budget."""
import pytest
from transformers import AutoTokenizer

from appliance.generate.prompts import (MAX_CHARS_PER_TOKEN, PROMPT_VERSION, TASKS, Passage, build_prompt,
                                        system_prefix, warm_up_prompts)


@pytest.fixture(scope="module")
def tokenizer(tiny_llm):
    return AutoTokenizer.from_pretrained(tiny_llm)


PASSAGES = [Passage("Durability", "The store commits with synchronous FULL. " * 5),
            Passage("Search", "BM25 and HNSW run in parallel and are fused with RRF. " * 5),
            Passage("", "A passage without a title. " * 40)]


def test_passages_are_numbered_and_the_question_comes_last(tokenizer):
    prompt = build_prompt(tokenizer, "cited", True, PASSAGES, "How is it durable?", budget_tokens=2000)
    assert prompt.passages_used == 3
    first, second, third = (prompt.text.index(f"[{n}]") for n in (1, 2, 3))
    assert first < second < third < prompt.text.index("Question: How is it durable?")
    assert prompt.text.index(system_prefix("cited", True)) < first
    assert PROMPT_VERSION


def test_every_prompt_starts_with_its_warm_up_prompt(tokenizer):
    """Prefix caching only helps if the prefilled warm-up text is a token prefix of real prompts."""
    warm = dict(zip(TASKS, warm_up_prompts(tokenizer, concise=True)))
    for task in TASKS:
        for question in ("short?", "a much longer question about the durability of the store and its indexes?"):
            text = build_prompt(tokenizer, task, True, PASSAGES, question, 2000).text
            assert text.startswith(warm[task])
            warm_ids = tokenizer.encode(warm[task], add_special_tokens=False)
            ids = tokenizer.encode(text, add_special_tokens=False)
            common = next((i for i, (a, b) in enumerate(zip(warm_ids, ids)) if a != b), len(warm_ids))
            assert common >= len(warm_ids) - 2, "the prefix must tokenise the same alone and in a prompt"


def test_budget_trims_passages_in_rank_order(tokenizer):
    small = build_prompt(tokenizer, "concise", False, PASSAGES, "q?", budget_tokens=60)
    none = build_prompt(tokenizer, "concise", False, PASSAGES, "q?", budget_tokens=10)
    full = build_prompt(tokenizer, "concise", False, PASSAGES, "q?", budget_tokens=5000)
    assert small.context_tokens <= 60 and small.passages_used < full.passages_used
    assert small.text.count("[1]") == 1 and "[3]" not in small.text
    assert none.passages_used == 0 and "(no passages found)" in none.text
    assert len(tokenizer.encode(small.text)) < len(tokenizer.encode(full.text))


def test_a_model_without_chat_template_gets_a_plain_layout(tokenizer):
    class Plain:
        chat_template = None

        def encode(self, text, add_special_tokens=False):
            return tokenizer.encode(text, add_special_tokens=add_special_tokens)

        def decode(self, ids):
            return tokenizer.decode(ids)

    text = build_prompt(Plain(), "cited", False, PASSAGES[:1], "Why?", 500).text
    assert text.startswith(system_prefix("cited", False)) and text.endswith("Question: Why?\nAnswer:")


def test_a_megabyte_passage_is_cut_before_it_is_tokenised(tokenizer):
    """A text without spaces is one chunk however long; tokenising it whole took ~1 s per MB."""
    seen = []

    class Watched:
        chat_template = tokenizer.chat_template

        def encode(self, text, add_special_tokens=False):
            seen.append(len(text))
            return tokenizer.encode(text, add_special_tokens=add_special_tokens)

        def __getattr__(self, name):
            return getattr(tokenizer, name)

    blob = Passage("", "x" * 1_000_000)
    prompt = build_prompt(Watched(), "cited", False, [blob, PASSAGES[0]], "q?", budget_tokens=300)
    assert max(seen) <= 300 * MAX_CHARS_PER_TOKEN
    assert prompt.passages_used == 1 and prompt.context_tokens <= 300 and "x ..." in prompt.text
    assert len(prompt.text) < 300 * MAX_CHARS_PER_TOKEN + 2000


def test_a_chinese_question_is_asked_for_a_chinese_answer_after_the_same_prefix(tokenizer):
    english = build_prompt(tokenizer, "cited", True, PASSAGES, "How is it durable?", 2000).text
    chinese = build_prompt(tokenizer, "cited", True, PASSAGES, "它为什么持久？", 2000).text
    prefix = warm_up_prompts(tokenizer, True)[0]
    assert chinese.startswith(prefix) and english.startswith(prefix)  # the cached prefix serves both
    assert "请用中文回答" in chinese and "请用中文回答" not in english
    assert chinese.index("它为什么持久") < chinese.index("请用中文回答")
