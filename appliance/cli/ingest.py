"""`appliance ingest PATH...`: files and folders (recursive) through the parsers, into a running server or the
local data folder; `--sync` mirrors one folder into a partition (new and changed files by content hash ingested,
unchanged skipped, files gone from the folder deleted). A BEIR `corpus.jsonl` is read as text documents.

A folder's files get their path inside the folder as document id ("reports/q3.pdf"); a file named on its own,
its name. A progress bar while it runs, then one line per file that changed or failed and the counts.
"""
from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..client import ApplianceClient, ServerError
from ..paths import file_sha256

BATCH_FILES = 16  # files per upload request
BATCH_BYTES = 32 * 1024 * 1024  # and at most this many bytes (well under parse.max_upload_bytes)
BATCH_DOCUMENTS = 256  # text documents of a corpus.jsonl per request


@dataclass(slots=True, frozen=True)
class LocalFile:
    id: str
    path: Path
    size: int
    sha256: str


@dataclass(slots=True, frozen=True)
class Line:
    """One line of the summary: what happened to one file."""
    status: str  # created, updated, unchanged, deleted, error
    id: str
    detail: str = ""


def local_files(paths: list[Path], max_file_bytes: int) -> tuple[list[LocalFile], list[Path]]:
    """Files to ingest (hidden ones and Office lock files skipped) and the BEIR corpora among them. A file past
    `max_file_bytes` is not read (its sha256 left empty): it is refused unread (`oversized`)."""
    found: list[LocalFile] = []
    corpora: list[Path] = []
    for root in paths:
        if not root.exists():
            sys.exit(f"appliance ingest: {root} does not exist")
        pairs = ([(p.relative_to(root).as_posix(), p) for p in sorted(root.rglob("*")) if p.is_file()]
                 if root.is_dir() else [(root.name, root)])
        for key, path in pairs:
            if any(part.startswith((".", "~$")) for part in Path(key).parts):
                continue
            if path.name == "corpus.jsonl":
                corpora.append(path)
            else:
                size = path.stat().st_size
                found.append(LocalFile(key, path, size, file_sha256(path) if size <= max_file_bytes else ""))
    return found, corpora


def plan(files: list[LocalFile], stored: dict[str, str | None],
         sync: bool) -> tuple[list[LocalFile], list[LocalFile], list[str]]:
    """(to send, unchanged, to delete): `stored` maps the partition's document ids to their file's sha256."""
    same = [f for f in files if f.sha256 and stored.get(f.id, "") == f.sha256]  # an unread file is never the same
    unchanged = {f.id for f in same}
    send = [f for f in files if f.id not in unchanged]
    here = {f.id for f in files}
    # only documents that came from files are mirrored; text documents posted to the partition stay
    gone = sorted(key for key, sha in stored.items() if sha is not None and key not in here) if sync else []
    return send, same, gone


def oversized(files: list[LocalFile], max_file_bytes: int) -> tuple[list[LocalFile], list[Line]]:
    """(the files to send, a line for each one past parse.max_file_bytes): those are refused unread, as the
    server would refuse them, so that a 10 GB video in a shared folder is never loaded into memory."""
    kept = [f for f in files if f.size <= max_file_bytes]
    return kept, [Line("error", f.id, f"too_large: the file is larger than parse.max_file_bytes = {max_file_bytes}"
                                      " bytes") for f in files if f.size > max_file_bytes]


def plan_lines(files: list[LocalFile], stored: dict[str, str | None], sync: bool,
               max_file_bytes: int) -> tuple[list[LocalFile], list[str], list[Line]]:
    """(to send, to delete, the lines already known: oversized files refused, unchanged ones)."""
    send, same, gone = plan(files, stored, sync)
    send, lines = oversized(send, max_file_bytes)
    return send, gone, lines + [Line("unchanged", f.id) for f in same]


def batches(files: list[LocalFile]) -> list[list[LocalFile]]:
    out: list[list[LocalFile]] = [[]]
    size = 0
    for f in files:
        if out[-1] and (len(out[-1]) >= BATCH_FILES or size + f.size > BATCH_BYTES):
            out.append([])
            size = 0
        out[-1].append(f)
        size += f.size
    return [b for b in out if b]


def summary(lines: list[Line]) -> str:
    shown = [f"{line.status:<9} {line.id}" + (f"  {line.detail}" if line.detail else "")
             for line in lines if line.status != "unchanged"]
    counts = Counter(line.status for line in lines)
    return "\n".join(shown + [", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing to do"])


