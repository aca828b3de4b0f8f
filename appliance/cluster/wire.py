"""Journal changes as JSON between boxes: what `/cluster/journal` sends and a peer reads back, checked on the way
in (a peer is trusted with the secret, not with the shape of what it sends)."""
from __future__ import annotations

import json
import re
import ssl
from dataclasses import dataclass
from typing import Any

from ..library import JournalChange, NewDocument, Place, SourceFile

OPS = ("created", "updated", "deleted")
STORE_ID = re.compile(r"[0-9a-f]{32}")
SHA256 = re.compile(r"[0-9a-f]{64}")


def box_tls(ca_file: str) -> ssl.SSLContext | bool:
    """How a box checks another's certificate on an https:// URL: against the site's own CA (cluster.ca_file),
    else the system's CAs. Hostnames are checked either way."""
    return ssl.create_default_context(cafile=ca_file) if ca_file else True


@dataclass(slots=True, frozen=True)
class FeedPage:
    store: str  # the serving box's store (its store_id)
    changes: list[JournalChange]
    next: int  # the asking box's next `after`
    more: bool


class WireError(ValueError):
    """A peer sent something this box cannot apply."""


def change_json(change: JournalChange) -> dict[str, Any]:
    doc = change.document
    return {"seq": change.seq, "op": change.op, "tenant": change.tenant, "partition": change.partition,
            "kind": change.kind, "language": change.language, "key": change.key,
            "document": None if doc is None else _document_json(doc)}


def _document_json(doc: NewDocument) -> dict[str, Any]:
    f = doc.file
    return {"title": doc.title, "source": doc.source, "metadata": doc.metadata, "time": doc.time,
            "content_hash": doc.content_hash, "chunks": doc.chunks,
            "places": [[p.page, p.page_end, list(p.section)] for p in doc.places],
            "file": None if f is None else {"name": f.name, "sha256": f.sha256, "format": f.format, "size": f.size,
                                            "pages": f.pages, "parser_version": f.parser_version,
                                            "ocr_pages": list(f.ocr_pages)}}


def page_of(raw: bytes) -> FeedPage:
    """A page of a peer's journal, as `/cluster/journal` sends it."""
    try:
        value = json.loads(raw)
        store, changes, after, more = value["store"], value["changes"], value["next"], value["more"]
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(f"malformed journal page: {type(exc).__name__}: {exc}") from None
    if not (isinstance(store, str) and STORE_ID.fullmatch(store) and isinstance(changes, list)
            and isinstance(after, int) and isinstance(more, bool)):
        raise WireError("malformed journal page: store, changes, next or more of the wrong type")
    return FeedPage(store, [change_of(c) for c in changes], after, more)


def change_of(value: Any) -> JournalChange:
    try:
        op, doc = value["op"], value["document"]
        if op not in OPS or (op == "deleted" and doc is not None):
            raise WireError(f"entry {value.get('seq')}: op {op!r} does not fit its document")
        fields = [value[k] for k in ("tenant", "partition", "kind", "language", "key")]
        if not isinstance(value["seq"], int) or not all(isinstance(f, str) for f in fields):
            raise WireError("entry: seq must be an integer and its names strings")
        return JournalChange(value["seq"], op, *fields, None if doc is None else _document_of(value["key"], doc))
    except (KeyError, TypeError, IndexError) as exc:
        raise WireError(f"malformed journal entry: {type(exc).__name__}: {exc}") from None


def _document_of(key: str, doc: dict[str, Any]) -> NewDocument:
    chunks = doc["chunks"]
    if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
        raise WireError(f"document {key!r}: chunks must be strings")
    # each field's type checked here: a null or a number where the store wants text would otherwise surface as a
    # SQLite constraint error, mid-run, with nothing saying which peer sent what
    _check(key, "title, source and content_hash must be strings",
           all(isinstance(doc[name], str) for name in ("title", "source", "content_hash")))
    _check(key, "metadata must be an object", isinstance(doc["metadata"], dict))
    _check(key, "time must be a number or null", doc["time"] is None or _number(doc["time"]))
    places = tuple(_place_of(key, p) for p in doc["places"])
    if places and len(places) != len(chunks):
        raise WireError(f"document {key!r}: {len(places)} places for {len(chunks)} chunks")
    file = None if doc["file"] is None else _file_of(key, doc["file"])
    return NewDocument(key=key, title=doc["title"], text="", chunks=chunks, content_hash=doc["content_hash"],
                       source=doc["source"], metadata=doc["metadata"], time=doc["time"], places=places, file=file)


def _place_of(key: str, value: Any) -> Place:
    _check(key, "a place is [page or null, page or null, [section names]]",
           isinstance(value, list) and len(value) == 3)
    page, page_end, section = value
    _check(key, "a place is [page or null, page or null, [section names]]",
           all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in (page, page_end))
           and isinstance(section, list) and all(isinstance(name, str) for name in section))
    return Place(page, page_end, tuple(section))


def _file_of(key: str, f: dict[str, Any]) -> SourceFile:
    _check(key, "its file needs a sha256 (64 hex digits) and a size (bytes)",
           isinstance(f["sha256"], str) and SHA256.fullmatch(f["sha256"]) is not None and _count(f["size"]))
    _check(key, "its file needs a name and a format (strings), pages (a count or null) and a parser version",
           isinstance(f["name"], str) and isinstance(f["format"], str)
           and (f["pages"] is None or _count(f["pages"])) and _count(f["parser_version"]))
    ocr = f.get("ocr_pages", [])  # a box of an earlier version sends none
    _check(key, "its file's ocr_pages are page numbers (a list of counts)",
           isinstance(ocr, list) and len(ocr) <= 100_000 and all(_count(page) and page > 0 for page in ocr))
    return SourceFile(f["name"], f["sha256"], f["format"], f["size"], f["pages"], f["parser_version"], tuple(ocr))


def _check(key: str, what: str, ok: bool) -> None:
    if not ok:
        raise WireError(f"document {key!r}: {what}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
