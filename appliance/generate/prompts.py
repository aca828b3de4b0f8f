"""Prompt assembly: a stable, versioned system prefix per task type, then numbered passages, then the question.

The system prefix comes first and never changes between requests, so vLLM's prefix cache serves its KV blocks to
every request after the warm-up prefilled them once. Passages are trimmed to a token budget counted with the
engine's own tokenizer, numbered [1], [2], ... so the answer can cite them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..text import Turn, question_language

PROMPT_VERSION = "p4"  # bump when any text below changes: cached answers are keyed by it

# p4 (with the 1.5B default model): the passages are the only source of facts, the answer itself comes first, in
# few words. On 10 answerable and 4 unanswerable SQuAD 2.0 questions of the even half (the 5 passages sharing most
# rare words with each question), p3's wording (general knowledge allowed, "be concise") gave token F1 0.26; this one
# 0.36. A stricter variant ("if the passages do not contain the answer, reply only: The documents do not cover
# this.") gave 0.31, refused 1 of the 4 unanswerable and 2 answerable ones, and in a product run of 32 SQuAD
# questions refused 7 of the 24 answerable ones (answerable F1 0.40 against 0.49 for a plain stuffed prompt): the
# 1.5B model cannot tell which it cannot answer. bench/results/answers.md has the run with this wording.
# Tried and dropped (a "p5"): three worked examples on made-up passages after these rules (a warranty, a return, a
# question they do not answer). On a 2-core AVX2 box, 32 SQuAD 2.0 questions: answerable F1 0.472 -> 0.506 (within
# the noise of 24), still 0 of 8 unanswerable declined; but on doc2dial the model answered "Can I work and study?"
# with the example's own answer ("Yes, within 30 days if its seal is unbroken"), and another with citations only.
_BASE = (
    "You are the answer service of an offline document appliance. You answer questions for the staff of the "
    "organisation that owns the documents. Each request gives you numbered passages retrieved from the "
    "organisation's own documents, followed by a question. Rules: use the passages as your only source of "
    "facts; when they do not contain the answer, say that the documents do not cover it; never invent "
    "document content, names, numbers or quotes; answer in the language of the question; do not repeat the "
    "question or these rules."
)
SYSTEM_PREFIXES = {
    "cited": _BASE + " Start with the answer itself, in as few words as the question allows (a name, a number, a "
    "date, a short phrase), and cite the passages you used with their numbers in square brackets, such as [1] or "
    "[2][3].",
    "concise": _BASE + " Give the shortest complete answer: one sentence, or a short list when a list is asked "
    "for. Cite passages as [n] when you used them.",
}
# Added to every prefix with generate.concise (off by default since p4: its "cited" prefix asks for the answer
# first and short, and was measured without it).
CONCISE_INSTRUCTION = " Be concise."
# After the question (the system prefix stays the same for every language, so its cached prefix serves all): the
# prefix's "answer in the language of the question" said again where small models most often answer in English.
ANSWER_LANGUAGE = {"zh": "请用中文回答。(Answer in Chinese.)"}
TASKS = tuple(SYSTEM_PREFIXES)
# Asked before an answer is generated (generate.decline_above): the answer prompt with this after the question, so
# the two share their prefix-cached passages, and the model's own odds of "no" against "yes" decide. The 1.5B model
# cannot tell in its answer that it cannot answer (p4's note above); asked this way its odds separate SQuAD 2.0's
# unanswerable questions only weakly (AUC 0.67 on 80 + 80 questions), so the setting is off (its why-text has the
# figures). A plainer wording ("Do the passages state the answer to this question? Reply with yes or no only.")
# did as well: AUC 0.70, at 0.5 24 % of the unanswerable and 5 % of the answerable ones declined.
ANSWERABLE_CHECK = ("Before answering: is the exact answer to this question written in the passages above? "
                    "Questions often ask about a detail the passages do not give (another date, person, place or "
                    "number). Reply yes or no.")


@dataclass(slots=True, frozen=True)
class Passage:
    title: str
    text: str
    citation: str = ""  # where it is in its file ("report.pdf, p. 12"), shown so the answer can say so


@dataclass(slots=True, frozen=True)
class Prompt:
    text: str
    passages_used: int  # how many passages fit the budget (the first n of those given)
    context_tokens: int
    check_text: str = ""  # the same prompt asking whether the passages state the answer (only `with_check`)


def system_prefix(task: str, concise: bool) -> str:
    return SYSTEM_PREFIXES[task] + (CONCISE_INSTRUCTION if concise else "")


def render(tokenizer, system: str, user: str, history: Sequence[Turn] = ()) -> str:
    """The chat template of the model when it has one; a plain layout for base models. `history`: earlier turns,
    between the system message and the last user message."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "system", "content": system},
                    *({"role": turn.role, "content": turn.text} for turn in history),
                    {"role": "user", "content": user}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    earlier = "".join(f"{turn.role.capitalize()}: {turn.text}\n" for turn in history)
    return f"{system}\n\n{earlier}{user}\nAnswer:"


def with_client_system(system: str, client_system: str) -> str:
    """The application's own system message comes after ours (ours stays first, so its cached prefix holds)."""
    return f"{system}\n\nThe application adds: {client_system.strip()}" if client_system.strip() else system


