"""`appliance ...` commands: serve, ingest, search, ask, reindex, eval retrieval|router|cache, keys add,
cache list|delete, cluster config|keys-map|status (cluster.py); the box's own (models build|quantize, doctor, backup, restore) are in box.py.

`ingest` and `search` talk to the running server when one answers on the configured address, and otherwise open
the data folder themselves (it is locked, so the two never write it at once); `ask` and `cache` need the server.
Every call to a server goes through `client.ApplianceClient` with the API key of `--key` or $APPLIANCE_API_KEY.
"""
from __future__ import annotations

# Nothing heavy is imported at module level: vLLM spawns its engine processes by re-importing the program's main
# module (`__mp_main__`), which for the console script imports this module, and bm25s -> numba -> llvmlite in an
# engine process breaks vLLM's module scan (MODELS.md). Stages are imported inside the commands that use them.

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from ..client import ApplianceClient, ServerError, ServerUnreachable
from ..config import ConfigError, Settings, load_settings
from .box import add_box_commands, local_server
from .cluster import add_cluster_commands
from .eval import add_eval_commands, fusion_weight

BATCH = 128


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        sys.exit(str(exc))
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request: a site's boxes pull every second
    from ..library import KindConflict, QuotaExceeded
    from ..wiring import DataDirBusy

    try:
        args.run(settings, args)
    except KeyboardInterrupt:
        sys.exit(130)
    except (DataDirBusy, KindConflict, QuotaExceeded, FileNotFoundError) as exc:
        sys.exit(f"appliance: {exc}")
    except (ServerError, ServerUnreachable) as exc:
        sys.exit(str(exc))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="appliance", description="Offline RAG answer server")
    parser.add_argument("--config", help="TOML settings file (default: $APPLIANCE_CONFIG)")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.set_defaults(run=_serve)
    _add_document_commands(commands)
    add_eval_commands(commands)
    _add_admin_commands(commands)
    add_box_commands(commands)
    add_cluster_commands(commands)
    return parser


def _add_document_commands(commands) -> None:
    ingest = commands.add_parser("ingest", help="store and index files (PDF, DOCX, PPTX, HTML, Markdown, text) "
                                 "and folders of them, or a BEIR corpus.jsonl")
    ingest.add_argument("--tenant", required=True)
    ingest.add_argument("--partition", required=True)
    ingest.add_argument("--kind", help="document type of a new partition (default: default)")
    ingest.add_argument("--language", choices=["auto", "en", "zh", "multi"],
                        help="language of a new partition, which picks its encoder (default auto: its first files')")
    ingest.add_argument("--sync", action="store_true", help="mirror one folder into the partition: new and changed "
                        "files ingested, unchanged skipped, files gone from the folder deleted")
    ingest.add_argument("paths", nargs="+", type=Path)
    _add_key(ingest)
    ingest.set_defaults(run=_ingest)

    search = commands.add_parser("search", help="hybrid search")
    search.add_argument("--tenant", required=True)
    search.add_argument("--k", type=int, default=10)
    search.add_argument("--partition", action="append", dest="partitions")
    search.add_argument("--json", action="store_true")
    search.add_argument("query")
    _add_key(search)
    search.set_defaults(run=_search)

    ask = commands.add_parser("ask", help="ask the running server; the answer streams as it is generated")
    ask.add_argument("--tenant", required=True)
    ask.add_argument("--partition", action="append", dest="partitions")
    ask.add_argument("--model", choices=["auto", "small", "large"], default="auto")
    ask.add_argument("--max-tokens", type=int)
    ask.add_argument("question")
    _add_key(ask)
    ask.set_defaults(run=_ask)

    reindex = commands.add_parser("reindex", help="parse again the kept files an older parser read, then rebuild "
                                  "indexes from the store (re-encodes every chunk)")
    reindex.add_argument("--tenant")
    reindex.add_argument("--partition")
    reindex.add_argument("--reparse", action="store_true", help="parse every kept file again, not only those an "
                         "older parser read")
    reindex.add_argument("--language", choices=["auto", "en", "zh", "multi"], help="give the partitions this "
                         "language (and its encoder); auto decides it again from their stored text")
    reindex.add_argument("--tokens", action="store_true", help="only re-code int8 token vectors into the "
                         "configured codec (index.token_codec), from the index itself: no text encoded again")
    reindex.set_defaults(run=_reindex)

    partition = commands.add_parser("partition", help="a partition's settings, with the server stopped (a running "
                                    "server: PATCH /v1/partitions/NAME)")
    partition.add_argument("--tenant", required=True)
    partition.add_argument("--partition", required=True)
    partition.add_argument("--dense-weight", required=True, type=_dense_weight, help="the vector list's weight in "
                           "its hybrid fusion (BM25's is 1): 0 to 10, or default (its language's)")
    partition.set_defaults(run=_partition)


