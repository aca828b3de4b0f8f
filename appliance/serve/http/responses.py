"""One JSON shape per response object: what a client sees of a hit, a source, a route, a usage, an answer, a
partition, an ingest and an engine. Every route and stream serialises through these, so the same object never
reaches the wire two different ways.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any

from ...answers import (Done, Failed, Route, Source, Sources, Usage, answer_citations, citation, cited_sources,
                       grounding_json)
from ...generate import EngineStatus
from ...library import FileDocument, FilesResult, IngestResult, PartitionInfo, ReindexJob
from ...retrieve import Hit


PREFIX_CACHE_FIELDS = ("prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate")


def hit_json(h: Hit) -> dict[str, Any]:
    c = h.chunk
    return {"document_id": c.doc_key, "chunk_id": c.chunk_id, "chunk": c.ordinal, "partition": h.partition,
            "title": c.title, "text": c.text, "source": c.source, "metadata": c.metadata,
            **place_json(c.file, c.page, c.page_end, c.section), "score": h.score, "rrf_score": h.rrf,
            "bm25_rank": h.bm25_rank, "ann_rank": h.ann_rank, "late_score": h.late}


def source_json(s: Source) -> dict[str, Any]:
    return {"n": s.n, "document_id": s.document_id, "chunk_id": s.chunk_id, "partition": s.partition,
            "title": s.title, "source": s.source, "text": s.text, "score": s.score,
            **place_json(s.file, s.page, s.page_end, s.section)}


def place_json(file: str, page: int | None, page_end: int | None, section: tuple[str, ...]) -> dict[str, Any]:
    """Where a passage is in its file; null for documents that came as text (and for formats without pages)."""
    return {"file": file or None, "page": page, "page_end": page_end, "section": list(section) or None,
            "citation": citation(file, page, page_end, section) or None}


def route_json(r: Route) -> dict[str, Any]:
    return {"engine": r.engine, "requested": r.requested, "reason": r.reason, "p_large": r.p_large}


def usage_json(u: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                           "total_tokens": u.total_tokens, "cached_prompt_tokens": u.cached_prompt_tokens}
    if u.passages_in_prompt is not None:  # only a generated answer built a prompt
        out["passages_in_prompt"] = u.passages_in_prompt
    return out


def openai_usage_json(u: Usage) -> dict[str, Any]:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens, "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens}}


def sources_json(s: Sources) -> dict[str, Any]:
    """The native stream's first event; also where the JSON answer takes its sources from."""
    return {"sources": [source_json(x) for x in s.sources], "partitions": s.partitions, "route": route_json(s.route),
            "standalone_question": s.standalone_question}


def done_json(d: Done) -> dict[str, Any]:
    return {"answer": d.text, "cited": answer_citations(d), "finish_reason": d.finish_reason,
            "degraded": d.degraded, "cache": d.cache, "grounding": grounding_json(d.grounding),
            "route": route_json(d.route), "usage": usage_json(d.usage), "timings_ms": d.timings.as_dict()}


def failed_json(f: Failed) -> dict[str, Any]:
    return {"error": {"code": "engine_failed", "message": f.message}, "route": route_json(f.route)}


def partition_json(p: PartitionInfo) -> dict[str, Any]:
    out = {"tenant": p.tenant, "name": p.name, "kind": p.kind, "version": p.version,
           "indexed_version": p.indexed_version, "chunks": p.chunks, "language": p.language, "encoder": p.encoder,
           "dense_weight": p.dense_weight}
    if p.documents is not None:
        out.update(documents=p.documents, index_bytes=p.index_bytes)
    return out


def reindex_json(job: ReindexJob, ahead: int) -> dict[str, Any]:
    """`ahead`: re-indexes that end before a queued one starts (the running one included)."""
    return {"tenant": job.tenant, "partition": job.partition, "state": job.state.value, "language": job.language,
            "tokens": job.tokens_only, "ahead": ahead, "asked_at": job.asked_at, "started_at": job.started_at,
            "ended_at": job.ended_at,
            "result": partition_json(job.result) if job.result is not None else None, "error": job.error}


def ingest_json(r: IngestResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tenant": r.tenant, "partition": r.partition, "version": r.version, "indexed_version": r.indexed_version,
        "indexed": r.indexed, "documents": [{"id": d.key, "status": d.status, "chunks": d.chunks} for d in r.documents],
    }
    if r.index_error:
        out["index_error"] = r.index_error
    return out


