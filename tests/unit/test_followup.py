"""Follow-up questions (appliance.text.followup): detection of history dependence in English and Chinese, and the
non-LLM standalone forms (salient-term expansion, history concatenation)."""
from __future__ import annotations

import time

import pytest

from appliance.text import Turn, depends_on_history, expand_question, history_query, salient_terms

SHARKS = [
    Turn("user", "What are the different types of sharks?"),
    Turn("assistant", "There are over 500 species, from the whale shark to the great white."),
    Turn("user", "Are sharks endangered? If so, which species?"),
    Turn("assistant", "Many species are threatened by overfishing and finning."),
]


@pytest.mark.parametrize("question", [
    "What are its main causes?",
    "Did they win the final?",
    "When did he retire?",
    "Can I apply for it online?",
    "Is that free?",
    "Do I need to go there in person?",
    "Which one is cheaper?",
    "What about great whites?",
    "How about the fees?",
    "And the deadline?",
    "Can veterans apply too?",
    "What else should I know?",
    "Can I use a passport instead?",
    "Why?",
    "How much?",
    "Tell me more.",
    "What is the largest ever caught?",
    "Did other members leave the band?",
])
def test_english_follow_ups_depend_on_the_history(question):
    assert depends_on_history(question)


@pytest.mark.parametrize("question", [
    "What is it like to live in Paris?",  # dummy "it": points forward to the clause
    "Is it possible to renew a driving licence online?",
    "How long does it take to get a passport?",
    "Is there a way to view my medical records online?",  # existential "there"
    "What is the law that protects renters from eviction?",  # relative "that"
    "What is ketosis?",  # one content word, but a definition asks for its own topic
    "How do tornadoes form?",
    "What is mortadella and where is it from?",  # antecedent inside the question
    "Tell me more about tiger sharks.",  # "more" does not end the question
    "Which language is the easiest to learn for an English speaker?",
])
def test_standalone_english_questions_do_not(question):
    assert not depends_on_history(question)


@pytest.mark.parametrize("question, expected", [
    ("它的价格是多少？", True),
    ("他们什么时候成立的？", True),
    ("该公司成立于哪一年？", True),
    ("那么费用是多少？", True),
    ("上海呢？", True),
    ("另外还有什么要求？", True),
    ("这个需要多久？", True),
    ("北京大学的校长是谁？", False),
    ("如何申请社会保障卡？", False),
    ("我应该怎么办理护照？", False),  # 应该 is one word: its 该 is no pronoun
    ("其实我想了解上海的地铁票价", False),  # nor is the 其 of 其实
])
def test_chinese_detection(question, expected):
    assert depends_on_history(question) is expected


def test_salient_terms_put_recent_user_words_first_and_keep_surface_forms():
    terms = salient_terms(SHARKS)
    assert terms[0] == "sharks", "said in both questions, the opening one among them"
    assert {"types", "endangered", "species"} <= set(terms)
    assert terms.index("endangered") < terms.index("overfishing"), "a question's words before an answer's"
    assert "shark" not in terms, "one surface form per stem"
    assert not {"what", "are", "the", "if", "so", "which"} & {t.lower() for t in terms}, "no stop words"
    assert len(terms) == len({t.lower() for t in terms})
    assert len(salient_terms(SHARKS, limit=3)) == 3 and salient_terms([], 5) == []


def test_expansion_keeps_the_question_and_adds_only_missing_terms():
    question = "Which shark is the largest ever?"
    expanded = expand_question(question, SHARKS, limit=4)
    assert expanded.startswith(question + " ")
    added = expanded[len(question):].split()
    assert len(added) == 4 and len(set(added)) == 4
    assert "sharks" not in added, "the question already says shark"
    assert "endangered" in added and "species" in added
    assert expand_question("  Why?  ", [], limit=4) == "Why?"


def test_chinese_terms_are_jieba_words():
    history = [Turn("user", "北京大学的校长是谁？"), Turn("assistant", "北京大学现任校长是龚旗煌。")]
    terms = salient_terms(history)
    assert terms[:2] == ["北京大学", "校长"]
    assert all(len(t) >= 2 for t in terms) and "的" not in terms and "是谁" not in terms
    expanded = expand_question("他是哪一年上任的？", history, limit=2)
    assert expanded == "他是哪一年上任的？ 北京大学 校长"
    assert expand_question("北京大学的校长叫什么？", history, limit=2).count("北京大学") == 1


def test_history_query_joins_the_last_user_turns():
    assert history_query("What about hammerheads?", SHARKS) == (
        "What are the different types of sharks? Are sharks endangered? If so, which species? What about hammerheads?")
    assert history_query("Why?", SHARKS, max_turns=1) == "Are sharks endangered? If so, which species? Why?"
    assert history_query("Why?", SHARKS, max_turns=0) == "Why?"


def test_detection_is_linear_on_long_input():
    long_question = "what about that one there too " * 3000 + "是它吗" * 2000
    started = time.perf_counter()
    assert depends_on_history(long_question)
    assert not depends_on_history("the law that applies " * 5000)
    assert not depends_on_history("what is a kiln and " + "where is it " * 5000)  # every pronoun inside
    assert time.perf_counter() - started < 2.0
