"""The request bodies of the HTTP API, as `Spec`s: what bodies.py validates and the OpenAPI document shows."""
from __future__ import annotations

from ..cluster import STORE_ID
from ..config import Settings
from .validation import NAME_PATTERN, Spec

# A document id is the client's own string, but without control characters: a line break in it could not be
# named in DELETE /v1/documents/{id} (the route's path pattern stops at one), so such a document could never go.
ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"
DOCUMENT_ID = Spec("string", "Document id.", required=True, min=1, max=256, pattern=ID_PATTERN)
MAX_QUESTION_CHARS = 4000  # a question, in /v1/ask or as a chat's last user message


def ingest_body(settings: Settings) -> Spec:
    document = Spec("object", "A document to store and index.", fields={
        "id": Spec("string", "Document id, unique within the partition; default: a hash of the content.",
                   min=1, max=256, pattern=ID_PATTERN),
        "title": Spec("string", "Title; also indexed.", default="", max=1000),
        "text": Spec("string", "Full text; chunked at ingest.", required=True, min=1,
                     max=settings.server.max_body_bytes, blank=False),
        "source": Spec("string", "Where the document came from (path, URL, system).", default="", max=2000),
        "metadata": Spec("object", "Free-form JSON object returned with results.", free_form=True, max=65536),
        "time": Spec("timestamp", "Document time (epoch seconds or ISO 8601); selects partitions by time range."),
    })
    return Spec("object", fields={
        "tenant": Spec("string", "Tenant the partition belongs to.", required=True, pattern=NAME_PATTERN),
        "partition": Spec("string", "Partition name (created on first use).", required=True, pattern=NAME_PATTERN),
        "kind": Spec("string", "Document type of a new partition (default \"default\"), used by search "
                     "filters; naming another kind for an existing partition is a 409.", pattern=NAME_PATTERN),
        "language": Spec("string", LANGUAGE_HELP, choices=LANGUAGE_CHOICES),
        "wait": Spec("boolean", "Return only once the documents are searchable (default true).", default=True),
        "documents": Spec("array", "Documents to store.", required=True, min=1,
                          max=settings.server.max_documents_per_request, items=document),
    })


LANGUAGE_CHOICES = ("auto", "en", "zh", "multi")
LANGUAGE_HELP = ("Language of a new partition, which picks its encoder: auto (default: the language of its first "
                 "documents), en, zh or multi (both); naming another for an existing partition is a 409 (a re-index "
                 "changes it).")


REINDEX_BODY = Spec("object", fields={
    "tenant": Spec("string", "Tenant the partition belongs to.", required=True, pattern=NAME_PATTERN),
    "language": Spec("string", "Give the partition this language and its encoder (en, zh, multi, or auto: decided "
                     "again from its stored text); default: it keeps its own.", choices=LANGUAGE_CHOICES),
    "tokens": Spec("boolean", "Only re-code int8 token vectors into the configured codec, from the stored vectors "
                   "(no text encoded again); takes no language.", default=False),
})

PARTITION_BODY = Spec("object", fields={
    "tenant": Spec("string", "Tenant the partition belongs to.", required=True, pattern=NAME_PATTERN),
    "dense_weight": Spec("any", 'The vector list\'s weight in the partition\'s hybrid fusion (BM25\'s is 1): a number '
                         'from 0 to 10, or "default" for its language\'s (retrieve.dense_weight, dense_weight_zh).',
                         required=True),
})


def search_body(settings: Settings) -> Spec:
    return Spec("object", fields={
        "tenant": Spec("string", "Tenant to search.", required=True, pattern=NAME_PATTERN),
        "query": Spec("string", "The question or keywords.", required=True, min=1, max=4000, blank=False),
        "k": Spec("integer", "Number of results.", default=settings.retrieve.default_k, min=1,
                  max=settings.retrieve.max_k),
        "partitions": Spec("array", "Partition names to search; default: all of the tenant's.", min=1, max=1000,
                           items=Spec("string", pattern=NAME_PATTERN)),
        "filters": Spec("object", "Partition metadata filters, applied before any search.", fields={
            "kinds": Spec("array", "Partition kinds to include.", min=1, max=100,
                          items=Spec("string", pattern=NAME_PATTERN)),
            "time_from": Spec("timestamp", "Only partitions holding documents at or after this time."),
            "time_to": Spec("timestamp", "Only partitions holding documents at or before this time."),
        }),
        "late_interaction": Spec("boolean", "Override the late-interaction stage for this request."),
    })


