"""Answer scoring (appliance/evaluate/scoring.py): SQuAD's and CMRC's scorers on known cases, abstention, citations,
the flag rates, the summary's fields and the even sampler. Pure functions: no engine, no services."""
from __future__ import annotations

import pytest

from appliance.evaluate.scoring import (Answered, Gold, best_match, cmrc_f1, cmrc_normal, cmrc_segments, holds,
                                        sample, score, squad_f1, squad_tokens, summarise)


# ---------------------------------------------------------------- SQuAD

def test_squad_normalisation_drops_case_punctuation_and_articles():
    assert squad_tokens("The  Normans, an army!") == ["normans", "army"]
    assert squad_tokens("Ethelred's") == ["ethelreds"]  # punctuation is deleted, not a split


def test_squad_exact_match_and_f1_on_known_cases():
    assert best_match("The Normans", ["Normans"], chinese=False) == (1.0, True, True)
    # 5 tokens, 2 of them gold: precision 0.4, recall 1
    assert squad_f1("King Ethelred II of England", "Ethelred II") == pytest.approx(2 * 0.4 / 1.4)
    assert squad_f1("Seine", "Epte") == 0.0
    # max over the gold answers
    f1, em, contains = best_match("It was the Epte river.", ["Seine", "Epte"], chinese=False)
    assert f1 == pytest.approx(2 * 0.25 / 1.25) and not em and contains  # it was epte river: "the" dropped


def test_contains_gold_needs_whole_tokens():
    assert holds("They lived in Normandy.", "Normandy", chinese=False)
    assert not holds("They lived in Normandy.", "Norman", chinese=False)
    assert not holds("anything", "", chinese=False)


# ---------------------------------------------------------------- CMRC

def test_cmrc_segments_are_characters_and_words_without_punctuation():
    assert cmrc_segments("《战国无双3》由光荣和ω-force开发。") == \
        ["战", "国", "无", "双", "3", "由", "光", "荣", "和", "ω", "force", "开", "发"]
    assert cmrc_normal("光荣 和 ω-force。") == "光荣和ωforce"


def test_cmrc_f1_uses_the_longest_common_run():
    # prediction 9 segments, gold 5 (光 荣 和 ω force), all 5 in one run: precision 5/9, recall 1
    assert cmrc_f1("是由光荣和ω-force开发。", "光荣和ω-force") == pytest.approx(2 * (5 / 9) / (14 / 9))
    # scattered common characters do not add up: only one contiguous run counts
    assert cmrc_f1("甲乙丙丁", "甲丙") == pytest.approx(2 * 0.25 * 0.5 / 0.75)
    f1, em, contains = best_match("光荣和ω-force。", ["光荣和ω－force", "别的"], chinese=True)
    assert (f1, em, contains) == (1.0, True, True)


def test_cmrc_exact_match_is_false_for_a_sentence():
    f1, em, contains = best_match("答案是村雨城。", ["村雨城"], chinese=True)
    assert not em and contains and 0 < f1 < 1


# ---------------------------------------------------------------- rows and summary

def _answered(text: str, *, abstained: bool = False, cited: tuple[int, ...] = (), grounding: str = "supported",
              finish: str = "stop", ttft: float | None = 100.0) -> Answered:
    sources = (("p1", "Rollo led the Normans."), ("p2", "The Seine flows west."))
    return Answered(text, text, finish, abstained, sources, cited, grounding, ttft)


def test_unanswerable_scores_one_only_when_abstaining():
    gold = Gold((), answerable=False)
    assert score(_answered("", abstained=True, finish="not_covered"), gold, 0).f1 == 1.0
    assert score(_answered("Rollo."), gold, 0).f1 == 0.0
    assert score(_answered("Rollo.", abstained=True), Gold(("Rollo",)), 0).f1 == 0.0  # answerable: abstaining loses


def test_citation_right_by_gold_text_or_judged_document():
    by_text = score(_answered("Seine [2]", cited=(2,)), Gold(("Seine",)), 0)
    by_document = score(_answered("Rollo [1]", cited=(1,)), Gold(("Rollo the Walker",), relevant=frozenset({"p1"})), 0)
    wrong = score(_answered("Rollo [1]", cited=(1,)), Gold(("Paris",), relevant=frozenset({"p9"})), 0)
    out_of_range = score(_answered("x [7]", cited=(7,)), Gold(("Seine",)), 0)
    assert by_text.cited_right and by_document.cited_right and by_document.top_right
    assert wrong.cites and not wrong.cited_right and not out_of_range.cites


