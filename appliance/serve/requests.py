"""Request bodies as typed objects, each built once from the dict `validate()` returns (defaults filled in,
tenant already checked against the API key), so endpoints read fields by name and never index a dict.

What the specs cannot say is checked here: unique document ids within a request, and that a chat has a user
message with text to answer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..answer import AskRequest
from ..ingest import DocumentInput
from ..retrieve import PartitionFilter
from .errors import ApiError
from .schemas import MAX_QUESTION_CHARS


def _names(values: list[str] | None) -> tuple[str, ...] | None:
    return tuple(values) if values else None


@dataclass(frozen=True, slots=True)
class IngestBody:
    tenant: str
    partition: str
    kind: str | None  # None: "default" for a new partition, any for an existing one
    wait: bool
    documents: list[DocumentInput]

    @classmethod
    def parse(cls, body: dict[str, Any]) -> "IngestBody":
        docs = [DocumentInput(text=d["text"], title=d["title"], id=d["id"], source=d["source"],
                              metadata=d["metadata"], time=d["time"]) for d in body["documents"]]
        ids = [d.id for d in docs if d.id is not None]
        if len(ids) != len(set(ids)):
            raise ApiError.invalid("document ids must be unique within a request", "documents")
        return cls(body["tenant"], body["partition"], body["kind"], body["wait"], docs)


@dataclass(frozen=True, slots=True)
class SearchBody:
    query: str
    where: PartitionFilter
    k: int
    late_interaction: bool | None  # None: the server's setting

    @classmethod
    def parse(cls, body: dict[str, Any]) -> "SearchBody":
        filters = body["filters"] or {}
        where = PartitionFilter(tenant=body["tenant"], names=_names(body["partitions"]),
                                kinds=_names(filters.get("kinds")), time_from=filters.get("time_from"),
                                time_to=filters.get("time_to"))
        return cls(body["query"], where, body["k"], body["late_interaction"])


@dataclass(frozen=True, slots=True)
class AskBody:
    question: str
    where: PartitionFilter
    model: str
    task: str
    stream: bool
    max_tokens: int | None
    timeout_s: float | None

    @classmethod
    def parse(cls, body: dict[str, Any]) -> "AskBody":
        where = PartitionFilter(tenant=body["tenant"], names=_names(body["partitions"]))
        return cls(body["question"], where, body["model"], body["task"], body["stream"], body["max_tokens"],
                   body["timeout_s"])

    def ask(self, request_id: str) -> AskRequest:
        return AskRequest(self.question, self.where, model=self.model, max_tokens=self.max_tokens, task=self.task,
                          request_id=request_id, timeout_s=self.timeout_s)


@dataclass(frozen=True, slots=True)
class ChatBody:
    """An OpenAI chat completion request; only its last user message is answered."""
    model: str
    question: str
    stream: bool
    max_tokens: int | None
    tenant: str | None  # None: the endpoint decides (X-Tenant header, else "default")
    partitions: tuple[str, ...] | None

    @classmethod
    def parse(cls, body: dict[str, Any]) -> "ChatBody":
        return cls(body["model"], last_user_message(body["messages"]), body["stream"],
                   body["max_completion_tokens"] or body["max_tokens"], body["tenant"], _names(body["partitions"]))

    def ask(self, tenant: str, request_id: str) -> AskRequest:
        return AskRequest(self.question, PartitionFilter(tenant=tenant, names=self.partitions), model=self.model,
                          max_tokens=self.max_tokens, task="cited", request_id=request_id)


def last_user_message(messages: list[dict[str, Any]]) -> str:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] != "user":
            continue
        content = messages[i].get("content")
        if isinstance(content, list):  # content parts: only text parts carry a question
            content = " ".join(p["text"] for p in content
                               if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str))
        if not isinstance(content, str) or not content.strip():
            raise ApiError.invalid("the last user message has no text", f"messages[{i}].content")
        if len(content) > MAX_QUESTION_CHARS:
            raise ApiError.invalid(f"must have at most {MAX_QUESTION_CHARS} characters, got {len(content)}",
                                   f"messages[{i}].content")
        return content
    raise ApiError.invalid("there is no user message to answer", "messages")