def _add_admin_commands(commands) -> None:
    keys = commands.add_parser("keys", help="API keys").add_subparsers(dest="what", required=True)
    add = keys.add_parser("add", help="make a key for a tenant (or an admin key); prints it once, stores only "
                          "its hash")
    who = add.add_mutually_exclusive_group(required=True)
    who.add_argument("--tenant")
    who.add_argument("--admin", action="store_true", help="a key that may name any tenant and sees the box "
                     "(the console's Overview)")
    add.add_argument("--name", default="", help="a label for the key (who or what uses it)")
    add.add_argument("--file", type=Path, help="keys file (default: admission.keys_file)")
    add.set_defaults(run=_keys_add)

    entries = commands.add_parser("cache", help="list or delete semantic cache entries on a running server")
    entries_sub = entries.add_subparsers(dest="what", required=True)
    listing = entries_sub.add_parser("list", help="a tenant's newest entries")
    listing.add_argument("--limit", type=int, default=20)
    removal = entries_sub.add_parser("delete", help="delete one entry by id")
    removal.add_argument("id", type=int)
    for sub in (listing, removal):
        sub.add_argument("--tenant", help="needed without an API key; with one, the key's tenant is used")
        sub.add_argument("--url", default=None, help="server address (default: from the settings)")
        _add_key(sub)
        sub.set_defaults(run=_cache_entries)


# -- commands -----------------------------------------------------------------------------------------------------

def _serve(settings: Settings, args) -> None:
    import uvicorn
    from dataclasses import replace

    from ..serve import create_app, server_options
    from ..serve.admission.keys import KeysFileError

    server = replace(settings.server, **{k: v for k, v in (("host", args.host), ("port", args.port)) if v})
    settings = replace(settings, server=server)
    try:
        app = create_app(settings)
    except KeysFileError as exc:  # a wrong or exposed keys file: say which and how to fix it, no traceback
        sys.exit(f"appliance: {exc}")
    # On SIGTERM uvicorn stops accepting, lets answers in progress finish for up to drain_timeout_s, then stops.
    uvicorn.run(app, log_level=settings.log_level, **server_options(settings))


def _ingest(settings: Settings, args) -> None:
    from tqdm import tqdm

    from .ingest import Line, check_sync_args, ingest_local, ingest_remote, local_files, summary

    check_sync_args(args)
    files, corpora = local_files(args.paths, settings.parse.max_file_bytes)
    docs = list(_read_corpora(corpora))
    if not files and not docs:
        sys.exit("no files found")
    bar = tqdm(total=len(files) + len(docs), unit="file", desc=f"{args.tenant}/{args.partition}")
    lines: list[Line] = []
    server = _connect(settings, args)
    if server:
        with server:
            lines += ingest_remote(server, args, files, bar, settings.parse.max_file_bytes)
            lines += _post_documents(server, args, docs, bar)
    else:
        async def local() -> None:
            async with _opened(settings) as services:
                lines.extend(await ingest_local(services, args, files, bar, settings.parse.max_file_bytes))
                for start in range(0, len(docs), BATCH):
                    part = docs[start:start + BATCH]
                    result = await services.library.ingest(args.tenant, args.partition, part, args.kind,
                                                           wait=start + BATCH >= len(docs), language=args.language)
                    lines.extend(Line(d.status, d.key) for d in result.documents)
                    bar.update(len(part))
        asyncio.run(local())
    bar.close()
    print(summary(lines))
    if any(line.status == "error" for line in lines):
        sys.exit(1)


