"""The answer check without an NLI model: sentences against passages, numbers and names, citations, refusals,
and the answers made of the passages' own sentences. Pure functions: no server, no model."""
from __future__ import annotations

import time

import pytest

from appliance.grounding import (LABELS, NOT_CHECKED, PARTLY, SUPPORTED, UNSUPPORTED, Grounding, SentenceGrounding,
                                 attach_citations, check_answer, cited_numbers, extractive_answer, says_not_covered,
                                 strip_citations, supporting_quotes, validate_citations)

BACKUP = [
    "The nightly backup of the customer database runs at 2 am and copies it to the Frankfurt data centre. "
    "Backup copies are encrypted and kept for 30 days.",
    "Alice Wong manages the backup system. Restores are tested every quarter by the operations team.",
    "Employees must change their passwords every 90 days. Passwords are never sent by email.",
]
BACKUP_ZH = [
    "公司的数据库备份在每天凌晨两点自动运行，备份文件保存在上海的数据中心。备份保留三十天。",
    "系统管理员张伟负责备份系统。运维团队每季度测试一次恢复流程。",
]
COMPANY = [
    "Acme Robotics was founded in Grenoble in 1987 by two engineers. It builds robots for warehouses.",
    "The company moved its headquarters to Lyon in 2004, after it bought a local sensor maker. "
    "Today the Lyon site employs 300 people and hosts the research lab.",
    "Its robots are sold in 14 countries. Most customers are retailers and parcel carriers.",
]


def sentence_labels(grounding: Grounding) -> list[str]:
    return [s.label for s in grounding.sentences]


def test_a_correct_cited_answer_is_supported_by_its_passage():
    g = check_answer("The nightly backup runs at 2 am and is copied to Frankfurt [1].", BACKUP, "When do backups run?")
    assert g.label == SUPPORTED
    assert g.passages == (1,)
    [s] = g.sentences
    assert s.text == "The nightly backup runs at 2 am and is copied to Frankfurt."
    assert s.passages[0] == 1 and s.score >= 0.75


def test_a_wrong_number_is_not_supported():
    g = check_answer("The backup runs at 3 am [1].", BACKUP)
    assert g.label in (PARTLY, UNSUPPORTED)
    assert check_answer("Backups are kept for 60 days.", BACKUP).label != SUPPORTED
    assert check_answer("Backups are kept for thirty days.", BACKUP).label == SUPPORTED  # the same number in words


def test_an_invented_name_is_not_supported():
    assert check_answer("Alice Wong manages the backup system [2].", BACKUP).label == SUPPORTED
    g = check_answer("John Smith manages the backup system [2].", BACKUP)
    assert g.label != SUPPORTED
    assert check_answer("The backup is copied to the Paris data centre.", BACKUP).label != SUPPORTED


def test_an_unrelated_answer_is_unsupported():
    g = check_answer("The cafeteria serves vegetarian lunch on Fridays. Parking permits cost 40 euros.", BACKUP)
    assert g.label == UNSUPPORTED
    assert sentence_labels(g) == [UNSUPPORTED, UNSUPPORTED]
    assert g.passages == () and all(s.passages == () for s in g.sentences)


def test_the_answer_label_follows_its_sentences():
    mixed = check_answer("Backups are kept for 30 days [1]. The cafeteria serves vegetarian lunch on Fridays.", BACKUP)
    assert sentence_labels(mixed) == [SUPPORTED, UNSUPPORTED] and mixed.label == PARTLY
    mostly_wrong = check_answer("Backups are kept for 30 days [1]. The cafeteria serves lunch on Fridays. "
                                "Parking permits cost 40 euros.", BACKUP)
    assert mostly_wrong.label == UNSUPPORTED  # more than half of what it says is not in the documents


def test_filler_sentences_are_not_checked():
    g = check_answer("Sure. Here is the answer:\n- Backups are kept for 30 days [1].", BACKUP)
    assert [s.text for s in g.sentences] == ["Backups are kept for 30 days."]
    assert g.label == SUPPORTED


def test_an_uncited_passage_can_support_and_a_cited_one_wins_ties():
    g = check_answer("Passwords must be changed every 90 days [1].", BACKUP)  # cites the wrong passage
    assert g.label == SUPPORTED and g.sentences[0].passages[0] == 3
    g = check_answer("Alice Wong manages backups, which are kept for 30 days.", BACKUP)  # two passages together
    assert g.label == SUPPORTED and set(g.sentences[0].passages[:2]) == {1, 2}


def test_a_short_extractive_answer_is_found_as_a_phrase():
    assert check_answer("1987", COMPANY).label == SUPPORTED
    assert check_answer("Grenoble", COMPANY).sentences[0].passages == (1,)
    assert check_answer("the research lab", COMPANY).label == SUPPORTED
    assert check_answer("1989", COMPANY).label == UNSUPPORTED


