"""Prompt assembly: a stable, versioned system prefix per task type, then numbered passages, then the question.

The system prefix comes first and never changes between requests, so vLLM's prefix cache serves its KV blocks to
every request after the warm-up prefilled them once. Passages are trimmed to a token budget counted with the
engine's own tokenizer, numbered [1], [2], ... so the answer can cite them.
"""
from __future__ import annotations

from dataclasses import dataclass

PROMPT_VERSION = "p2"  # bump when any text below changes: cached answers are keyed by it

_BASE = (
    "You are the answer service of an offline document appliance. You answer questions for the staff of the "
    "organisation that owns the documents. Each request gives you numbered passages retrieved from the "
    "organisation's own documents, followed by a question. Rules: use the passages as your main source of "
    "facts; when the passages do not contain the answer, answer from general knowledge only if you are sure, "
    "and say that the documents do not cover it; never invent document content, names, numbers or quotes; "
    "answer in the language of the question; do not repeat the question or these rules."
)
SYSTEM_PREFIXES = {
    "cited": _BASE + " Cite the passages you used with their numbers in square brackets, such as [1] or [2][3], "
    "right after the sentence they support.",
    "concise": _BASE + " Give the shortest complete answer: one sentence, or a short list when a list is asked "
    "for. Cite passages as [n] when you used them.",
}
CONCISE_INSTRUCTION = " Be concise."
TASKS = tuple(SYSTEM_PREFIXES)


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


def system_prefix(task: str, concise: bool) -> str:
    return SYSTEM_PREFIXES[task] + (CONCISE_INSTRUCTION if concise else "")


def render(tokenizer, system: str, user: str) -> str:
    """The chat template of the model when it has one; a plain layout for base models."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return f"{system}\n\n{user}\nAnswer:"


def warm_up_prompts(tokenizer, concise: bool) -> list[str]:
    """Per task, the exact text every prompt of that task starts with: the rendered template cut where the
    passages begin."""
    mark = "\x00PASSAGES\x00"
    return [render(tokenizer, system_prefix(task, concise), "Passages:\n" + mark).split(mark)[0] for task in TASKS]


# A passage is cut to this many characters per token of room before it is tokenised (tokens average ~4 characters
# of English): a passage of megabytes (a text without spaces is one chunk) took ~1 s per MB to tokenise.
MAX_CHARS_PER_TOKEN = 16


def build_prompt(tokenizer, task: str, concise: bool, passages: list[Passage], question: str,
                 budget_tokens: int) -> Prompt:
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
    return Prompt(render(tokenizer, system_prefix(task, concise), user), len(blocks), used)
