"""Request bodies as typed objects, each built once from the dict `validate()` returns (defaults filled in,
tenant already checked against the API key), so endpoints read fields by name and never index a dict.

What the specs cannot say is checked here: unique document ids within a request, that a chat has a user message
with text to answer, and the bounds on its messages' text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..answers import AskRequest
from ..config import MAX_FUSION_WEIGHT, ServerSettings
from ..library import DocumentInput
from ..retrieve import PartitionFilter
from ..text import Turn
from .errors import ApiError
from .body_schemas import MAX_QUESTION_CHARS


def _names(values: list[str] | None) -> tuple[str, ...] | None:
    return tuple(values) if values else None


@dataclass(frozen=True, slots=True)
class IngestBody:
    tenant: str
    partition: str
    kind: str | None  # None: "default" for a new partition, any for an existing one
    language: str | None  # None or auto: decided by a new partition's first documents
    wait: bool
    documents: list[DocumentInput]

    @classmethod
    def parse(cls, body: dict[str, Any]) -> "IngestBody":
        docs = [DocumentInput(text=d["text"], title=d["title"], id=d["id"], source=d["source"],
                              metadata=d["metadata"], time=d["time"]) for d in body["documents"]]
        ids = [d.id for d in docs if d.id is not None]
        if len(ids) != len(set(ids)):
            raise ApiError.invalid("document ids must be unique within a request", "documents")
        return cls(body["tenant"], body["partition"], body["kind"], body["language"], body["wait"], docs)


@dataclass(frozen=True, slots=True)
class ReindexBody:
    tenant: str
    language: str | None  # None: the partition keeps its own
    tokens_only: bool

    @classmethod
    def parse(cls, body: dict[str, Any]) -> "ReindexBody":
        if body["tokens"] and body["language"] is not None:
            raise ApiError.invalid("re-coding token vectors keeps the encoder: it takes no language", "tokens")
        return cls(body["tenant"], body["language"], body["tokens"])


@dataclass(frozen=True, slots=True)
class PartitionSettingsBody:
    tenant: str
    dense_weight: float | None  # None: back to the partition's language's

    @classmethod
    def parse(cls, body: dict[str, Any]) -> "PartitionSettingsBody":
        weight = body["dense_weight"]
        if weight == "default":
            return cls(body["tenant"], None)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= MAX_FUSION_WEIGHT:
            raise ApiError.invalid(f'must be a number from 0 to {MAX_FUSION_WEIGHT:g}, or "default" (the weight of '
                                   "the partition's language)", "dense_weight")
        return cls(body["tenant"], float(weight))


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
    history: tuple[Turn, ...]

    @classmethod
    def parse(cls, body: dict[str, Any], server: ServerSettings) -> "AskBody":
        where = PartitionFilter(tenant=body["tenant"], names=_names(body["partitions"]))
        history = tuple(Turn(t["role"], t["content"]) for t in body["history"] or ())
        total = sum(len(t.text) for t in history)
        if total > server.max_chat_chars:
            raise ApiError.invalid(f"history has {total} characters together; at most {server.max_chat_chars}",
                                   "history")
        return cls(body["question"], where, body["model"], body["task"], body["stream"], body["max_tokens"],
                   body["timeout_s"], history)

    def ask(self, request_id: str) -> AskRequest:
        return AskRequest(self.question, self.where, model=self.model, max_tokens=self.max_tokens, task=self.task,
                          request_id=request_id, timeout_s=self.timeout_s, history=self.history)


@dataclass(frozen=True, slots=True)
class ChatBody:
    """An OpenAI chat completion request: its last user message is answered, the messages before it are the
    conversation (user and assistant turns) and the client's system message."""
    model: str
    question: str
    stream: bool
    max_tokens: int | None
    tenant: str | None  # None: the endpoint decides (X-Tenant header, else "default")
    partitions: tuple[str, ...] | None
    history: tuple[Turn, ...] = ()
    system: str = ""

    @classmethod
    def parse(cls, body: dict[str, Any], server: ServerSettings) -> "ChatBody":
        messages = body["messages"]
        texts = chat_texts(messages, server)
        last = chat_question(messages, texts)
        history = tuple(Turn(m["role"], text) for m, text in zip(messages[:last], texts[:last])
                        if m["role"] in ("user", "assistant") and text.strip())
        system = "\n\n".join(text.strip() for m, text in zip(messages[:last], texts[:last])
                             if m["role"] in ("system", "developer") and text.strip())
        return cls(body["model"], texts[last], body["stream"], body["max_completion_tokens"] or body["max_tokens"],
                   body["tenant"], _names(body["partitions"]), history, system)

    def ask(self, tenant: str, request_id: str) -> AskRequest:
        return AskRequest(self.question, PartitionFilter(tenant=tenant, names=self.partitions), model=self.model,
                          max_tokens=self.max_tokens, task="cited", request_id=request_id, history=self.history,
                          system=self.system)


def chat_texts(messages: list[dict[str, Any]], server: ServerSettings) -> list[str]:
    """Every message's text, each and all together of bounded size (every one is held in memory while the request
    lasts, and the recent ones reach the prompt)."""
    texts = [_message_text(m.get("content"), f"messages[{i}].content", server.max_chat_message_chars)
             for i, m in enumerate(messages)]
    total = sum(map(len, texts))
    if total > server.max_chat_chars:
        raise ApiError.invalid(f"messages have {total} characters together; at most {server.max_chat_chars}",
                               "messages")
    return texts


def chat_question(messages: list[dict[str, Any]], texts: list[str]) -> int:
    """The index of the last user message, the one answered."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] != "user":
            continue
        if not texts[i].strip():
            raise ApiError.invalid("the last user message has no text", f"messages[{i}].content")
        if len(texts[i]) > MAX_QUESTION_CHARS:
            raise ApiError.invalid(f"must have at most {MAX_QUESTION_CHARS} characters, got {len(texts[i])}",
                                   f"messages[{i}].content")
        return i
    raise ApiError.invalid("there is no user message to answer", "messages")


def _message_text(content: Any, field: str, limit: int) -> str:
    """A message's text: a string, or its text parts joined (other parts, such as images, carry none)."""
    if content is None:  # an assistant message that only calls tools
        return ""
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if any(not isinstance(p.get("text"), str) for p in parts):
            raise ApiError.invalid("a text part's text must be a string", field)
        content = " ".join(p["text"] for p in parts)
    if not isinstance(content, str):
        raise ApiError.invalid("must be a string or a list of content parts", field)
    if len(content) > limit:
        raise ApiError.invalid(f"must have at most {limit} characters, got {len(content)}", field)
    return content