def test_repeating_the_question_does_not_support_an_answer():
    question = "Does the company offer a pension plan for contractors?"
    g = check_answer("The company offers a pension plan for contractors.", COMPANY, question)
    assert g.label != SUPPORTED


def test_invalid_citations_are_removed_and_the_sentence_still_checked():
    text, removed = validate_citations("Backups are kept for 30 days [7]. Alice Wong manages them [0][2].", 5)
    assert text == "Backups are kept for 30 days. Alice Wong manages them [2]."
    assert removed == (7, 0)
    assert validate_citations("See [1, 9] and [a] and [2,3].", 5) == ("See [1] and [a] and [2,3].", (9,))
    g = check_answer(validate_citations("Backups are kept for 30 days [7].", len(BACKUP))[0], BACKUP)
    assert g.label == SUPPORTED and g.passages == (1,)


def test_citation_marks_are_read_in_all_their_forms():
    text = "Backups run at 2 am [1][3]. They are encrypted [2, 1]. Other [x] and [1000] are not citations."
    assert cited_numbers(text) == [1, 3, 2]
    assert strip_citations(text) == "Backups run at 2 am. They are encrypted. Other [x] and [1000] are not citations."
    g = check_answer("Backups are encrypted.[1] Restores are tested every quarter.[2]", BACKUP)
    assert sentence_labels(g) == [SUPPORTED, SUPPORTED] and g.passages == (1, 2)


def test_an_uncited_supported_answer_gets_citations_attached():
    answer = "The backup runs at 2 am. Restores are tested every quarter.\nThe cafeteria opens at 8."
    g = check_answer(answer, BACKUP)
    assert attach_citations(answer, g) == \
        "The backup runs at 2 am [1]. Restores are tested every quarter [2].\nThe cafeteria opens at 8."
    cited = "The backup runs at 2 am [1]."
    assert attach_citations(cited, check_answer(cited, BACKUP)) == cited  # already cites: left as it is
    zh = "数据库备份每天凌晨两点运行。"
    assert attach_citations(zh, check_answer(zh, BACKUP_ZH)) == "数据库备份每天凌晨两点运行[1]。"


@pytest.mark.parametrize("refusal", [
    "The documents do not cover this question.",
    "The provided passages do not mention who approves the budget.",
    "I cannot find the answer in the documents.",
    "There is no information about parking in the context.",
    "Sorry, the information is not mentioned in the provided documents.",
    "文档中没有提到停车费用。",
    "根据提供的资料，无法回答这个问题。",
    "资料未提及该公司的创始人。",
])
def test_a_refusal_is_not_checked(refusal):
    assert says_not_covered(refusal)
    g = check_answer(refusal, BACKUP)
    assert g.label == NOT_CHECKED and g.sentences == ()


@pytest.mark.parametrize("answer", [
    "The backup runs at 2 am [1].",
    "Passwords are never sent by email, and the backup policy does not cover laptops.",
    "Alice Wong manages the backup system.",
    "备份保留三十天[1]。",
    "",
])
def test_an_answer_is_not_a_refusal(answer):
    assert not says_not_covered(answer)


def test_a_refusal_among_claims_is_not_graded_as_a_claim():
    g = check_answer("Backups are kept for 30 days [1]. The documents do not say who restores them.", BACKUP)
    assert g.label == SUPPORTED and [s.text for s in g.sentences] == ["Backups are kept for 30 days."]


def test_chinese_answers_are_checked_by_characters():
    g = check_answer("数据库备份每天凌晨两点运行[1]。", BACKUP_ZH)
    assert g.label == SUPPORTED and g.passages == (1,)
    assert check_answer("张伟负责备份系统。", BACKUP_ZH).label == SUPPORTED
    assert check_answer("备份保留30天。", BACKUP_ZH).label == SUPPORTED  # 三十 and 30 are one number
    assert check_answer("数据库备份每天凌晨三点运行[1]。", BACKUP_ZH).label != SUPPORTED
    assert check_answer("备份文件保存在北京的数据中心。", BACKUP_ZH).label != SUPPORTED  # a place not in it
    assert check_answer("李明负责备份系统。", BACKUP_ZH).label != SUPPORTED  # a person not in it
    assert check_answer("员工食堂每周五供应素食午餐。", BACKUP_ZH).label == UNSUPPORTED


def test_no_passages_or_no_content_is_not_checked():
    assert check_answer("The backup runs at 2 am.", []).label == NOT_CHECKED
    assert check_answer("", BACKUP).label == NOT_CHECKED
    assert check_answer("Sure! Here you go:", BACKUP).label == NOT_CHECKED


def test_grounding_serialises_to_plain_data():
    g = check_answer("The backup runs at 2 am [1].", BACKUP)
    data = g.to_json()
    assert data["label"] == SUPPORTED and data["passages"] == [1]
    assert data["sentences"] == [{"text": "The backup runs at 2 am.", "label": SUPPORTED, "passages": [1],
                                  "score": g.sentences[0].score}]
    assert set(LABELS) == {SUPPORTED, PARTLY, UNSUPPORTED, NOT_CHECKED}