def _post_documents(server: ApplianceClient, args, docs: list, bar) -> list:
    from .ingest import Line

    lines = []
    for start in range(0, len(docs), BATCH):
        part = docs[start:start + BATCH]
        reply = server.post("/v1/documents", {
            "tenant": args.tenant, "partition": args.partition, "wait": start + BATCH >= len(docs),
            **({"kind": args.kind} if args.kind else {}), **({"language": args.language} if args.language else {}),
            "documents": [{k: v for k, v in vars_of(d).items() if v is not None} for d in part],
        })
        lines += [Line(d["status"], d["id"]) for d in reply["documents"]]
        bar.update(len(part))
    return lines


def _search(settings: Settings, args) -> None:
    server = _connect(settings, args)
    body = {"tenant": args.tenant, "query": args.query, "k": args.k}
    if args.partitions:
        body["partitions"] = args.partitions
    if server:
        with server:
            reply = server.post("/v1/search", body)
    else:
        from ..retrieve import PartitionFilter
        from ..serve.http.responses import hit_json

        async def local() -> dict:
            async with _opened(settings) as services:
                where = PartitionFilter(args.tenant, tuple(args.partitions) if args.partitions else None)
                result = await services.retriever.search(args.query, where, args.k)
                return {"results": [hit_json(h) for h in result.hits], "partitions": result.partitions,
                        "timings_ms": result.timings.as_dict()}
        reply = asyncio.run(local())
    if args.json:
        print(json.dumps(reply, ensure_ascii=False, indent=1))
        return
    for rank, hit in enumerate(reply["results"], 1):
        text = " ".join(hit["text"].split())
        print(f"{rank:>2}. [{hit['partition']}] {hit['document_id']}  {hit['score']:.4f}  {hit['title'][:60]}")
        print(f"    {text[:160]}{'…' if len(text) > 160 else ''}")
    print(f"({len(reply['results'])} results; {reply['timings_ms'].get('total', 0):.1f} ms)")


def _ask(settings: Settings, args) -> None:
    server = _connect(settings, args)
    if not server:
        sys.exit("no server answers; start it with `appliance serve` (the engines take a minute to load)")
    body = {"tenant": args.tenant, "question": args.question, "model": args.model, "stream": True}
    if args.partitions:
        body["partitions"] = args.partitions
    if args.max_tokens:
        body["max_tokens"] = args.max_tokens
    with server:
        for event, data in server.stream_sse("/v1/ask", body):
            _print_answer_event(event, data)


def _print_answer_event(event: str, data: dict) -> None:
    """The answer on stdout as it streams, its sources on stderr, then one line of route, tokens and time."""
    if event == "token":
        print(data["text"], end="", flush=True)
    elif event == "done":
        if data["degraded"]:
            print(data["answer"])
        route = data["route"]
        print(f"\n-- {route['engine'] or 'retrieval only'} ({route['reason']}); "
              f"{data['usage']['completion_tokens']} tokens; {data['timings_ms']['total']:.0f} ms")
    elif event == "sources":
        for source in data["sources"]:
            print(f"[{source['n']}] {source['title'] or source['document_id']}", file=sys.stderr)
    elif event == "error":
        sys.exit(f"\n{data['error']['message']}")


