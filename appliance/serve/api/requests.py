"""The request bodies of the HTTP API, each declared once as a typed object whose fields carry their constraints
(declare.py derives from it both the `Spec` validated off the event loop and shown in the OpenAPI document, and the
typed object built from the validated value: defaults filled in, tenant already checked against the API key), so
endpoints read fields by name and never index a dict.

What the specs cannot say each body's `check` says: unique document ids within a request, that a chat has a user
message with text to answer, and the bounds on its messages' text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...answers import AskRequest
from ...cluster import STORE_ID
from ...config import MAX_FUSION_WEIGHT, ServerSettings, Settings
from ...library import DocumentInput
from ...retrieve import PartitionFilter
from ...text import Turn
from ..http.errors import ApiError
from .declare import shape, wire
from .validation import NAME_PATTERN, Spec

# A document id is the client's own string, but without control characters: a line break in it could not be
# named in DELETE /v1/documents/{id} (the route's path pattern stops at one), so such a document could never go.
ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"
DOCUMENT_ID = Spec("string", "Document id.", required=True, min=1, max=256, pattern=ID_PATTERN)
MAX_QUESTION_CHARS = 4000  # a question, in /v1/ask or as a chat's last user message
NAMES = Spec("string", pattern=NAME_PATTERN)  # an item of a list of partition names or kinds

LANGUAGE_CHOICES = ("auto", "en", "zh", "multi")
LANGUAGE_HELP = ("Language of a new partition, which picks its encoder: auto (default: the language of its first "
                 "documents), en, zh or multi (both); naming another for an existing partition is a 409 (a re-index "
                 "changes it).")


def _names(values: list[str] | None) -> tuple[str, ...] | None:
    return tuple(values) if values else None


def _query_bytes(server: ServerSettings) -> int:
    return server.max_query_body_bytes


def _chat_bytes(server: ServerSettings) -> int:  # a question with its history, or a conversation
    return server.max_chat_body_bytes


@shape("A document to store and index.")
@dataclass(frozen=True, slots=True)
class DocumentBody:
    id: str | None = wire("string", "Document id, unique within the partition; default: a hash of the content.",
                          min=1, max=256, pattern=ID_PATTERN)
    title: str = wire("string", "Title; also indexed.", default="", max=1000)
    text: str = wire("string", "Full text; chunked at ingest.", required=True, min=1,
                     max=lambda s: s.server.max_body_bytes, blank=False)
    source: str = wire("string", "Where the document came from (path, URL, system).", default="", max=2000)
    metadata: dict[str, Any] | None = wire("object", "Free-form JSON object returned with results.", free_form=True,
                                           max=65536)
    time: float | None = wire("timestamp", "Document time (epoch seconds or ISO 8601); selects partitions by time "
                              "range.")

    def input(self) -> DocumentInput:
        return DocumentInput(text=self.text, title=self.title, id=self.id, source=self.source,
                             metadata=self.metadata, time=self.time)


@shape(max_bytes=lambda server: server.max_body_bytes)
@dataclass(frozen=True, slots=True)
class IngestBody:
    tenant: str = wire("string", "Tenant the partition belongs to.", required=True, pattern=NAME_PATTERN)
    partition: str = wire("string", "Partition name (created on first use).", required=True, pattern=NAME_PATTERN)
    # None: "default" for a new partition, any for an existing one
    kind: str | None = wire("string", "Document type of a new partition (default \"default\"), used by search "
                            "filters; naming another kind for an existing partition is a 409.", pattern=NAME_PATTERN)
    # None or auto: decided by a new partition's first documents
    language: str | None = wire("string", LANGUAGE_HELP, choices=LANGUAGE_CHOICES)
    wait: bool = wire("boolean", "Return only once the documents are searchable (default true).", default=True)
    documents: tuple[DocumentBody, ...] = wire("array", "Documents to store.", of=DocumentBody, required=True, min=1,
                                               max=lambda s: s.server.max_documents_per_request)

    def check(self, server: ServerSettings) -> None:
        ids = [d.id for d in self.documents if d.id is not None]
        if len(ids) != len(set(ids)):
            raise ApiError.invalid("document ids must be unique within a request", "documents")

    def inputs(self) -> list[DocumentInput]:
        return [d.input() for d in self.documents]


@shape(max_bytes=_query_bytes)
@dataclass(frozen=True, slots=True)
class ReindexBody:
    tenant: str = wire("string", "Tenant the partition belongs to.", required=True, pattern=NAME_PATTERN)
    # None: the partition keeps its own
    language: str | None = wire("string", "Give the partition this language and its encoder (en, zh, multi, or auto: "
                                "decided again from its stored text); default: it keeps its own.",
                                choices=LANGUAGE_CHOICES)
    tokens: bool = wire("boolean", "Only re-code int8 token vectors into the configured codec, from the stored "
                        "vectors (no text encoded again); takes no language.", default=False)

    def check(self, server: ServerSettings) -> None:
        if self.tokens and self.language is not None:
            raise ApiError.invalid("re-coding token vectors keeps the encoder: it takes no language", "tokens")


@shape(max_bytes=_query_bytes)
@dataclass(frozen=True, slots=True)
class PartitionSettingsBody:
    tenant: str = wire("string", "Tenant the partition belongs to.", required=True, pattern=NAME_PATTERN)
    dense_weight: Any = wire("any", 'The vector list\'s weight in the partition\'s hybrid fusion (BM25\'s is 1): a '
                             'number from 0 to 10, or "default" for its language\'s (retrieve.dense_weight, '
                             'dense_weight_zh).', required=True)

    def check(self, server: ServerSettings) -> None:
        weight = self.dense_weight
        if weight == "default":
            return
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= MAX_FUSION_WEIGHT:
            raise ApiError.invalid(f'must be a number from 0 to {MAX_FUSION_WEIGHT:g}, or "default" (the weight of '
                                   "the partition's language)", "dense_weight")

    @property
    def weight(self) -> float | None:
        """The partition's own weight; None: back to its language's."""
        return None if self.dense_weight == "default" else float(self.dense_weight)


@shape()
@dataclass(frozen=True, slots=True)
class SearchFilters:
    kinds: list[str] | None = wire("array", "Partition kinds to include.", min=1, max=100, items=NAMES)
    time_from: float | None = wire("timestamp", "Only partitions holding documents at or after this time.")
    time_to: float | None = wire("timestamp", "Only partitions holding documents at or before this time.")


@shape(max_bytes=_query_bytes)
@dataclass(frozen=True, slots=True)
class SearchBody:
    tenant: str = wire("string", "Tenant to search.", required=True, pattern=NAME_PATTERN)
    query: str = wire("string", "The question or keywords.", required=True, min=1, max=4000, blank=False)
    k: int = wire("integer", "Number of results.", default=lambda s: s.retrieve.default_k, min=1,
                  max=lambda s: s.retrieve.max_k)
    partitions: list[str] | None = wire("array", "Partition names to search; default: all of the tenant's.", min=1,
                                        max=1000, items=NAMES)
    filters: SearchFilters | None = wire("object", "Partition metadata filters, applied before any search.",
                                         of=SearchFilters)
    # None: the server's setting
    late_interaction: bool | None = wire("boolean", "Override the late-interaction stage for this request.")

    @property
    def where(self) -> PartitionFilter:
        filters = self.filters or SearchFilters(None, None, None)
        return PartitionFilter(tenant=self.tenant, names=_names(self.partitions), kinds=_names(filters.kinds),
                               time_from=filters.time_from, time_to=filters.time_to)


def model_choices(settings: Settings) -> tuple[str, ...]:
    """What a request may name as `model`: the router, or one of the engines the settings enable."""
    return ("auto", *settings.engine_roles())


def _max_answer_tokens(settings: Settings) -> int:
    """The largest answer any enabled engine gives (each still caps its own)."""
    return max((spec.max_tokens for spec in settings.engines().values()), default=settings.generate.max_tokens_cited)


@shape()
@dataclass(frozen=True, slots=True)
class TurnBody:
    role: str = wire("string", required=True, choices=("user", "assistant"))
    content: str = wire("string", required=True, max=lambda s: s.server.max_chat_message_chars)


@shape(max_bytes=_chat_bytes)
@dataclass(frozen=True, slots=True)
class AskBody:
    tenant: str = wire("string", "Tenant whose documents answer the question.", required=True, pattern=NAME_PATTERN)
    question: str = wire("string", "The question.", required=True, min=1, max=MAX_QUESTION_CHARS, blank=False)
    partitions: list[str] | None = wire("array", "Partition names to use; default: all of the tenant's.", min=1,
                                        max=1000, items=NAMES)
    model: str = wire("string", lambda s: f"auto (the router decides) or an engine: {', '.join(s.engine_roles())}.",
                      default="auto", choices=model_choices)
    task: str = wire("string", "cited (answer citing passages [n]) or concise (shortest answer).", default="cited",
                     choices=("cited", "concise"))
    stream: bool = wire("boolean", "Server-Sent Events: sources, then token deltas, then done.", default=False)
    max_tokens: int | None = wire("integer", "Answer length cap (the engine's own cap still applies).", min=1,
                                  max=_max_answer_tokens)
    timeout_s: float | None = wire("number", "Seconds the answer may take; generation stops there with "
                                   "finish_reason \"deadline\" (default and maximum: server.request_timeout_s).",
                                   min=0.1, max=lambda s: s.server.request_timeout_s)
    history: tuple[TurnBody, ...] | None = wire(
        "array", "Earlier turns of the conversation, oldest first: the question is then a follow-up (made standalone "
        "for retrieval; the recent turns are shown to the model).", of=TurnBody, max=200)

    def check(self, server: ServerSettings) -> None:
        total = sum(len(t.content) for t in self.history or ())
        if total > server.max_chat_chars:
            raise ApiError.invalid(f"history has {total} characters together; at most {server.max_chat_chars}",
                                   "history")

    def ask(self, request_id: str) -> AskRequest:
        where = PartitionFilter(tenant=self.tenant, names=_names(self.partitions))
        history = tuple(Turn(t.role, t.content) for t in self.history or ())
        return AskRequest(self.question, where, model=self.model, max_tokens=self.max_tokens, task=self.task,
                          request_id=request_id, timeout_s=self.timeout_s, history=history)


@shape("A chat message; content is a string or a list of text parts.", extra=True)
@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str = wire("string", required=True, choices=("system", "user", "assistant", "tool", "developer"))
    content: Any = wire("any", lambda s: f"The message text: at most server.max_chat_message_chars "
                        f"({s.server.max_chat_message_chars}) characters, all messages together "
                        f"server.max_chat_chars ({s.server.max_chat_chars}).")


@shape("OpenAI chat completion request; fields not listed are accepted and ignored.", extra=True,
       max_bytes=_chat_bytes)
@dataclass(frozen=True, slots=True)
class ChatBody:
    """An OpenAI chat completion request: its last user message is answered, the messages before it are the
    conversation (user and assistant turns) and the client's system message."""
    model: str = wire("string", lambda s: f"auto or an engine: {', '.join(s.engine_roles())}.", required=True,
                      choices=model_choices)
    messages: tuple[ChatMessage, ...] = wire("array", "The conversation; the last user message is answered with "
                                             "RAG.", of=ChatMessage, required=True, min=1, max=256)
    stream: bool = wire("boolean", default=False)
    max_tokens: int | None = wire("integer", min=1, max=_max_answer_tokens)
    max_completion_tokens: int | None = wire("integer", min=1, max=_max_answer_tokens)
    # None: the endpoint decides (X-Tenant header, else "default")
    tenant: str | None = wire("string", "Tenant (else the X-Tenant header, else \"default\").", pattern=NAME_PATTERN)
    partitions: list[str] | None = wire("array", "Partition names to use.", min=1, max=1000, items=NAMES)

    def check(self, server: ServerSettings) -> None:
        self._conversation(server)

    def ask(self, tenant: str, request_id: str, server: ServerSettings) -> AskRequest:
        question, history, system = self._conversation(server)
        return AskRequest(question, PartitionFilter(tenant=tenant, names=_names(self.partitions)), model=self.model,
                          max_tokens=self.max_completion_tokens or self.max_tokens, task="cited",
                          request_id=request_id, history=history, system=system)

    def _conversation(self, server: ServerSettings) -> tuple[str, tuple[Turn, ...], str]:
        """The question (the last user message), the turns before it, and the system message."""
        messages = self.messages
        texts = chat_texts(messages, server)
        last = chat_question(messages, texts)
        history = tuple(Turn(m.role, text) for m, text in zip(messages[:last], texts[:last])
                        if m.role in ("user", "assistant") and text.strip())
        system = "\n\n".join(text.strip() for m, text in zip(messages[:last], texts[:last])
                             if m.role in ("system", "developer") and text.strip())
        return texts[last], history, system