def test_extractive_answer_picks_the_sentence_holding_the_answer():
    found = extractive_answer("In which year did the company move its headquarters to Lyon?", COMPANY, max_sentences=1)
    assert found.text.startswith("The company moved its headquarters to Lyon in 2004")
    assert found.text.endswith(" [2]") and found.passages == (2,)
    found = extractive_answer("Where was Acme Robotics founded?", COMPANY, max_sentences=1)
    assert "Grenoble" in found.text and found.passages == (1,)
    found = extractive_answer("How many people work at the Lyon site?", COMPANY)
    assert "300 people" in found.text and 2 in found.passages
    assert check_answer(found.text, COMPANY).label == SUPPORTED  # its own sentences, so supported


def test_extractive_answer_in_chinese():
    found = extractive_answer("谁负责备份系统？", BACKUP_ZH, max_sentences=1)
    assert found.text == "系统管理员张伟负责备份系统。[2]" and found.passages == (2,)
    found = extractive_answer("备份保留多少天？", BACKUP_ZH, max_sentences=1)
    assert found.text == "备份保留三十天。[1]"
    two = extractive_answer("备份保留多少天？谁负责备份？", BACKUP_ZH)
    assert two.passages == (1, 2) and two.text.endswith("[2]")  # in passage order


def test_extractive_answer_without_overlap_is_empty():
    found = extractive_answer("What is the cafeteria menu?", BACKUP)
    assert found.text == "" and found.passages == ()
    assert extractive_answer("When do backups run?", []).text == ""


def test_extractive_answer_respects_its_length_limit():
    long_passage = ["Backups " + "run nightly and are verified " * 60 + "at 2 am."]
    found = extractive_answer("When do backups run?", long_passage, max_chars=200)
    assert len(found.text) <= 210 and found.text.endswith("… [1]")


def test_supporting_quotes_cite_the_passages_closest_to_the_answer():
    g = check_answer("Backups are kept for 60 days and tested every quarter.", BACKUP)
    quoted = supporting_quotes(g, BACKUP)
    assert '"Backup copies are encrypted and kept for 30 days." [1]' in quoted
    assert '"Restores are tested every quarter by the operations team." [2]' in quoted
    assert check_answer(quoted, BACKUP).label == SUPPORTED
    nothing = check_answer("The cafeteria serves vegetarian lunch.", BACKUP)
    assert supporting_quotes(nothing, BACKUP) == ""
    by_question = supporting_quotes(nothing, BACKUP, question="Who manages the backup system?")
    assert by_question.startswith('"Alice Wong manages the backup system." [2]')
    invented = check_answer("The restore robot was built in Norway in 1962.", BACKUP)
    assert invented.label == UNSUPPORTED  # shares one word: the closest sentence is quoted all the same
    assert supporting_quotes(invented, BACKUP) == '"Restores are tested every quarter by the operations team." [2]'


def test_a_typical_answer_is_checked_in_milliseconds():
    sentences = [f"Backup job {i} copies the customer database to the Frankfurt data centre at {i % 12 + 1} am "
                 f"and keeps each encrypted copy for {30 + i} days before deletion." for i in range(20)]
    passages = [" ".join(sentences[i::5])[:2000] for i in range(5)]
    answer = " ".join(f"{s} [{i % 5 + 1}]" for i, s in enumerate(sentences[:8]))
    assert 180 <= len(answer.split()) <= 240
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        g = check_answer(answer, passages)
        timings.append(time.perf_counter() - started)
    assert g.label == SUPPORTED
    assert sorted(timings)[len(timings) // 2] < 0.005


@pytest.mark.parametrize("hostile", [
    "[" * 65536, "a." * 50000, "a. " * 33000, "!" * 100_000 + "a", "[1," * 30000, " " * 100_000 + "x",
    "1." * 50000, "一" * 100_000, "Alice " * 16000, "[1]" * 30000, "e.g. " * 20000, "\n- " * 30000,
    "The documents do not " * 5000,
], ids=lambda h: repr(h[:6]))
def test_hostile_text_is_handled_fast(hostile):
    started = time.perf_counter()
    g = check_answer(hostile, [hostile, "x"])
    validate_citations(hostile, 5)
    strip_citations(hostile)
    cited_numbers(hostile)
    says_not_covered(hostile)
    attach_citations(hostile, g)
    supporting_quotes(g, [hostile[:20000]])
    extractive_answer(hostile[:2000], [hostile])
    assert g.label in LABELS
    # a complexity guard, not a speed figure: a quadratic path over ~100k characters takes minutes, these take
    # ~0.5 s alone and over 1 s on a box busy packing the test packages
    assert time.perf_counter() - started < 5.0


def test_sentence_grounding_is_frozen():
    s = SentenceGrounding("x", SUPPORTED, (1,), 1.0)
    with pytest.raises(AttributeError):
        s.label = PARTLY  # type: ignore[misc]
