"""Tables benchmark: questions about single rows of real tables in DOCX, HTML, Markdown and PPTX files, answered by
retrieval from ours (tables chunked as whole rows under their header), ours with tables chunked as prose (the
behaviour before table blocks), and markitdown + a LangChain-style character splitter, in the same run.

    .venv/bin/python bench/tables.py            # 8 files, ~320 questions (`just bench-tables`)
    .venv/bin/python bench/tables.py --quick    # 3 files, 5 questions a table: for debugging

Data: the ISO tables that the `pycountry` package ships (countries, withdrawn countries, currencies, scripts,
language groups, a seeded sample of ISO 639-3 languages, subdivisions of 14 countries), written at run time into
files of four formats, each with its heading, a paragraph or two of prose and one or two tables under a header row.
Questions come from templates that name the column ("What is the numeric code of the country Norway?") over a
seeded sample of rows whose asked-for cells are unique in their table. The judged passage is the row: a hit is a
retrieved chunk holding the row's line (its cells joined by " | ", whitespace collapsed, whole cells).

Systems, one set of services (default settings), each in a tenant of its own:
- ours: the files through `FileIngester.ingest` (parser workers, `chunk_blocks`, encoders, index);
- ours, tables as prose: the same with `chunk_blocks` handed every block with `header=None` (patched in
  `appliance.library.files`), which is what the chunker made of a table before;
- markitdown: `MarkItDown().convert_stream` per file, its Markdown split by `split_recursive` (1000 characters,
  200 overlap, "\\n\\n" then "\\n" then " ", as LangChain's RecursiveCharacterTextSplitter is usually set up), those
  chunks stored as they are (`Library.write`, the title ours parsed) and searched by the same retriever.
Each question: one hybrid search, k=10. recall@5, MRR@10, and "header shown": of the hits in the top 5, the share
whose best chunk also holds the table's header row (what a prompt shows the model beside the row).

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

from appliance.config import load_settings  # noqa: E402  (onnxruntime before usearch: see MODELS.md)
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
    templates: list[str]  # str.format over the row's cells by column name (spaces as underscores)
    caption: str = ""

    @property
    def header_line(self) -> str:
        return " | ".join(self.header)


@dataclass(slots=True)
class Doc:
    file: str  # its name; the extension says the format
    title: str
    prose: list[str]  # paragraphs: the first before the tables, the rest after
    tables: list[Table]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 files, 5 questions a table, written to bench/.cache")
    p.add_argument("--out", type=Path, help="default: bench/results/tables (--quick: bench/.cache/tables-quick)")
    return p.parse_args(argv)


def settings(data_dir: Path):
    return load_settings(env={"APPLIANCE_DATA_DIR": str(data_dir), "APPLIANCE_MODELS_DIR": str(REPO / "models"),
                              "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_GENERATE_ENABLED": "false",
                              "APPLIANCE_LOG_LEVEL": "warning"})


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
    language_templates = ["What is the ISO 639-3 code of the {Language} language?", "Which language has the code {Code}?",
                          "What type of language is {Language}?"]
    sub_header = ["Code", "Subdivision", "Type", "Country"]
    sub_templates = ["What is the ISO 3166-2 code of {Subdivision} in {Country}?",
                     "Which subdivision has the code {Code}?", "What type of subdivision is {Subdivision}, {Country}?"]
    return {t.name: t for t in [
        Table("countries", ["Country", "Alpha-2 code", "Alpha-3 code", "Numeric code"],
              [[c.name, c.alpha_2, c.alpha_3, c.numeric] for c in pycountry.countries],
              ["What is the numeric code of the country {Country}?", "What is the alpha-3 code of {Country}?",
               "Which country has the alpha-2 code {Alpha_2_code}?"]),
        Table("withdrawn", ["Former country", "Alpha-3 code", "Alpha-4 code", "Withdrawn"],
              [[c.name, c.alpha_3, c.alpha_4, c.withdrawal_date] for c in pycountry.historic_countries],
              ["In which year was the country code of {Former_country} withdrawn?",
               "What is the alpha-4 code of the former country {Former_country}?"]),
        Table("currencies", ["Currency code", "Numeric code", "Currency"],
              [[c.alpha_3, c.numeric, c.name] for c in pycountry.currencies],
              ["Which currency has the ISO code {Currency_code}?", "What is the numeric code of the currency {Currency}?",
               "What is the three-letter code of the currency {Currency}?"], caption="ISO 4217 currency codes"),
        Table("scripts", ["Script code", "Numeric code", "Script name"],
              [[s.alpha_4, s.numeric, s.name] for s in pycountry.scripts],
              ["What is the four-letter code of the {Script_name} script?",
               "Which script has the numeric code {Numeric_code}?"]),
        Table("language groups", ["Code", "Language group"],
              [[g.alpha_3, g.name] for g in pycountry.language_families],
              ["What is the ISO 639-5 code of {Language_group}?", "Which language group has the code {Code}?"]),
        Table("languages (slides)", language_header, language_rows[:LANGUAGE_ROWS], language_templates),
        Table("languages (markdown)", language_header, language_rows[LANGUAGE_ROWS:], language_templates),
        Table("subdivisions (Europe)", sub_header, _subdivisions(["DE", "ES", "FR", "IT", "NL", "PL"]), sub_templates),
        Table("subdivisions (Americas)", sub_header,
              _subdivisions(["AR", "BR", "CA", "CL", "CO", "MX", "PE", "US"]), sub_templates,
              caption="ISO 3166-2 subdivision codes"),
    ]}


def documents(tables: dict[str, Table], version: str) -> list[Doc]:
    src = f"The entries below are those of the pycountry package, version {version}, which ships the ISO lists."
    return [
        Doc("country-codes.docx", "Country codes", [
            "ISO 3166-1 gives every country three codes: two letters, three letters and three digits. " + src,
            "Codes of countries that no longer exist are kept for some years after they are withdrawn (ISO 3166-3)."],
            [tables["countries"], tables["withdrawn"]]),
        Doc("currency-codes.html", "Currency codes", [
            "ISO 4217 names each currency by three letters, the first two of which are usually its country's. " + src,
            "Funds and precious metals have codes of their own."], [tables["currencies"]]),
        Doc("script-codes.md", "Writing systems", [
            "ISO 15924 gives each writing system a four-letter code and a three-digit number. " + src],
            [tables["scripts"]]),
        Doc("language-groups.html", "Language groups", [
            "ISO 639-5 codes name families and groups of languages rather than single languages. " + src],
            [tables["language groups"]]),
        Doc("languages.pptx", "Languages of the world, part one", [
            "A sample of the ISO 639-3 code list: three letters for each individual language. " + src],
            [tables["languages (slides)"]]),
        Doc("languages-more.md", "Languages of the world, part two", [
            "A second sample of the ISO 639-3 code list, with each language's scope and type. " + src],
            [tables["languages (markdown)"]]),
        Doc("subdivisions-europe.docx", "Subdivisions in Europe", [
            "ISO 3166-2 codes the regions, provinces and departments of each country after its alpha-2 code. " + src],
            [tables["subdivisions (Europe)"]]),
        Doc("subdivisions-americas.html", "Subdivisions in the Americas", [
            "States, provinces and departments of eight countries of the Americas, by ISO 3166-2 code. " + src],
            [tables["subdivisions (Americas)"]]),
    ]


def write_docx(doc: Doc) -> bytes:
    import docx
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    out = docx.Document()
    out.add_heading(doc.title, 0)
    out.add_paragraph(doc.prose[0])
    for table in doc.tables:
        out.add_heading(table.name.capitalize(), 1)
        grid = out.add_table(rows=1 + len(table.rows), cols=len(table.header))
        grid.rows[0]._tr.get_or_add_trPr().append(OxmlElement("w:tblHeader"))  # Word's "repeat as header row"
        for row, cells in zip(grid.rows, [table.header, *table.rows]):
            for cell, text in zip(row.cells, cells):
                cell.text = text
        assert grid.rows[0]._tr.trPr.find(qn("w:tblHeader")) is not None
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
        parts += [f"<h2>{e(table.name.capitalize())}</h2>",
                  f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>"]
    parts += [f"<p>{e(p)}</p>" for p in doc.prose[1:]] + ["</body></html>"]
    return "\n".join(parts).encode("utf-8")


def write_markdown(doc: Doc) -> bytes:
    parts = [f"# {doc.title}", doc.prose[0]]
    for table in doc.tables:
        lines = ["| " + " | ".join(table.header) + " |", "|" + "---|" * len(table.header)]
        lines += ["| " + " | ".join(row) + " |" for row in table.rows]
        parts += [f"## {table.name.capitalize()}", "\n".join(lines)]
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
            slide.shapes.title.text = f"{table.name.capitalize()} ({number} of {len(parts)})"
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
                out.append({"id": len(out), "file": doc.file, "table": table.name,
                            "question": table.templates[n].format(**dict(zip(keys, row))),
                            "row": " | ".join(row), "header": table.header_line})
                asked += 1
    return out


def holds(chunk: str, line: str) -> bool:
    """The line's cells, whole, in the chunk: whitespace collapsed, a cell bounded by a space, "|" or an end."""
    return f" {' '.join(line.split())} " in f" {' '.join(chunk.replace('|', ' | ').split())} "