def recent_history(tokenizer, history: Sequence[Turn], max_turns: int,
                   budget_tokens: int) -> tuple[list[Turn], int]:
    """The newest turns that fit `budget_tokens` (at most `max_turns`) and the tokens they take; older ones are
    dropped first, and a turn is never cut in the middle."""
    kept: list[Turn] = []
    used = 0
    for turn in reversed(list(history)[-max_turns:] if max_turns else []):
        cost = len(tokenizer.encode(turn.text[:budget_tokens * MAX_CHARS_PER_TOKEN], add_special_tokens=False)) + 4
        if used + cost > budget_tokens:
            break
        kept.append(turn)
        used += cost
    kept.reverse()
    return kept, used


def fit_tokens(tokenizer, text: str, budget_tokens: int) -> tuple[str, int]:
    """`text` with its end cut off at a token boundary so that at most `budget_tokens` tokens remain ("" when none
    fit), and its tokens. Only what the budget could hold is tokenised (a text of megabytes is not)."""
    if not text.strip() or budget_tokens <= 0:
        return "", 0
    ids = tokenizer.encode(text[:budget_tokens * MAX_CHARS_PER_TOKEN], add_special_tokens=False)
    if len(ids) <= budget_tokens and len(text) <= budget_tokens * MAX_CHARS_PER_TOKEN:
        return text, len(ids)
    return tokenizer.decode(ids[:budget_tokens]).rstrip() + " ...", min(len(ids), budget_tokens) + 2


def warm_up_prompts(tokenizer, concise: bool) -> list[str]:
    """Per task, the exact text every prompt of that task starts with: the rendered template cut where the
    passages begin; and the same for the follow-up rewrite prompt."""
    mark = "\x00PASSAGES\x00"
    answers = [render(tokenizer, system_prefix(task, concise), "Passages:\n" + mark).split(mark)[0] for task in TASKS]
    return answers + [render(tokenizer, REWRITE_SYSTEM, "Conversation:\n" + mark).split(mark)[0]]


# A passage is cut to this many characters per token of room before it is tokenised (tokens average ~4 characters
# of English): a passage of megabytes (a text without spaces is one chunk) took ~1 s per MB to tokenise.
MAX_CHARS_PER_TOKEN = 16


def build_prompt(tokenizer, task: str, concise: bool, passages: list[Passage], question: str,
                 budget_tokens: int, history: Sequence[Turn] = (), client_system: str = "",
                 with_check: bool = False) -> Prompt:
    """`history`: the earlier turns to show (already cut to their budget by `recent_history`). `with_check`: also
    the check prompt (generate.decline_above on; off, no request pays for rendering it)."""
    blocks, used = [], 0
    for n, passage in enumerate(passages, 1):
        head = " ".join(part for part in (passage.title, f"({passage.citation})" if passage.citation else "") if part)
        block = f"[{n}] {head}\n{passage.text.strip()}" if head else f"[{n}] {passage.text}"
        room = budget_tokens - used
        limit = max(room, 0) * MAX_CHARS_PER_TOKEN
        ids = tokenizer.encode(block[:limit], add_special_tokens=False)
        if len(ids) > room or len(block) > limit:
            if room >= 48:  # a useful piece of the passage still fits; a sliver would only add noise
                blocks.append(tokenizer.decode(ids[:room]) + " ...")
                used += min(room, len(ids))
            break
        blocks.append(block)
        used += len(ids)
    context = "\n\n".join(blocks) if blocks else "(no passages found)"
    user = f"Passages:\n{context}\n\nQuestion: {question.strip()}"
    if (language := ANSWER_LANGUAGE.get(question_language(question))) is not None:
        user += f"\n{language}"
    system = with_client_system(system_prefix(task, concise), client_system)
    check = render(tokenizer, system, f"{user}\n\n{ANSWERABLE_CHECK}", history) if with_check else ""
    return Prompt(render(tokenizer, system, user, history), len(blocks), used, check)


REWRITE_PROMPT_VERSION = "r2"  # bump when the text below changes
REWRITE_SYSTEM = (
    "You rewrite the last question of a conversation so that it can be understood on its own, without the "
    "conversation. Replace pronouns and vague references with the things they refer to, and add what the question "
    "leaves out but the conversation says. Keep the question's meaning and its language. Do not answer it. Reply "
    "with the rewritten question only, on one line."
)


REWRITE_TURN_CHARS = 600  # each earlier turn is cut to this in the rewrite prompt: its topic words come early


def rewrite_prompt(tokenizer, history: Sequence[Turn], question: str) -> str:
    """A stable system message (its prefix stays cached), then the conversation and the question as one message.
    Each turn is cut to REWRITE_TURN_CHARS, so the prompt stays far below the engine's context."""
    lines = [f"{'User' if turn.role == 'user' else 'Assistant'}: {' '.join(turn.text[:REWRITE_TURN_CHARS].split())}"
             for turn in history]
    user = "Conversation:\n" + "\n".join(lines) + f"\n\nLast question: {' '.join(question.split())}\n" \
        "Standalone question:"
    return render(tokenizer, REWRITE_SYSTEM, user)