def _reindex(settings: Settings, args) -> None:
    if args.language and not args.partition:
        sys.exit("--language changes one partition's encoder: name it with --partition (and --tenant)")
    if args.tokens and (args.language or args.reparse):
        sys.exit("--tokens re-codes the stored token vectors only: it takes neither --language nor --reparse")

    async def run() -> None:
        async with _opened(settings) as services:
            if args.tokens:
                done = await services.library.reindex(args.tenant, args.partition, tokens_only=True)
                print("\n".join(f"{r.tenant}/{r.partition}: token vectors re-coded at version {r.indexed_version}"
                                for r in done) or "nothing to re-code: no partition past "
                      "index.codebook_min_tokens keeps int8 token vectors")
                return
            for parsed in await services.files.reparse(args.tenant, args.partition, force=args.reparse):
                failed = [f for f in parsed.files if f.error is not None]
                print(f"{parsed.tenant}/{parsed.partition}: {len(parsed.files)} files parsed again"
                      + (f", {len(failed)} failed (their documents are kept as they were)" if failed else ""))
            for r in await services.library.reindex(args.tenant, args.partition, args.language):
                print(f"{r.tenant}/{r.partition}: indexed at version {r.indexed_version}")
            for p in services.library.partitions(args.tenant):
                if args.partition in (None, p.name):
                    print(f"{p.tenant}/{p.name}: language {p.language}, encoder {p.encoder}")
    asyncio.run(run())


def _dense_weight(text: str) -> float | None:
    return None if text == "default" else fusion_weight(text)


def _partition(settings: Settings, args) -> None:
    async def run() -> None:
        async with _opened(settings) as services:
            try:
                info = await services.library.set_dense_weight(args.tenant, args.partition, args.dense_weight)
            except LookupError as exc:
                sys.exit(str(exc))
            weight = "its language's" if info.dense_weight is None else info.dense_weight
            print(f"{info.tenant}/{info.name}: dense weight {weight}")
    asyncio.run(run())


def _keys_add(settings: Settings, args) -> None:
    import re

    from ..box import service_group
    from ..serve.admission.keys import KeysFileError, add_key

    path = args.file or (Path(settings.admission.keys_file) if settings.admission.keys_file else None)
    if path is None:
        sys.exit("no keys file: pass --file or set admission.keys_file")
    if not args.admin and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}", args.tenant):
        sys.exit(f"tenant {args.tenant!r}: letters, digits, '_', '.', '-' (up to 128)")
    try:
        key = add_key(path, None if args.admin else args.tenant, args.name, service_group(settings.data_dir))
    except KeysFileError as exc:  # the file as it is would stop the server, or the name cannot be written
        sys.exit(f"appliance: {exc}")
    print(key)
    who = "as an admin key" if args.admin else f"for tenant {args.tenant!r}"
    print(f"added to {path} {who}; the key is shown only now", file=sys.stderr)


def _cache_entries(settings: Settings, args) -> None:
    params = {"tenant": args.tenant} if args.tenant else {}
    url, verify = local_server(settings)
    with ApplianceClient(args.url or url, args.key, verify=verify) as server:
        if args.what == "list":
            reply = server.get("/v1/cache/entries", {**params, "limit": args.limit})
        else:
            reply = server.delete(f"/v1/cache/entries/{args.id}", params)
    print(json.dumps(reply, indent=2, ensure_ascii=False))


# -- helpers ------------------------------------------------------------------------------------------------------

def _opened(settings: Settings):
    """The services without engines or warm-up: what a local ingest, search or reindex needs."""
    from ..wiring import open_services

    return open_services(settings, warm_up=False, generation=False)


def _read_corpora(paths: list[Path]):
    from ..evaluate import beir_documents, read_jsonl

    for path in paths:
        yield from beir_documents(list(read_jsonl(path)))


def vars_of(doc) -> dict[str, Any]:  # an ingest.DocumentInput
    return {"id": doc.id, "title": doc.title, "text": doc.text, "source": doc.source, "metadata": doc.metadata,
            "time": doc.time}


def _add_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", default=os.environ.get("APPLIANCE_API_KEY"),
                        help="API key for a server with keys on (default: $APPLIANCE_API_KEY)")


def _connect(settings: Settings, args) -> ApplianceClient | None:
    """A client of the server at the configured address when it is ready; None when nothing answers there."""
    url, verify = local_server(settings)
    server = ApplianceClient(url, args.key, verify=verify)
    try:
        if server.is_up():
            return server
    except ServerError as exc:  # a server answers but is not ready: it holds the data folder
        sys.exit(f"the server at {server.base_url} is not ready ({exc.body}); try again shortly")
    server.close()
    return None
