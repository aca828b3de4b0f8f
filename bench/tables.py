"""Tables benchmark: questions about single rows of real tables in DOCX, HTML, Markdown and PPTX files, answered by
retrieval from ours (a table chunked as whole rows under its header), ours with tables chunked as prose (as before
table blocks) and markitdown + a LangChain-style character splitter, in the same run.

    .venv/bin/python bench/tables.py               # 8 files, 319 questions, each system 3 times (`just bench-tables`)
    .venv/bin/python bench/tables.py --repeats 1   # each system once
    .venv/bin/python bench/tables.py --quick       # 3 files, 5 questions a table: for debugging

The ISO tables that `pycountry` ships are written at run time into files with headings, prose and long tables;
questions name a column and a row's cell ("What is the numeric code of the country Norway?"); a hit is a retrieved
chunk holding the row's line. The three systems share one set of services (default settings), a tenant each, and
differ only in how the files become chunks: `markdown()` and the report say how. recall@5, MRR@10 and "header shown"
(the hit's chunk also holds the table's header row, which the prompt then shows beside the row).

Writes bench/results/tables.md and .json (--quick: bench/.cache/tables-quick.*).
"""
from __future__ import annotations

import argparse
import asyncio
import html
import io
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

import appliance.config  # noqa: E402,F401  (first: onnxruntime before usearch, see MODELS.md)
import appliance.library.files as library_files  # noqa: E402
from appliance.library import FileInput, NewDocument  # noqa: E402
from appliance.parse import parse_bytes  # noqa: E402
from appliance.retrieve import PartitionFilter  # noqa: E402
from appliance.text import content_hash  # noqa: E402
from appliance.wiring import open_services  # noqa: E402

import machine  # noqa: E402

REPO = machine.REPO
SEED = 20240611
QUESTIONS_PER_TABLE = 36
LANGUAGE_ROWS = 300  # ISO 639-3 rows per language file (two files: a seeded sample of 600 of its ~7,900)
SLIDE_ROWS = 25  # rows of the language table on each slide
PARTITION = "tables"
SYSTEMS = {"ours": "ours", "prose": "ours, tables as prose (before)", "markitdown": "markitdown + char splitter"}
PEER_CHUNK, PEER_OVERLAP, PEER_SEPARATORS = 1000, 200, ("\n\n", "\n", " ")
PACKAGES = ["rag-appliance", "pycountry", "python-docx", "python-pptx", "markitdown", "onnxruntime"]


@dataclass(slots=True)
class Table:
    name: str
    header: list[str]
    rows: list[list[str]]
    templates: list[str]  # str.format over the row's cells by column name (spaces and dashes as underscores)
    heading: str  # the heading above it (a slide's title)
    caption: str = ""


@dataclass(slots=True)
class Doc:
    file: str  # its name; the extension says the format
    title: str
    prose: list[str]  # paragraphs: the first before the tables, the rest after
    tables: list[Table]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 files, 5 questions a table, written to bench/.cache")
    p.add_argument("--repeats", type=int, default=3, help="ingests and searches of each system (default 3)")
    p.add_argument("--out", type=Path, help="default: bench/results/tables (--quick: bench/.cache/tables-quick)")
    return p.parse_args(argv)


# ---------------------------------------------------------------- the tables and files

def _subdivisions(codes: list[str]) -> list[list[str]]:
    import pycountry

    names = {c: pycountry.countries.get(alpha_2=c).name for c in codes}
    subs = sorted((s for s in pycountry.subdivisions if s.country_code in names), key=lambda s: s.code)
    return [[s.code, s.name, s.type, names[s.country_code]] for s in subs]


