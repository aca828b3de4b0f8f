"""Follow-up turns of a conversation: does a question lean on the history, and a cheap standalone form of it.

The standalone-question stage asks `depends_on_history` first; a question that stands alone is searched as it is.
One that does not is rewritten by a small LLM or, as the cheap fallback, expanded with the salient terms of earlier
turns (`expand_question`), which is what BM25 and the embedder need: the missing topic words, not fluent prose.
`history_query` is the naive baseline (earlier turns glued on) that the expansion is measured against.

Detection is a rule set, not a model: pronouns and demonstratives that point back, elliptical openings
("what about X"), adverbs that presuppose a previous turn ("also", "instead"), and very short questions. The
rules skip the usual non-referential uses (dummy "it" in "is it possible to", existential "is there", relative
"that"), which are common in standalone questions. Everything is linear in the question's length.
"""
from __future__ import annotations

import re
import threading
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import jieba
import Stemmer

from .tokenize import CHINESE_STOP_WORDS, ENGLISH_STOP_WORDS

# A question with at most this many content words is taken to lean on the history ("why?", "and the cost?").
# 1, not 3: "what is photosynthesis" and "how do tornadoes form" are standalone (measured: bench/followup_probe.py).
SHORT_CONTENT_WORDS = 1
ASSISTANT_WEIGHT = 0.5  # an answer's words count half a question's: answers are long and drift off topic
# The opening question usually names the topic the later turns leave implicit ("types of sharks" ... "the largest
# ever?"): it weighs as much as the latest question however old it is (CAsT: 45% -> 59% of the words the human
# rewrites added are among the top 4 terms).
OPENING_WEIGHT = 1.0

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")  # "tittle's", "isn't" stay one token; the clitic is cut off later
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'"})
_CLITICS = frozenset("s t d ll re ve m".split())

# --- English cues ----------------------------------------------------------------------------------------------
_PRONOUNS = frozenset("it its itself they them their theirs themselves he she him her his hers himself herself "
                      "such ones another".split())
_DEMONSTRATIVES = frozenset("this that these those".split())
_BE = frozenset("is are was were be been being isn aren wasn weren".split())
_ELLIPSIS_WORDS = frozenset("also else instead either neither".split())
_ELLIPSIS_STARTS = (("what", "about"), ("how", "about"), ("and",), ("what", "else"), ("which", "one"), ("why", "not"),
                    ("how", "so"), ("then",), ("so", "what"), ("any", "other"), ("anything", "else"))
# Only when they end the question: "that too?", "tell me more", "did he tour after?".
_FINAL_WORDS = frozenset("too more then after afterwards before later again".split())
_SUPERLATIVE_AFTER = frozenset("ever in one among".split()) | {""}  # "the largest ever", "the biggest in the world"
# "is it possible to ...", "what is it like to ...", "how long does it take to ...": "it" points forward, not back.
_DUMMY_IT_PREDICATES = frozenset(
    "possible true like necessary safe ok okay important better best easy hard difficult legal illegal worth wise "
    "good bad normal common required mandatory advisable allowed mean take takes took cost costs matter matters "
    "okay likely unlikely appropriate acceptable dangerous healthy harmful recommended usual typical".split())
_TIME_NOUNS = frozenset("year years month months week weeks day days morning evening afternoon time season "
                        "century decade weekend summer winter spring autumn fall semester quarter".split())
_ONE_DETERMINERS = frozenset("which that this the other another each every first second last better best latter "
                             "former same".split())
# Words that carry no topic: they neither make a question self-contained nor belong in an expansion.
_FILLER = frozenset("""
tell know please explain describe thanks thank ok okay yes yeah yep hi hello well like want wanted need needs get
got mean happen happens happened thing things anything something everything nothing much many one ones also else
would could should shall may might must us let give say said make made go going way lot lots kind sort info
information detail details interesting important aspects aspect article instead either neither thing really still
ever even just sure right another other others use used using does done can cannot help find able already
course none set hey oh thankyou question questions answer regarding don doesn didn isn aren wasn haven hasn won
""".split())

# --- Chinese cues (jieba words: "应该", "其实", "尤其" are single words, so 该/其 alone are the pronouns) --------------
_ZH_REFERENCE = frozenset("它 他 她 它们 他们 她们 这 那 这个 那个 这些 那些 其 该 此 这里 那里 这儿 那儿 这样 那样 "
                          "这种 那种 这么 那么 其中 其他 其余 上述 前者 后者".split())
_ZH_ELLIPSIS = frozenset("还有 另外 此外 也 还 呢".split())
_ZH_FILLER = frozenset("什么 怎么 怎样 怎么样 如何 为什么 哪些 哪个 多少 是否 可以 能否 请问 知道 告诉 一下 需要 应该 "
                       "有没有 是不是 能不能 吗 呢 吧 谁 哪里 哪儿 几 多 时候".split())