def model_choices(settings: Settings) -> tuple[str, ...]:
    """What a request may name as `model`: the router, or one of the engines the settings enable."""
    return ("auto", *settings.engine_roles())


def _max_answer_tokens(settings: Settings) -> int:
    """The largest answer any enabled engine gives (each still caps its own)."""
    return max((spec.max_tokens for spec in settings.engines().values()), default=settings.generate.max_tokens_cited)


def ask_body(settings: Settings) -> Spec:
    return Spec("object", fields={
        "tenant": Spec("string", "Tenant whose documents answer the question.", required=True, pattern=NAME_PATTERN),
        "question": Spec("string", "The question.", required=True, min=1, max=MAX_QUESTION_CHARS,
                         blank=False),
        "partitions": Spec("array", "Partition names to use; default: all of the tenant's.", min=1, max=1000,
                           items=Spec("string", pattern=NAME_PATTERN)),
        "model": Spec("string", f"auto (the router decides) or an engine: {', '.join(settings.engine_roles())}.",
                      default="auto", choices=model_choices(settings)),
        "task": Spec("string", "cited (answer citing passages [n]) or concise (shortest answer).", default="cited",
                     choices=("cited", "concise")),
        "stream": Spec("boolean", "Server-Sent Events: sources, then token deltas, then done.", default=False),
        "max_tokens": Spec("integer", "Answer length cap (the engine's own cap still applies).", min=1,
                           max=_max_answer_tokens(settings)),
        "timeout_s": Spec("number", "Seconds the answer may take; generation stops there with finish_reason "
                          "\"deadline\" (default and maximum: server.request_timeout_s).", min=0.1,
                          max=settings.server.request_timeout_s),
        "history": Spec("array", "Earlier turns of the conversation, oldest first: the question is then a follow-up "
                        "(made standalone for retrieval; the recent turns are shown to the model).", max=200,
                        items=Spec("object", fields={
                            "role": Spec("string", required=True, choices=("user", "assistant")),
                            "content": Spec("string", required=True, max=settings.server.max_chat_message_chars)})),
    })


def chat_body(settings: Settings) -> Spec:
    message = Spec("object", "A chat message; content is a string or a list of text parts.", extra=True, fields={
        "role": Spec("string", required=True, choices=("system", "user", "assistant", "tool", "developer")),
        "content": Spec("any", f"The message text: at most server.max_chat_message_chars "
                        f"({settings.server.max_chat_message_chars}) characters, all messages together "
                        f"server.max_chat_chars ({settings.server.max_chat_chars})."),
    })
    return Spec("object", "OpenAI chat completion request; fields not listed are accepted and ignored.", extra=True,
                fields={
        "model": Spec("string", f"auto or an engine: {', '.join(settings.engine_roles())}.", required=True,
                      choices=model_choices(settings)),
        "messages": Spec("array", "The conversation; the last user message is answered with RAG.", required=True,
                         min=1, max=256, items=message),
        "stream": Spec("boolean", default=False),
        "max_tokens": Spec("integer", min=1, max=_max_answer_tokens(settings)),
        "max_completion_tokens": Spec("integer", min=1, max=_max_answer_tokens(settings)),
        "tenant": Spec("string", "Tenant (else the X-Tenant header, else \"default\").", pattern=NAME_PATTERN),
        "partitions": Spec("array", "Partition names to use.", min=1, max=1000,
                           items=Spec("string", pattern=NAME_PATTERN)),
    })


# POST /cluster/sync, between the boxes of a site: "pull from me up to my journal entry seq".
SYNC_BODY = Spec("object", fields={
    "box": Spec("string", "The asking box's name.", required=True, min=1, max=63),
    "store": Spec("string", "The asking box's store id.", required=True, pattern=f"^{STORE_ID.pattern}$"),
    "seq": Spec("integer", "Its journal entry to wait for.", required=True, min=0, max=2**63 - 1),
})