def load_tables(rng: random.Random) -> dict[str, Table]:
    import pycountry

    scope = {"I": "individual", "M": "macrolanguage", "S": "special"}
    kind = {"L": "living", "E": "extinct", "A": "ancient", "H": "historical", "C": "constructed", "S": "special"}
    languages = sorted(rng.sample(list(pycountry.languages), 2 * LANGUAGE_ROWS), key=lambda lang: lang.alpha_3)
    language_rows = [[x.alpha_3, x.name, scope[x.scope], kind[x.type]] for x in languages]
    language_header = ["Code", "Language", "Scope", "Type"]
    language_templates = ["What is the ISO 639-3 code of the {Language} language?",
                          "Which language has the code {Code}?", "What type of language is {Language}?"]
    sub_header = ["Code", "Subdivision", "Type", "Country"]
    sub_templates = ["What is the ISO 3166-2 code of {Subdivision} in {Country}?",
                     "Which subdivision has the code {Code}?", "What type of subdivision is {Subdivision}, {Country}?"]
    return {t.name: t for t in [
        Table("countries", ["Country", "Alpha-2 code", "Alpha-3 code", "Numeric code"],
              [[c.name, c.alpha_2, c.alpha_3, c.numeric] for c in pycountry.countries],
              ["What is the numeric code of the country {Country}?", "What is the alpha-3 code of {Country}?",
               "Which country has the alpha-2 code {Alpha_2_code}?"], "Current countries (ISO 3166-1)"),
        Table("withdrawn", ["Former country", "Alpha-3 code", "Alpha-4 code", "Withdrawn"],
              [[c.name, c.alpha_3, c.alpha_4, c.withdrawal_date] for c in pycountry.historic_countries],
              ["In which year was the country code of {Former_country} withdrawn?",
               "What is the alpha-4 code of the former country {Former_country}?"], "Withdrawn codes (ISO 3166-3)"),
        Table("currencies", ["Currency code", "Numeric code", "Currency"],
              [[c.alpha_3, c.numeric, c.name] for c in pycountry.currencies],
              ["Which currency has the ISO code {Currency_code}?",
               "What is the numeric code of the currency {Currency}?",
               "What is the three-letter code of the currency {Currency}?"], "Currencies",
              caption="ISO 4217 currency codes"),
        Table("scripts", ["Script code", "Numeric code", "Script name"],
              [[s.alpha_4, s.numeric, s.name] for s in pycountry.scripts],
              ["What is the four-letter code of the {Script_name} script?",
               "Which script has the numeric code {Numeric_code}?"], "Scripts"),
        Table("language groups", ["Code", "Language group"],
              [[g.alpha_3, g.name] for g in pycountry.language_families],
              ["What is the ISO 639-5 code of {Language_group}?", "Which language group has the code {Code}?"],
              "Language groups and families"),
        Table("languages (slides)", language_header, language_rows[:LANGUAGE_ROWS], language_templates, "Languages"),
        Table("languages (markdown)", language_header, language_rows[LANGUAGE_ROWS:], language_templates,
              "Languages"),
        Table("subdivisions (Europe)", sub_header, _subdivisions(["DE", "ES", "FR", "IT", "NL", "PL"]), sub_templates,
              "Germany, Spain, France, Italy, the Netherlands and Poland"),
        Table("subdivisions (Americas)", sub_header,
              _subdivisions(["AR", "BR", "CA", "CL", "CO", "MX", "PE", "US"]), sub_templates,
              "From Canada to Chile", caption="ISO 3166-2 subdivision codes"),
    ]}