# ---------------------------------------------------------------- the peer's chunks

def split_recursive(text: str, separators: tuple[str, ...] = PEER_SEPARATORS) -> list[str]:
    """LangChain's RecursiveCharacterTextSplitter as usually configured (chunk_size 1000, chunk_overlap 200): split
    on the first separator the text holds, merge the pieces up to the size, split a piece too long by the next."""
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


def markitdown_documents(files: list[Path], titles: dict[str, str]) -> list[NewDocument]:
    from markitdown import MarkItDown, StreamInfo

    md, docs = MarkItDown(enable_plugins=False), []
    for path in files:
        info = StreamInfo(extension=path.suffix, filename=path.name)
        text = md.convert_stream(io.BytesIO(path.read_bytes()), stream_info=info).text_content or ""
        title = titles[path.stem]
        docs.append(NewDocument(key=path.stem, title=title, text=text, chunks=split_recursive(text) or [title],
                                content_hash=content_hash(title, text, "{}")))
    return docs


# ---------------------------------------------------------------- ingest and search

def _as_prose(blocks, limits):
    """`chunk_blocks` as it was before table blocks: every block is prose."""
    return _real_chunk_blocks([replace(b, header=None) for b in blocks], limits)


_real_chunk_blocks = library_files.chunk_blocks


