"""`appliance eval answers`: a question set (SQuAD 2.0, CMRC 2018) or a conversation set (doc2dial) answered through
the real engines, as the server answers it, against the gold answers (`answer_sets` loads and asks, `scoring`
scores).

The corpus goes into a fresh data folder; caches are off (every answer is computed); questions go `concurrency`
at a time, so answers per minute are those of a box serving that many clients. Reports F1 and exact match (SQuAD's
scorer, CMRC's for Chinese), abstention on unanswerable questions, citation accuracy, the grounding check's
labels, loops, time to first token and the CPU. Slow on a CPU box (an answer is seconds): for benchmarks, not tests.
"""
from __future__ import annotations

import contextlib
import os
import platform
import tempfile
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..config import Settings
from ..wiring import open_services
from .scoring import summarise
from .answer_sets import AnswerSet, Asker, ingest_set, load_set, product_asker, run_set
from .conversations import needs_engines

CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


async def evaluate_answers(settings: Settings, folder: Path, history_in_prompt: bool = True,
                           limit: int | None = None, max_tokens: int | None = None, progress=None,
                           concurrency: int = 8) -> dict[str, Any]:
    """One set, the product's answer path: the report `measure` gives. `limit`: questions (or conversations),
    sampled evenly; `max_tokens` None: the product's default answer length."""
    answer_set = load_set(Path(folder), limit)
    settings = without_history(settings) if not history_in_prompt else settings
    async with eval_services(settings) as services:
        await ingest_set(services, answer_set)
        report = await measure(services, answer_set, product_asker(max_tokens), concurrency, progress)
    return {"history_in_prompt": history_in_prompt, **report}


@contextlib.asynccontextmanager
async def eval_services(settings: Settings, generation: bool | None = None) -> AsyncIterator[Any]:
    """The services on a fresh data folder, caches off, warmed up; engines unless the settings need none
    (`generate.answer_mode = "extractive"` with no rewrite engine) or `generation` says."""
    if generation is None:
        generation = settings.generate.answer_mode != "extractive" or needs_engines(settings, "auto")
    with tempfile.TemporaryDirectory(prefix="appliance-eval-") as tmp:
        fresh = replace(settings, data_dir=Path(tmp), demo_corpus=False, cache=replace(settings.cache, enabled=False))
        async with open_services(fresh, warm_up=True, generation=generation) as services:
            yield services


async def measure(services, answer_set: AnswerSet, asker: Asker, concurrency: int = 8,
                  progress=None) -> dict[str, Any]:
    """Ask every question of an ingested set through `asker`; the summary with what was asked and where."""
    run = await run_set(services, answer_set, asker, concurrency, progress)
    s = services.settings
    return {"set": answer_set.name, "kind": answer_set.kind, "questions_in_file": answer_set.total,
            "conversations": len(answer_set.dialogues) if answer_set.kind == "conversations" else None,
            **summarise(run.rows, run.wall_s, concurrency),
            "models": {role: services.engines[role].status().model for role in services.engines},
            "answer_mode": s.generate.answer_mode, "unsupported": s.generate.unsupported,
            "cpu": cpu_info(), "examples": run.examples}


def without_history(settings: Settings) -> Settings:
    """No earlier turn in the prompt (the standalone-question stage still reads them)."""
    return replace(settings, conversation=replace(settings.conversation, history_turns=0))


def cpu_info() -> dict[str, Any]:
    """The CPU the answers ran on: model name, the SIMD flags the engines care about, cores usable."""
    model, flags = platform.processor(), set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as info:
        for line in info:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not flags:
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    return {"model": model, "flags": [f for f in CPU_FLAGS if f in flags], "cores": len(os.sched_getaffinity(0))}