DOCS = [  # file, title, prose (the first paragraph goes before the tables, the others after), tables
    ("country-codes.docx", "Country codes", [
        "ISO 3166-1 gives every country three codes: two letters, three letters and three digits.",
        "Codes of countries that no longer exist are kept for some years after they are withdrawn (ISO 3166-3)."],
     ["countries", "withdrawn"]),
    ("currency-codes.html", "Currency codes", [
        "ISO 4217 names each currency by three letters, the first two of which are usually its country's.",
        "Funds and precious metals have codes of their own."], ["currencies"]),
    ("script-codes.md", "Writing systems", [
        "ISO 15924 gives each writing system a four-letter code and a three-digit number."], ["scripts"]),
    ("language-groups.html", "Language groups", [
        "ISO 639-5 codes name families and groups of languages rather than single languages."], ["language groups"]),
    ("languages.pptx", "Languages of the world, part one", [
        "A sample of the ISO 639-3 code list: three letters for each individual language."], ["languages (slides)"]),
    ("languages-more.md", "Languages of the world, part two", [
        "A second sample of the ISO 639-3 code list, with each language's scope and type."], ["languages (markdown)"]),
    ("subdivisions-europe.docx", "Subdivisions in Europe", [
        "ISO 3166-2 codes the regions, provinces and departments of each country after its alpha-2 code."],
     ["subdivisions (Europe)"]),
    ("subdivisions-americas.html", "Subdivisions in the Americas", [
        "States, provinces and departments of eight countries of the Americas, by ISO 3166-2 code."],
     ["subdivisions (Americas)"]),
]


def documents(tables: dict[str, Table], version: str) -> list[Doc]:
    source = f"The entries below are those of the pycountry package, version {version}, which ships the ISO lists."
    return [Doc(file, title, [f"{prose[0]} {source}", *prose[1:]], [tables[name] for name in names])
            for file, title, prose, names in DOCS]


def write_docx(doc: Doc) -> bytes:
    import docx
    from docx.oxml import OxmlElement

    out = docx.Document()
    out.add_heading(doc.title, 0)
    out.add_paragraph(doc.prose[0])
    for table in doc.tables:
        out.add_heading(table.heading, 1)
        grid = out.add_table(rows=1 + len(table.rows), cols=len(table.header))
        grid.rows[0]._tr.get_or_add_trPr().append(OxmlElement("w:tblHeader"))  # Word's "repeat as header row"
        for row, cells in zip(grid.rows, [table.header, *table.rows]):
            for cell, text in zip(row.cells, cells):
                cell.text = text
    for paragraph in doc.prose[1:]:
        out.add_paragraph(paragraph)
    data = io.BytesIO()
    out.save(data)
    return data.getvalue()