def chat_texts(messages: tuple[ChatMessage, ...], server: ServerSettings) -> list[str]:
    """Every message's text, each and all together of bounded size (every one is held in memory while the request
    lasts, and the recent ones reach the prompt)."""
    texts = [_message_text(m.content, f"messages[{i}].content", server.max_chat_message_chars)
             for i, m in enumerate(messages)]
    total = sum(map(len, texts))
    if total > server.max_chat_chars:
        raise ApiError.invalid(f"messages have {total} characters together; at most {server.max_chat_chars}",
                               "messages")
    return texts


def chat_question(messages: tuple[ChatMessage, ...], texts: list[str]) -> int:
    """The index of the last user message, the one answered."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role != "user":
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


# POST /cluster/sync, between the boxes of a site: "pull from me up to my journal entry seq" (read by the route
# itself, within its own small limit).
@shape()
@dataclass(frozen=True, slots=True)
class SyncBody:
    box: str = wire("string", "The asking box's name.", required=True, min=1, max=63)
    store: str = wire("string", "The asking box's store id.", required=True, pattern=f"^{STORE_ID.pattern}$")
    seq: int = wire("integer", "Its journal entry to wait for.", required=True, min=0, max=2**63 - 1)


# The bodies read by `edge.read_body`, each within its `shape`'s max_bytes.
REQUEST_BODIES = (IngestBody, SearchBody, AskBody, ChatBody, ReindexBody, PartitionSettingsBody)
