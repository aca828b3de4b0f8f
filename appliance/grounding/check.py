"""Every answer checked against its passages, without an NLI model: each sentence's content terms looked up in the
passages, its numbers and names required to appear, its citations preferred.

A sentence is `supported` when one passage (or, failing that, its two best passages together) covers at least
SUPPORTED_AT of its content terms and every number and name in it appears in its supporting passages (Chinese has
no capitals: there, two adjacent content characters both absent from them are a new word, as a name would be);
`partly` when its best passage covers at least PARTLY_AT, or when the words are there but a number or name is not;
else `unsupported`. A short sentence ("1998", "the Normans") found as a phrase in a passage is supported.

The answer is `not_checked` with no passages, no sentence with content, or when it declines (`refusal.py`);
`supported` when every sentence is; `unsupported` when more than half of its sentences are (what it mostly says
is not in the documents); else `partly`.
"""
from __future__ import annotations

from collections.abc import Sequence

from .labels import NOT_CHECKED, PARTLY, SUPPORTED, UNSUPPORTED, Grounding, SentenceGrounding
from .refusal import is_refusal
from .sentences import Piece, citation_mark, cited_numbers, insertion_point, split_sentences
from .terms import BIGRAM_WEIGHT, PassageTerms, Terms, passage_terms, sentence_terms

SUPPORTED_AT = 0.75  # three content words in four: a paraphrase keeps that many, an invention rarely does
PARTLY_AT = 0.4  # below this the passage shares only the topic's common words with the sentence
CITED_BONUS = 0.05  # a cited passage wins a near tie: the model said where it read it


def check_answer(answer: str, passages: Sequence[str], question: str = "") -> Grounding:
    """Check `answer` against `passages` (numbered from 1 as cited). `question` is never evidence: an answer that
    only repeats the question must find its words in the passages like any other."""
    del question  # part of the signature for callers; see the docstring
    if not passages or not answer.strip():
        return Grounding(NOT_CHECKED, (), ())
    index = [passage_terms(p) for p in passages]
    graded: list[SentenceGrounding] = []
    refused = None
    for piece in split_sentences(answer):
        terms = sentence_terms(piece.text)
        if terms.empty:
            continue
        refusal = is_refusal(piece.text)
        refused = refusal if refused is None else refused  # the first sentence with content decides
        if not refusal:
            graded.append(grade(piece, terms, index))
    used = tuple(dict.fromkeys(n for s in graded if s.label != UNSUPPORTED for n in s.passages))
    label = NOT_CHECKED if refused or not graded else answer_label([s.label for s in graded])
    return Grounding(label, used, tuple(graded))


def answer_label(labels: list[str]) -> str:
    if all(label == SUPPORTED for label in labels):
        return SUPPORTED
    if 2 * labels.count(UNSUPPORTED) > len(labels):
        return UNSUPPORTED
    return PARTLY


def grade(piece: Piece, terms: Terms, index: list[PassageTerms]) -> SentenceGrounding:
    """One sentence against every passage: cited ones win near ties, an uncited one may still support it."""
    cited = {n - 1 for n in piece.cited}
    scores = [p.covered(terms) for p in index]
    ranked = sorted(range(len(index)), key=lambda i: (-(scores[i] + CITED_BONUS * (i in cited)), i))
    if terms.phrase and (found := [i for i in ranked if index[i].holds_phrase(terms.phrase)]):
        return SentenceGrounding(piece.text, SUPPORTED, tuple(i + 1 for i in found), 1.0)
    best = ranked[0]
    support = [i for i in ranked if scores[i] >= PARTLY_AT] or [best]
    label = _label(terms, scores[best], [index[i] for i in support[:1]])
    if label != SUPPORTED and len(support) > 1:  # a sentence joining two passages' facts
        label = max(label, _label(terms, _joint(terms, index[support[0]], index[support[1]]),
                                  [index[i] for i in support[:2]]), key=_RANK.__getitem__)
    passages = tuple(i + 1 for i in support) if label != UNSUPPORTED else ()
    return SentenceGrounding(piece.text, label, passages, round(scores[best], 3))


_RANK = {UNSUPPORTED: 0, PARTLY: 1, SUPPORTED: 2}


def _label(terms: Terms, score: float, support: list[PassageTerms]) -> str:
    missing = [f for f in terms.facts if not any(f in p.words for p in support)]
    missing += [b for b in terms.bigrams if all(b[0] not in p.words and b[1] not in p.words for p in support)]
    if score >= SUPPORTED_AT and not missing:
        return SUPPORTED
    return PARTLY if score >= PARTLY_AT else UNSUPPORTED


def _joint(terms: Terms, a: PassageTerms, b: PassageTerms) -> float:
    words = (terms.words & a.words) | (terms.words & b.words)
    bigrams = (terms.bigrams & a.bigrams) | (terms.bigrams & b.bigrams)
    return (len(words) + BIGRAM_WEIGHT * len(bigrams)) / terms.weight


def attach_citations(answer: str, grounding: Grounding) -> str:
    """An answer that cites nothing gets, at the end of each supported or partly supported sentence, " [n]" of the
    passage that supports it best; the text is otherwise left as it is."""
    if cited_numbers(answer) or not grounding.passages:
        return answer
    todo = grounding.sentences  # in the answer's order: matched against its sentences one after the other
    at_sentence = 0
    inserts: list[tuple[int, str]] = []
    for piece in split_sentences(answer):
        if at_sentence == len(todo) or piece.text != todo[at_sentence].text:
            continue
        sentence = todo[at_sentence]
        at_sentence += 1
        if sentence.label != UNSUPPORTED and sentence.passages:
            at = insertion_point(answer, piece)
            inserts.append((at, citation_mark(answer, at, sentence.passages[0])))
    for at, mark in reversed(inserts):
        answer = answer[:at] + mark + answer[at:]
    return answer