def write_html(doc: Doc) -> bytes:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(doc.title)}</title></head><body>",
             f"<h1>{e(doc.title)}</h1>", f"<p>{e(doc.prose[0])}</p>"]
    for table in doc.tables:
        caption = f"<caption>{e(table.caption)}</caption>" if table.caption else ""
        head = "".join(f"<th>{e(h)}</th>" for h in table.header)
        body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>\n" for row in table.rows)
        parts += [f"<h2>{e(table.heading)}</h2>",
                  f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>"]
    parts += [f"<p>{e(p)}</p>" for p in doc.prose[1:]] + ["</body></html>"]
    return "\n".join(parts).encode("utf-8")


def write_markdown(doc: Doc) -> bytes:
    parts = [f"# {doc.title}", doc.prose[0]]
    for table in doc.tables:
        lines = ["| " + " | ".join(table.header) + " |", "|" + "---|" * len(table.header)]
        lines += ["| " + " | ".join(row) + " |" for row in table.rows]
        parts += [f"## {table.heading}", "\n".join(lines)]
    return ("\n\n".join(parts + doc.prose[1:]) + "\n").encode("utf-8")


def write_pptx(doc: Doc) -> bytes:
    import pptx
    from pptx.util import Inches, Pt

    deck = pptx.Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
    first.shapes.title.text = doc.title
    first.placeholders[1].text = "\n".join(doc.prose)
    for table in doc.tables:
        parts = [table.rows[i:i + SLIDE_ROWS] for i in range(0, len(table.rows), SLIDE_ROWS)]
        for number, rows in enumerate(parts, 1):
            slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
            slide.shapes.title.text = f"{table.heading} ({number} of {len(parts)})"
            shape = slide.shapes.add_table(1 + len(rows), len(table.header), Inches(0.5), Inches(1.5), Inches(9),
                                           Inches(5))  # first_row (the header style) is on by default
            for r, cells in enumerate([table.header, *rows]):
                for c, text in enumerate(cells):
                    shape.table.cell(r, c).text = text
                    shape.table.cell(r, c).text_frame.paragraphs[0].font.size = Pt(8)
    data = io.BytesIO()
    deck.save(data)
    return data.getvalue()


WRITERS = {".docx": write_docx, ".html": write_html, ".md": write_markdown, ".pptx": write_pptx}


# ---------------------------------------------------------------- questions and judging

def questions(docs: list[Doc], per_table: int, rng: random.Random) -> list[dict]:
    """`per_table` questions a table, templates in turn over its rows in a seeded order; a row is skipped for a
    template whose asked-for cells another row of the table shares (the question would have two answers)."""
    out = []
    for doc in docs:
        for table in doc.tables:
            keys = [h.replace(" ", "_").replace("-", "_") for h in table.header]
            fields = [[k for k in keys if "{" + k + "}" in t] for t in table.templates]
            seen = [Counter(tuple(row[keys.index(k)] for k in f) for row in table.rows) for f in fields]
            order = rng.sample(range(len(table.rows)), len(table.rows))
            asked = 0
            for i in order:
                if asked == per_table:
                    break
                n, row = asked % len(table.templates), table.rows[i]
                if seen[n][tuple(row[keys.index(k)] for k in fields[n])] > 1 or not all(row):
                    continue
                out.append({"id": len(out), "file": doc.file, "table": table.name, "template": table.templates[n],
                            "question": table.templates[n].format(**dict(zip(keys, row))),
                            "row": " | ".join(row), "header": " | ".join(table.header)})
                asked += 1
    return out


def holds(chunk: str, line: str) -> bool:
    """The line's cells, whole and in order, in the chunk: whitespace collapsed, each bounded by "|", a space or an
    end (a Markdown row's outer pipes, the prose chunker's rows run together)."""
    return f" {_squeeze(line)} " in f" {_squeeze(chunk)} "


def _squeeze(text: str) -> str:
    return " ".join(text.replace("|", " | ").split())


# ---------------------------------------------------------------- the peer's chunks

def split_recursive(text: str, separators: tuple[str, ...] = PEER_SEPARATORS) -> list[str]:
    """LangChain's RecursiveCharacterTextSplitter as usually configured (chunk_size 1000, chunk_overlap 200): split
    on the first separator the text holds, merge the pieces up to the size, split a piece too long by the next. One
    difference: a piece's separator is not counted in its length (LangChain keeps it at the piece's start)."""
    at = next((i for i, s in enumerate(separators) if s in text), len(separators) - 1)
    separator, finer = separators[at], separators[at + 1:]
    chunks, short = [], []
    for piece in text.split(separator):
        if len(piece) < PEER_CHUNK:
            short.append(piece)
            continue
        chunks += _merge(short, separator)
        short = []
        chunks += split_recursive(piece, finer) if finer else [piece]
    return chunks + _merge(short, separator)


def _merge(pieces: list[str], separator: str) -> list[str]:
    """LangChain's `_merge_splits`: fill a chunk, then keep its tail of at most PEER_OVERLAP characters."""
    chunks, current, total, sep = [], [], 0, len(separator)
    for piece in pieces:
        if current and total + len(piece) + sep > PEER_CHUNK:
            if text := separator.join(current).strip():
                chunks.append(text)
            while current and (total > PEER_OVERLAP or total + len(piece) + sep > PEER_CHUNK):
                total -= len(current.pop(0)) + (sep if len(current) > 0 else 0)
        current.append(piece)
        total += len(piece) + (sep if len(current) > 1 else 0)
    if text := separator.join(current).strip():
        chunks.append(text)
    return chunks


def markitdown_documents(converter, files: list[Path], titles: dict[str, str]) -> list[NewDocument]:
    """Each file as markitdown converts it (`converter`: a `MarkItDown`), in the peer's chunks."""
    from markitdown import StreamInfo

    docs = []
    for path in files:
        info = StreamInfo(extension=path.suffix, filename=path.name)
        text = converter.convert_stream(io.BytesIO(path.read_bytes()), stream_info=info).text_content or ""
        title = titles[path.stem]
        docs.append(NewDocument(key=path.stem, title=title, text=text, chunks=split_recursive(text) or [title],
                                content_hash=content_hash(title, text, "{}")))
    return docs


# ---------------------------------------------------------------- ingest and search

_real_chunk_blocks = library_files.chunk_blocks


def _as_prose(blocks, limits):
    """`chunk_blocks` as it was before table blocks: every block is prose."""
    return _real_chunk_blocks([replace(b, header=None) for b in blocks], limits)


async def ingest(services, system: str, tenant: str, files: list[Path], titles: dict[str, str], converter) -> dict:
    """The files into a tenant of their own, indexed: seconds taken (parse or convert, chunk, encode, index) and the
    stored chunks' texts."""
    started = time.perf_counter()
    if system == "markitdown":
        docs = await asyncio.to_thread(markitdown_documents, converter, files, titles)
        result = await services.library.write(tenant, PARTITION, docs, wait=True)
        failed = 0
    else:
        inputs = [FileInput(p.name, p.read_bytes(), id=p.stem) for p in files]
        with mock.patch.object(library_files, "chunk_blocks", _as_prose if system == "prose" else _real_chunk_blocks):
            result = await services.files.ingest(tenant, PARTITION, inputs, wait=True)
        failed = sum(f.error is not None for f in result.files)
    seconds = time.perf_counter() - started
    assert result.index_error is None and not failed, (result.index_error, failed)
    snapshot = services.library.snapshot(tenant, PARTITION)
    return {"ingest_s": round(seconds, 2), "texts": [snapshot.text(row) for row in range(snapshot.size)]}


async def score(services, tenant: str, asked: list[dict], texts: list[str]) -> dict:
    """One k=10 search a question: the rank of the first chunk holding its row (0: none in the top 10)."""
    ranks, shown = [], []
    for q in asked:
        page = await services.retriever.search(q["question"], PartitionFilter(tenant), k=10)
        rank, best = next(((i, h.chunk.text) for i, h in enumerate(page.hits, 1) if holds(h.chunk.text, q["row"])),
                          (0, ""))
        ranks.append(rank)
        if 0 < rank <= 5:
            shown.append(holds(best, q["header"]))
    hits = [0 < r <= 5 for r in ranks]
    kinds = [f"{q['table']} / {q['template']}" for q in asked]
    return {"recall@5": _mean(hits), "mrr@10": _mean([1 / r if r else 0.0 for r in ranks]),
            "header_shown": _mean(shown), "rows_intact": _mean([any(holds(t, q["row"]) for t in texts) for q in asked]),
            "chunks": len(texts), "ranks": ranks,
            "by_template": {k: _mean([h for h, kind in zip(hits, kinds) if kind == k]) for k in dict.fromkeys(kinds)}}


def _mean(values: list) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


# ---------------------------------------------------------------- the run

def build(docs: list[Doc], folder: Path, log) -> tuple[list[Path], dict[str, str], dict]:
    """The files written into `folder`; the title ours parses from each (the peer's documents get it too) and the
    share of rows whose line our parser gives back."""
    files, titles, rows, parsed_rows = [], {}, 0, 0
    for doc in docs:
        path = folder / doc.file
        path.write_bytes(WRITERS[path.suffix](doc))
        parsed = parse_bytes(path.read_bytes())
        titles[path.stem] = parsed.title or path.stem
        lines = {_squeeze(line) for block in parsed.blocks for line in block.text.split("\n")}
        for table in doc.tables:
            rows += len(table.rows)
            parsed_rows += sum(_squeeze(" | ".join(row)) in lines for row in table.rows)
        files.append(path)
        log(f"  {doc.file}: {path.stat().st_size / 1024:.0f} KiB, {sum(len(t.rows) for t in doc.tables)} rows, "
            f"{sum(b.is_table for b in parsed.blocks)} table blocks")
    return files, titles, {"files": len(files), "rows": rows, "rows_parsed_as_lines": parsed_rows}


async def run_systems(files: list[Path], titles: dict[str, str], asked: list[dict], data_dir: Path, repeats: int,
                      log) -> dict:
    """Each system `repeats` times, in turn, a fresh tenant each time: the same files and questions can rank a near
    tie differently from one ingest to the next, so the figures are means with their range."""
    from markitdown import MarkItDown

    converter, runs = MarkItDown(enable_plugins=False), {s: [] for s in SYSTEMS}  # built once, untimed
    async with open_services(machine.retrieval_settings(data_dir), warm_up=True, generation=False) as services:
        # every file once, untimed: the parser workers' imports and the encoders' first batches are not charged to
        # the system ingested first
        await services.files.ingest("warm-up", PARTITION, [FileInput(p.name, p.read_bytes()) for p in files])
        await asyncio.to_thread(markitdown_documents, converter, files, titles)
        for run, system in ((run, system) for run in range(repeats) for system in SYSTEMS):
            ingested = await ingest(services, system, f"{system}-{run}", files, titles, converter)
            started = time.perf_counter()
            scored = await score(services, f"{system}-{run}", asked, ingested.pop("texts"))
            runs[system].append({**ingested, **scored, "search_s": round(time.perf_counter() - started, 2)})
            log(f"  run {run + 1}, {SYSTEMS[system]}: recall@5 {scored['recall@5']:.3f}, MRR@10 "
                f"{scored['mrr@10']:.3f}, header shown {scored['header_shown']:.3f}, {scored['chunks']} chunks, "
                f"ingest {ingested['ingest_s']:.1f} s")
    return {system: summary(done) for system, done in runs.items()}


def summary(runs: list[dict]) -> dict:
    """The runs' mean of each figure, the range of recall@5 and MRR@10, and the runs themselves."""
    out = {key: _mean([r[key] for r in runs]) for key in runs[0] if isinstance(runs[0][key], (int, float))}
    out["by_template"] = {k: _mean([r["by_template"][k] for r in runs]) for k in runs[0]["by_template"]}
    for key in ("recall@5", "mrr@10"):
        out[f"{key}_range"] = [min(r[key] for r in runs), max(r[key] for r in runs)]
    return {**out, "runs": runs}


def markdown(r: dict) -> str:
    m, data, runs = r["meta"], r["data"], r["systems"]
    lines = machine.report_header("Tables benchmark", r, "bench-tables", "3 files, 5 questions a table") + [
        f"- Data: the ISO tables of pycountry {m['packages'].get('pycountry')} (3166-1, 3166-3, 4217, 15924, 639-5, "
        f"3166-2 of 14 countries, a seeded sample of 639-3), written at run time as {data['files']} files "
        f"({', '.join(data['formats'])}), {data['rows']} rows in all: each a heading, a paragraph or two of prose and "
        f"one or two tables under a header row. Our parser gives {data['rows_parsed_as_lines']} of the rows back as "
        "lines.",
        f"- Questions: {len(r['questions'])}, up to {m['per_table']} a table (seed {SEED}), from templates naming the "
        "column, over rows whose asked-for cells are unique in their table. Hit: a retrieved chunk holding the row's "
        "line (cells joined by \" | \", whitespace collapsed); recall@5 and MRR@10 from one hybrid k=10 search "
        "(default settings). Header shown: of the top-5 hits, the share whose best chunk also holds the header row. "
        "Rows intact: the share of judged rows whole inside some stored chunk (recall's ceiling).",
        "- Systems, one set of services, a tenant each: **ours**: the files through the product's file ingest "
        "(parser workers, `chunk_blocks`, encoders, index). **before**: the same, with "
        "`appliance.library.files.chunk_blocks` patched to hand every block over with `header=None`: tables "
        "chunked as prose, as before table blocks. **markitdown**: `MarkItDown().convert_stream` per file, its "
        f"Markdown split RecursiveCharacterTextSplitter-style ({PEER_CHUNK} characters, {PEER_OVERLAP} overlap, "
        "\"\\n\\n\", \"\\n\", \" \"), the chunks stored as they are with the title ours parsed (`Library.write`) "
        "and searched by the same retriever: only conversion and chunking differ. Ingest s: parse or convert, chunk, "
        "encode and index, after an untimed warm-up ingest of every file.",
        f"- Each system ingested and searched {m['repeats']} times in turn, a fresh tenant each time; the figures are "
        "means, with the range over the runs in brackets where they differ (the same files and questions can rank "
        "a near tie differently from one ingest to the next).", "",
        "| system | recall@5 | MRR@10 | header shown | rows intact | chunks | ingest s | recall@5 vs ours | "
        "MRR@10 vs ours |", "|---|---|---|---|---|---|---|---|---|"]
    ours = runs["ours"]
    for key, name in SYSTEMS.items():
        s = runs[key]
        lines.append(f"| {name} | {_spread(s, 'recall@5')} | {_spread(s, 'mrr@10')} | {s['header_shown']:.3f} | "
                     f"{s['rows_intact']:.3f} | {s['chunks']:.0f} | {s['ingest_s']:.1f} | "
                     f"{_ratio(s['recall@5'], ours['recall@5'])} | {_ratio(s['mrr@10'], ours['mrr@10'])} |")
    lines += ["", "recall@5 per table and question template:", "",
              "| table | template | questions | " + " | ".join(SYSTEMS.values()) + " |",
              "|---|---|---|" + "---|" * len(SYSTEMS)]
    counts = Counter(f"{q['table']} / {q['template']}" for q in r["questions"])
    for key, n in counts.items():
        table, template = key.split(" / ", 1)
        lines.append(f"| {table} | {template} | {n} | "
                     + " | ".join(f"{runs[k]['by_template'][key]:.3f}" for k in SYSTEMS) + " |")
    return "\n".join(lines) + "\n"


def _spread(system: dict, key: str) -> str:
    low, high = system[f"{key}_range"]
    return f"{system[key]:.3f}" + (f" ({low:.3f}-{high:.3f})" if low != high else "")


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"


async def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    log = machine.progress_log(started)
    per_table = 5 if args.quick else QUESTIONS_PER_TABLE
    results: dict = {"meta": {**machine.machine_info(PACKAGES), "quick": args.quick, "per_table": per_table,
                              "repeats": args.repeats}}
    rng = random.Random(SEED)
    docs = documents(load_tables(rng), results["meta"]["packages"]["pycountry"])
    docs = [docs[i] for i in (0, 1, 2)] if args.quick else docs
    asked = questions(docs, per_table, rng)
    step = machine.step_runner(results)
    with tempfile.TemporaryDirectory(prefix="bench-tables-") as tmp:
        (Path(tmp) / "files").mkdir()
        files, titles, data = build(docs, Path(tmp) / "files", log)
        results["data"] = {**data, "formats": sorted({p.suffix.lstrip(".") for p in files})}
        await step("systems", run_systems(files, titles, asked, Path(tmp) / "data", args.repeats, log))
    results["questions"] = asked
    out = args.out or (REPO / "bench" / (".cache/tables-quick" if args.quick else "results/tables"))
    machine.write_results(out, results, markdown, started, lambda r: [], log)


if __name__ == "__main__":
    asyncio.run(main())
