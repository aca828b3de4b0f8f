"""The `plain` peer: what a user gets from LlamaIndex's or PrivateGPT's default query path on the same box. The
retrieved passages stuffed into LlamaIndex's default text-QA prompt, rendered through the engine's chat template
(no system message of ours: the template's own default, as LlamaIndex sends it), streamed from the same engine.
No relevance floor, no grounding check acting on the answer, no citation validation, no loop stop.

Held equal to the product so that only the prompt and the checks differ: the same standalone question (the
product's own stage, so follow-ups retrieve the same passages), the same k (`generate.passages`), the same
passage token budget (the engine's `context_tokens`), answer length (`generate.max_tokens_cited`), temperature
and engine settings (frequency penalty included). The grounding check is run on the finished answer only to
measure it (`supported_share`, flag rates); loops are found the same way afterwards.
"""
from __future__ import annotations

import asyncio
import time
import uuid

from appliance.evaluate.scoring import Answered
from appliance.generate import EngineDown, fit_tokens
from appliance.generate.repetition import repeated_tail
from appliance.grounding import check_answer, says_not_covered
from appliance.retrieve import PartitionFilter
from appliance.text import Turn

TEMPLATE = ("Context information is below.\n---------------------\n{passages}\n---------------------\n"
            "Given the context information and not prior knowledge, answer the query.\nQuery: {question}\nAnswer:")


async def ask_plain(services, question: str, history: tuple[Turn, ...], where: PartitionFilter) -> Answered:
    started = time.perf_counter()
    g = services.settings.generate
    standalone = await services.questions.resolve(question, list(history))
    result = await services.retriever.search(standalone.text, where, g.passages)
    passages = [h.chunk.text for h in result.hits if h.chunk]
    sources = tuple((h.chunk.doc_key, h.chunk.text) for h in result.hits if h.chunk)
    engine = _least_busy(services.engines)
    context, _ = fit_tokens(engine.tokenizer, "\n\n".join(passages), engine.limits.context_tokens)
    messages = [*({"role": t.role, "content": t.text} for t in history),
                {"role": "user", "content": TEMPLATE.format(passages=context, question=question)}]
    prompt = engine.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    max_tokens = min(g.max_tokens_cited, engine.limits.max_tokens)
    parts, ttft, finish = [], None, "stop"
    try:
        async for delta in engine.stream(prompt, max_tokens, g.temperature, uuid.uuid4().hex):
            if delta.text:
                ttft = ttft if ttft is not None else (time.perf_counter() - started) * 1000
                parts.append(delta.text)
            finish = delta.finish_reason or finish
    except EngineDown:
        return Answered("".join(parts), "".join(parts), "failed", False, sources, degraded=True)
    text = "".join(parts).strip()
    if repeated_tail(text) is not None:
        finish = "repetition"
    grounding = await asyncio.to_thread(check_answer, text, passages, question)
    return Answered(text, text, finish, says_not_covered(text), sources, (), grounding.label, ttft)


def _least_busy(engines):
    """Any engine that is up, the least loaded first: no router, no admission (neither framework has one)."""
    up = [engines[role] for role in engines.roles if engines[role].up] or [engines[role] for role in engines.roles]
    return min(up, key=lambda engine: engine.in_flight)