@dataclass(slots=True, frozen=True)
class Turn:
    role: str  # "user" or "assistant"
    text: str


def depends_on_history(question: str) -> bool:
    """Whether the question needs the conversation before it to be understood. Whether there is any history at
    all is the caller's concern: a first turn that says "it" has nothing to lean on."""
    text = unicodedata.normalize("NFKC", question).translate(_APOSTROPHES)
    if _chinese_depends(text):
        return True
    words = _english_words(text.casefold())
    if words and (_english_reference(words) or _english_ellipsis(words)):
        return True
    content = _content_count(text)
    # "What is ketosis?" is one content word and standalone: a definition asks for its own topic.
    return content <= SHORT_CONTENT_WORDS and not (content and _definition(words))


def salient_terms(history: list[Turn], limit: int = 12) -> list[str]:
    """Content terms of earlier turns, most salient first: recent turns before old ones (and the opening question),
    a user's words before an assistant's, and a word said in several turns before one said once. Surface forms
    (as in the most recent turn), one per stem, so that "sharks" and "shark" do not both come back and the
    expansion reads as text."""
    scores: dict[str, float] = {}
    surface: dict[str, str] = {}
    opening = next((i for i, turn in enumerate(history) if turn.role == "user"), -1)
    age = 0
    for i in range(len(history) - 1, -1, -1):
        turn = history[i]
        weight = (1.0 if turn.role == "user" else ASSISTANT_WEIGHT) / (1 + age)
        if i == opening:
            weight = max(weight, OPENING_WEIGHT)
        for key, form in _unique_terms(turn.text):
            scores[key] = scores.get(key, 0.0) + weight
            surface.setdefault(key, form)
        if turn.role == "user":
            age += 1  # an answer belongs to the question before it: both are one exchange old
    ranked = sorted(scores, key=lambda key: -scores[key])  # stable: ties keep most-recent-first order
    return [surface[key] for key in ranked[:max(limit, 0)]]


def expand_question(question: str, history: list[Turn], limit: int = 12) -> str:
    """The question followed by the salient history terms it does not already contain: the standalone fallback."""
    present = {key for key, _ in _unique_terms(question)}
    extra = [form for form in salient_terms(history, limit + len(present)) if _key(form) not in present][:limit]
    return " ".join([question.strip(), *extra]) if extra else question.strip()


def history_query(question: str, history: list[Turn], max_turns: int | None = 3, answers: bool = False) -> str:
    """The baseline: the last `max_turns` earlier user turns (all with None; the assistant's turns too with
    `answers`) and the question, oldest first, in one string."""
    earlier = [t.text.strip() for t in history if (answers or t.role == "user") and t.text.strip()]
    kept = earlier if max_turns is None else earlier[-max_turns:] if max_turns > 0 else []
    return " ".join([*kept, question.strip()])


# --- detection -------------------------------------------------------------------------------------------------
def _english_words(folded: str) -> list[str]:
    """Lower-case words with clitics split off ("what's" -> "what", "s"), CJK runs left out."""
    words: list[str] = []
    for token in _WORD.findall(_CJK_RUN.sub(" ", folded)):
        words.extend(part for part in token.split("'") if part)
    return words


def _english_reference(words: list[str]) -> bool:
    """A pronoun or demonstrative that points back to something said before."""
    last = len(words) - 1
    long_at = words.index("long") if "long" in words else len(words)  # positions found once: linear time
    inner_from = _cataphora_start(words)
    for i, word in enumerate(words):
        before = words[i - 1] if i else ""
        after = words[i + 1] if i < last else ""
        if word in _PRONOUNS or word == "it":
            if not (word == "it" and _dummy_it(words, i, long_at < i)) and i <= inner_from:
                return True
        elif word in _DEMONSTRATIVES:
            if _pointing_demonstrative(word, before, after):
                return True
        elif word == "there":
            if before not in _BE and after not in _BE and after not in ("s", "any", "a", "an", "will", "must"):
                return True  # "live there", not "is there a way"
        elif word == "same" and before == "the":
            return True
        elif word == "one" and before in _ONE_DETERMINERS and (after in ("", "of") or after in _BE):
            return True
        elif word in ("other", "others") and before != "each" and after != "than":
            return True  # "did other members leave?": other than the ones just discussed
        elif before == "the" and _superlative(word) and after in _SUPERLATIVE_AFTER:
            return True  # "the largest ever": the largest what?
    return False


def _superlative(word: str) -> bool:
    return word in ("best", "worst", "most", "least") or (len(word) > 5 and word.endswith("est"))