def _rows():
    answerable, unanswerable = Gold(("Seine",), relevant=frozenset({"p2"})), Gold((), answerable=False)
    cases = [
        (_answered("Seine [2]", cited=(2,)), answerable),  # right, cited right, supported
        (_answered("Rollo [1]", cited=(1,), grounding="unsupported"), answerable),  # wrong, flagged
        (_answered("The river is the Seine.", grounding="partly"), answerable),  # right (contains), flagged
        (_answered("no", abstained=True, finish="not_covered", grounding="not_checked", ttft=5.0), unanswerable),
        (_answered("Rollo", grounding="supported", finish="repetition"), unanswerable),  # answered: wrong
        (_answered("no", abstained=True, grounding="not_checked"), answerable),  # wrong abstention
    ]
    return [score(a, g, i) for i, (a, g) in enumerate(cases)]


def test_abstain_precision_and_recall():
    report = summarise(_rows(), wall_s=60.0, concurrency=8)
    assert report["abstain_precision"] == 0.5  # 2 abstained, 1 of them unanswerable
    assert report["abstain_recall"] == 0.5  # 2 unanswerable, 1 abstained on
    assert report["abstained"] == pytest.approx(2 / 6, abs=1e-4)


def test_citation_accuracy_flags_and_loops():
    report = summarise(_rows(), wall_s=60.0, concurrency=8)
    assert report["share_citing"] == pytest.approx(2 / 3, abs=1e-4)  # of the 3 answered answerable
    assert report["citation_accuracy"] == 0.5
    assert report["flagged_wrong"] == 1.0 and report["checked_wrong"] == 1
    assert report["flagged_right"] == 0.5 and report["checked_right"] == 2
    assert report["loops"] == pytest.approx(1 / 6, abs=1e-4)
    assert report["answers_per_min"] == 6.0 and report["ttft_p50_ms"] == 100.0


def test_summary_has_every_field():
    report = summarise(_rows(), wall_s=30.0, concurrency=4)
    for key in ("answers", "f1", "exact_match", "answerable_f1", "contains_gold", "abstain_precision",
                "abstain_recall", "citation_accuracy", "supported_share", "flagged_wrong", "flagged_right", "loops",
                "answers_per_min", "ttft_p50_ms", "ttft_p99_ms", "concurrency", "halves"):
        assert key in report, key
    assert report["halves"]["even"]["answers"] + report["halves"]["odd"]["answers"] == report["answers"]
    assert report["answerable_f1"] < report["contains_gold"]


def test_summary_of_an_all_answerable_set_has_no_abstention_figures():
    rows = [score(_answered("Seine"), Gold(("Seine",)), i) for i in range(3)]
    report = summarise(rows, wall_s=1.0, concurrency=1)
    assert report["abstain_recall"] is None and report["abstain_precision"] is None
    assert report["f1"] == 1.0 and report["citation_accuracy"] is None


# ---------------------------------------------------------------- sampling

def test_sampler_keeps_the_unanswerable_share_and_is_deterministic():
    kinds = [i % 4 != 1 for i in range(800)]  # 600 answerable, 200 unanswerable, interleaved
    chosen = sample(kinds, 40)
    assert len(chosen) == 40 and len(set(chosen)) == 40 and chosen == sorted(chosen)
    assert sum(not kinds[i] for i in chosen) == 10
    assert chosen == sample(kinds, 40)
    assert chosen[0] < 80 and chosen[-1] > 720  # spread over the whole file, not its start
    assert {i % 2 for i in chosen} == {0, 1}  # both held-out halves get questions
    assert sample(kinds, None) == list(range(800)) and sample(kinds, 5000) == list(range(800))


def test_sampler_small_limits_and_one_class():
    kinds = [True] * 600 + [False] * 200
    assert [kinds[i] for i in sample(kinds, 4)].count(False) == 1
    assert sample([True] * 10, 3) == [1, 5, 8]