async def ingest(services, system: str, files: list[Path], titles: dict[str, str]) -> dict:
    started = time.perf_counter()
    if system == "markitdown":
        docs = await asyncio.to_thread(markitdown_documents, files, titles)
        result = await services.library.write(system, PARTITION, docs, wait=True)
        failed = 0
    else:
        inputs = [FileInput(p.name, p.read_bytes(), id=p.stem) for p in files]
        with mock.patch.object(library_files, "chunk_blocks", _as_prose if system == "prose" else _real_chunk_blocks):
            result = await services.files.ingest(system, PARTITION, inputs, wait=True)
        failed = sum(f.error is not None for f in result.files)
    seconds = time.perf_counter() - started
    assert result.index_error is None and not failed, (result.index_error, failed)
    snapshot = services.library.snapshot(system, PARTITION)
    texts = [snapshot.text(row) for row in range(snapshot.size)]
    return {"ingest_s": round(seconds, 2), "chunks": len(texts), "texts": texts}


async def score(services, system: str, asked: list[dict], texts: list[str]) -> dict:
    """One k=10 search a question; each question's rank of its first chunk holding the row (0: none in the top 10)."""
    where, ranks, shown = PartitionFilter(system), [], []
    for q in asked:
        page = await services.retriever.search(q["question"], where, k=10)
        found = [h.chunk.text for h in page.hits if holds(h.chunk.text, q["row"])]
        rank = next((i for i, h in enumerate(page.hits, 1) if holds(h.chunk.text, q["row"])), 0)
        ranks.append(rank)
        if 0 < rank <= 5:
            shown.append(holds(found[0], q["header"]))
    intact = [any(holds(t, q["row"]) for t in texts) for q in asked]
    hits = [0 < r <= 5 for r in ranks]
    return {"recall@5": _mean(hits), "mrr@10": _mean([1 / r if r else 0.0 for r in ranks]),
            "header_shown": _mean(shown), "rows_intact": _mean(intact), "ranks": ranks,
            "by_table": {t: _mean([h for h, q in zip(hits, asked) if q["table"] == t])
                         for t in dict.fromkeys(q["table"] for q in asked)}}


def _mean(values: list) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0