def _definition(words: list[str]) -> bool:
    """"What is X?", "who was X?" without "the": a standalone request for a definition."""
    return len(words) > 2 and words[0] in ("what", "who") and words[1] in _BE and "the" not in words


def _cataphora_start(words: list[str]) -> int:
    """Where pronouns stop pointing back: after the "and" of "What is mortadella and where is it from?", whose
    pronoun's antecedent is earlier in the same question. The length of `words` when there is no such "and"."""
    if len(words) > 3 and words[0] in ("what", "who") and words[1] in _BE and "and" in words[3:]:
        conjunction = words.index("and", 3)
        if _PRONOUNS.isdisjoint(words[:conjunction]):
            return conjunction
    return len(words)


def _dummy_it(words: list[str], i: int, after_long: bool) -> bool:
    """'it' that points forward to a clause: "is it possible to", "how long does it take", "is it true that"."""
    ahead = words[i + 1:i + 4]
    if after_long and any(w in ("take", "takes", "took") for w in ahead):
        return True  # "how long does it take", not "when did it take place"
    for j, word in enumerate(ahead[:-1]):
        if word in _DUMMY_IT_PREDICATES and ahead[j + 1] in ("to", "that", "for", "if", "when", "being"):
            return True
    return False


def _pointing_demonstrative(word: str, before: str, after: str) -> bool:
    if after in _TIME_NOUNS:
        return False  # "this year": deictic in time, not a reference to an earlier turn
    if word == "that":
        # Relative or complement "that" ("the law that applies", "true that") follows a noun, verb or adjective;
        # the demonstrative ends the question or follows a wh-word, an auxiliary or a preposition.
        return after == "" or before in _THAT_BEFORE
    if word == "those" and after == "who":
        return False  # "those who qualify": generic
    return True


_THAT_BEFORE = frozenset("""
is are was were be been isn s does do did can could will would should about of for with in on to at from by like
than and but so after before why how what where when which who all into under over through
""".split()) | {""}


def _english_ellipsis(words: list[str]) -> bool:
    """An elliptical question: "what about X", "and the fees?", "that too?", "anything else?"."""
    for start in _ELLIPSIS_STARTS:
        if tuple(words[:len(start)]) == start:
            return True
    return any(w in _ELLIPSIS_WORDS for w in words) or words[-1] in _FINAL_WORDS


def _chinese_depends(text: str) -> bool:
    runs = _CJK_RUN.findall(text)
    if not runs:
        return False
    for run in runs:
        words = jieba.lcut(run)
        if any(w in _ZH_REFERENCE or w in _ZH_ELLIPSIS for w in words):
            return True
    return False


def _content_count(text: str) -> int:
    """Content words of a question: English words and jieba words that are neither stop nor filler words."""
    return sum(1 for _ in _unique_terms(text, keep_short=True))


# --- terms -----------------------------------------------------------------------------------------------------
_local = threading.local()  # PyStemmer objects are not thread-safe


def _key(form: str) -> str:
    """The deduplication key of a term: its English stem, or the Chinese word itself."""
    lower = form.casefold()
    return lower if _CJK_RUN.match(lower) else _stem(lower)


@lru_cache(maxsize=65_536)
def _stem(lower: str) -> str:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer.stemWord(lower)


def _unique_terms(text: str, keep_short: bool = False) -> list[tuple[str, str]]:
    """(key, surface form) of the text's content terms, first occurrence of each key, in text order."""
    seen: dict[str, str] = {}
    for form in _terms(text, keep_short):
        seen.setdefault(_key(form), form)
    return list(seen.items())


def _terms(text: str, keep_short: bool = False) -> list[str]:
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)
    terms: list[str] = []
    pos = 0
    for run in _CJK_RUN.finditer(text):
        terms.extend(_latin_terms(text[pos:run.start()], keep_short))
        terms.extend(w for w in jieba.lcut(run.group()) if _chinese_term(w, keep_short))
        pos = run.end()
    terms.extend(_latin_terms(text[pos:], keep_short))
    return terms


def _latin_terms(text: str, keep_short: bool) -> list[str]:
    out = []
    for token in _WORD.findall(text):
        parts = token.split("'")
        word = parts[0]
        if len(parts) > 1 and parts[-1].casefold() == "t":
            continue  # "isn't", "don't": function words
        lower = word.casefold()
        if lower in ENGLISH_STOP_WORDS or lower in _FILLER or lower in _CLITICS:
            continue
        if keep_short or len(word) >= 3 or (len(word) == 2 and word.isupper()):
            out.append(word)
    return out


def _chinese_term(word: str, keep_short: bool) -> bool:
    if word in CHINESE_STOP_WORDS or word in _ZH_FILLER or word in _ZH_REFERENCE or word in _ZH_ELLIPSIS:
        return False
    return keep_short or len(word) >= 2