def file_line(item: dict[str, Any]) -> Line:
    """A summary line from one file's answer (the HTTP shape, which the local path produces too)."""
    if "error" in item:
        return Line("error", item["id"], f"{item['error']['code']}: {item['error']['message']}")
    detail = ", ".join(x for x in (item.get("format") or "", f"{item['pages']} pages" if item.get("pages") else "",
                                   f"{item['chunks']} chunks" if item.get("chunks") is not None else "") if x)
    return Line(item["status"], item["id"], detail)


def ingest_remote(server: ApplianceClient, args, files: list[LocalFile], bar, max_file_bytes: int) -> list[Line]:
    stored: dict[str, str | None] = {}
    after = ""
    while True:
        try:
            page = server.get("/v1/documents", {"tenant": args.tenant, "partition": args.partition,
                                                "after": after, "limit": 1000} if after else
                              {"tenant": args.tenant, "partition": args.partition, "limit": 1000})
        except Exception as exc:  # a new partition: nothing stored yet
            if getattr(exc, "status", None) == 404:
                break
            raise
        stored.update((d["id"], (d["file"] or {}).get("sha256")) for d in page["documents"])
        if not page["next"]:
            break
        after = page["next"]
    send, gone, lines = plan_lines(files, stored, args.sync, max_file_bytes)
    bar.update(len(lines))  # the unchanged and the oversized
    groups = batches(send)
    for n, group in enumerate(groups):
        fields = {"tenant": args.tenant, "partition": args.partition, "wait": str(n == len(groups) - 1).lower()}
        if args.kind:
            fields["kind"] = args.kind
        if args.language:
            fields["language"] = args.language
        lines += upload_group(server, fields, group)
        bar.update(len(group))
    for key in gone:
        # quoted ("/" kept: the route takes a path): a file named "a?b.md" or "a#b.md" is that document, not "a"
        server.delete(f"/v1/documents/{quote(key, safe='/')}", {"tenant": args.tenant, "partition": args.partition})
        lines.append(Line("deleted", key))
    return lines


def upload_group(server: ApplianceClient, fields: dict[str, str], group: list[LocalFile]) -> list[Line]:
    """One upload request, a line per file. A request refused whole (past the server's upload limit: each file
    alone then; admission, quota) gives each of its files the server's reason instead of ending the run."""
    try:
        # the document id travels as the part's file name
        reply = server.upload("/v1/files", fields, [(f.id, f.path.read_bytes()) for f in group])
    except ServerError as exc:
        if exc.status == 413 and len(group) > 1:
            return [line for f in group for line in upload_group(server, fields, [f])]
        return [Line("error", f.id, _refusal(exc)) for f in group]
    return [file_line(item) for item in reply["files"]]


def _refusal(exc: ServerError) -> str:
    try:
        error = json.loads(exc.body)["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"server answered {exc.status}"


async def ingest_local(services, args, files: list[LocalFile], bar, max_file_bytes: int) -> list[Line]:
    from ..library import FileInput
    from ..serve.http.responses import files_json

    docs = await asyncio.to_thread(_all_documents, services.library, args.tenant, args.partition)
    stored = {d.key: d.file.sha256 if d.file else None for d in docs}
    send, gone, lines = plan_lines(files, stored, args.sync, max_file_bytes)
    bar.update(len(lines))  # the unchanged and the oversized
    groups = batches(send)
    for n, group in enumerate(groups):
        inputs = [FileInput(f.id, f.path.read_bytes()) for f in group]
        result = await services.files.ingest(args.tenant, args.partition, inputs, args.kind,
                                             wait=n == len(groups) - 1, language=args.language)
        lines += [file_line(item) for item in files_json(result)["files"]]
        bar.update(len(group))
    for key in gone:
        await services.library.delete(args.tenant, key, args.partition)
        lines.append(Line("deleted", key))
    return lines


def _all_documents(library, tenant: str, partition: str) -> list:
    docs, after = [], ""
    while page := library.list_documents(tenant, partition, after, 1000):
        docs += page
        after = page[-1].key
    return docs



def check_sync_args(args) -> None:
    if args.sync and (len(args.paths) != 1 or not args.paths[0].is_dir()):
        sys.exit("appliance ingest --sync: give exactly one folder (it is mirrored into the partition)")