def engine_json(s: EngineStatus, admin: bool) -> dict[str, Any]:
    """The field names are the JSON keys /v1/engines has always had; the model by its folder's name (a path is a
    map of the box's folders), the prefix cache's figures for an admin only (they tell whether another tenant's
    prompt was seen)."""
    out = asdict(s)
    out["model"] = model_name(s.model)
    if not admin:
        for key in PREFIX_CACHE_FIELDS:
            out.pop(key)
    return out


def model_name(model: str) -> str:
    return PurePath(model or "").name


def model_json(role: str, status: EngineStatus | None) -> dict[str, Any]:
    """An engine as an OpenAI model entry; `status` None: configured but not running (generation off)."""
    return {"id": role, "object": "model", "created": 0, "owned_by": "rag-appliance",
            "root": model_name(status.model) if status else None, "state": status.state if status else "disabled",
            "max_model_len": status.max_model_len if status else None}


def auto_model_json() -> dict[str, Any]:
    return {"id": "auto", "object": "model", "created": 0, "owned_by": "rag-appliance",
            "description": "the router picks small or large per question"}


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer, collected from its events for a client that did not ask for a stream."""
    sources: Sources
    done: Done


@dataclass(frozen=True, slots=True)
class ChatMeta:
    """What every object of one OpenAI chat completion repeats."""
    id: str
    created: int  # Unix seconds
    model: str  # as the client named it


def answer_json(a: Answer, request_id: str) -> dict[str, Any]:
    return {"id": request_id, "sources": [source_json(x) for x in cited_sources(a.sources.sources, a.done)],
            "partitions": a.sources.partitions, "standalone_question": a.sources.standalone_question,
            **done_json(a.done)}


def openai_finish(reason: str | None) -> str:
    """OpenAI knows only "length" and "stop"; a deadline or a degraded answer is a stop to its clients."""
    return "length" if reason == "length" else "stop"


def chat_completion_json(a: Answer, chat: ChatMeta) -> dict[str, Any]:
    d = a.done
    return {
        "id": chat.id, "object": "chat.completion", "created": chat.created, "model": chat.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": d.text},
                     "finish_reason": openai_finish(d.finish_reason)}],
        "usage": openai_usage_json(d.usage),
        "sources": [source_json(x) for x in cited_sources(a.sources.sources, d)],
        "standalone_question": a.sources.standalone_question,
        "route": route_json(d.route), "degraded": d.degraded, "cache": d.cache, "timings_ms": d.timings.as_dict(),
        "grounding": grounding_json(d.grounding),
    }


def chat_chunk_json(chat: ChatMeta, delta: dict[str, Any], finish: str | None, **extra: Any) -> dict[str, Any]:
    return {"id": chat.id, "object": "chat.completion.chunk", "created": chat.created, "model": chat.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def chat_last_chunk_json(chat: ChatMeta, d: Done) -> dict[str, Any]:
    """The chunk that ends a streamed completion: its finish reason, usage and the appliance's own fields."""
    return chat_chunk_json(chat, {}, openai_finish(d.finish_reason), usage=openai_usage_json(d.usage),
                           cited=answer_citations(d), route=route_json(d.route), degraded=d.degraded, cache=d.cache,
                           timings_ms=d.timings.as_dict(), grounding=grounding_json(d.grounding))


def files_json(r: FilesResult) -> dict[str, Any]:
    files = []
    for f in r.files:
        item: dict[str, Any] = {"file": f.name, "id": f.id}
        if f.error is not None:
            item["error"] = {"code": str(f.error.code), "message": f.error.message}
        else:
            item.update(status=f.status, chunks=f.chunks, format=f.format, pages=f.pages, sha256=f.sha256,
                        ocr_pages=list(f.ocr_pages))
        files.append(item)
    body: dict[str, Any] = {"tenant": r.tenant, "partition": r.partition, "version": r.version,
                            "indexed_version": r.indexed_version, "indexed": r.indexed, "files": files}
    if r.index_error:
        body["index_error"] = r.index_error
    return body


def document_json(d: FileDocument) -> dict[str, Any]:
    f = d.file
    return {"id": d.key, "title": d.title, "source": d.source, "metadata": d.metadata, "time": d.time,
            "file": None if f is None else {"name": f.name, "sha256": f.sha256, "format": f.format, "size": f.size,
                                            "pages": f.pages, "parser_version": f.parser_version,
                                            "ocr_pages": list(f.ocr_pages)}}
