"""Parsing benchmark: our parsers against markitdown (and, for PDF, pypdf and pdfminer.six) on the SciFact and CMRC
document-file fixtures, retrieval from files against retrieval from the same texts, and mixed-file ingest end to end.

    .venv/bin/python bench/parse.py            # the full run (`just bench-parse`)
    .venv/bin/python bench/parse.py --quick    # a few files per format, one encoder: for debugging

Writes bench/results/parse.md and .json (quick runs: bench/.cache/parse-quick.*). Steps run one after another, so
no two measurements compete for the cores:

1. Fidelity and speed: every file of both folders through every tool in this process, one file at a time, the
   tools interleaved file by file (so a busy moment on the box costs all of them alike). Ours is `parse_bytes`
   in-process, single thread: like for like with the peers, which are plain in-process libraries.
2. Retrieval: `appliance.evaluate.evaluate_retrieval` on each folder (files parsed) and on a folder holding only
   its corpus.jsonl, queries and qrels (the same texts, ingested as text): same settings, same run.
3. Ingest: all files of both folders through `services.files.ingest` in a fresh data folder; then the parse stage
   alone through a `ParserPool` and the encode+index stage alone (`library.reindex`), to show where the time goes.
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import difflib
import io
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from appliance.config import load_settings  # noqa: E402  (onnxruntime before usearch: see MODELS.md)
from appliance.evaluate import evaluate_retrieval  # noqa: E402
from appliance.library import FileInput  # noqa: E402
from appliance.parse import ParseError, ParserPool, parse_bytes  # noqa: E402
from appliance.wiring import open_services, parse_limits  # noqa: E402

import machine  # noqa: E402

REPO = machine.REPO
DATA = REPO.parent / "shared" / "data"
FOLDERS = {"scifact": DATA / "scifact_files", "cmrc": DATA / "cmrc_files"}
TARGET_DELTA = {"scifact": 0.01, "cmrc": 0.02}  # |nDCG@10 from files - nDCG@10 from texts|, from the issue
PACKAGES = ["rag-appliance", "pypdfium2", "python-docx", "python-pptx", "lxml", "selectolax", "markdown-it-py",
            "charset-normalizer", "markitdown", "pdfminer.six", "pdfplumber", "mammoth", "markdownify",
            "beautifulsoup4", "magika", "pypdf", "onnxruntime", "usearch", "numpy"]
ORDER_CAP = 2000  # tokens per side for the order-aware ratio
INGEST_BATCH = 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a few files per format; results go to bench/.cache")
    p.add_argument("--repeats", type=int, default=2, help="step 1: passes over the files; each file's best time")
    p.add_argument("--skip-fidelity", action="store_true")
    p.add_argument("--skip-retrieval", action="store_true")
    p.add_argument("--skip-ingest", action="store_true")
    p.add_argument("--cmrc-encoders", default="minilm,use",
                   help="encoders for the CMRC retrieval runs (SciFact: the default, minilm); a model that is not "
                        "built under models/build is skipped and reported so")
    p.add_argument("--out", type=Path, default=None, help="output path without suffix")
    args = p.parse_args(argv)
    args.out = args.out or (REPO / "bench" / ".cache" / "parse-quick" if args.quick
                            else REPO / "bench" / "results" / "parse")
    return args


def make_settings(data_dir: Path, encoder: str | None = None):
    env = {"APPLIANCE_DATA_DIR": str(data_dir), "APPLIANCE_MODELS_DIR": str(REPO / "models"),
           "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_GENERATE_ENABLED": "false", "APPLIANCE_LOG_LEVEL": "warning"}
    if encoder:
        env["APPLIANCE_ENCODER_MODEL"] = encoder
    return load_settings(env=env)


# ---------------------------------------------------------------- the fixtures

@dataclass(slots=True)
class FileCase:
    dataset: str
    doc_id: str
    path: Path
    ext: str
    producer: str
    data: bytes
    reference: str  # title + text from corpus.jsonl
    pages: int | None  # PDFs: page count (pypdfium2, outside any timing)

    @property
    def group(self) -> str:
        return f"{self.ext} ({self.producer})" if self.ext == "pdf" else self.ext


def load_cases(quick: bool) -> list[FileCase]:
    import pypdfium2 as pdfium

    cases = []
    for dataset, folder in FOLDERS.items():
        corpus = {}
        with open(folder / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    corpus[str(d["_id"])] = "\n".join(x for x in (d.get("title") or "", d.get("text") or "") if x)
        with open(folder / "manifest.tsv", encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        taken: Counter[str] = Counter()
        for row in rows:
            if quick and taken[row["producer"]] >= 4:
                continue
            taken[row["producer"]] += 1
            path = folder / row["file"]
            data = path.read_bytes()
            ext = path.suffix.lstrip(".").lower()
            pages = None
            if ext == "pdf":
                doc = pdfium.PdfDocument(data)
                pages = len(doc)
                doc.close()
            cases.append(FileCase(dataset, row["doc-id"], path, ext, row["producer"], data, corpus[row["doc-id"]],
                                  pages))
    return cases


PPTX_DECKS = {"scifact": 60, "cmrc": 40}  # neither folder has PowerPoint files: decks are made from their texts
_SENTENCE_END = re.compile(r"[.!?]\s+|[。！？]")


def pptx_cases(quick: bool) -> list[FileCase]:
    """Decks made with python-pptx from the first documents of each folder's corpus.jsonl: the title on a title
    slide, then the text a few sentences (about 400 characters) a slide, in a text box."""
    import pptx
    from pptx.util import Inches

    cases = []
    for dataset, folder in FOLDERS.items():
        with open(folder / "corpus.jsonl", encoding="utf-8") as f:
            docs = [json.loads(line) for line in f if line.strip()][:4 if quick else PPTX_DECKS[dataset]]
        for d in docs:
            title, text = d.get("title") or "", d.get("text") or ""
            deck = pptx.Presentation()
            slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
            slide.shapes.title.text = title
            for piece in _slide_texts(text):
                box = deck.slides.add_slide(deck.slide_layouts[6]).shapes.add_textbox(
                    Inches(0.5), Inches(0.5), Inches(9), Inches(6))
                box.text_frame.word_wrap = True
                box.text_frame.text = piece
            out = io.BytesIO()
            deck.save(out)
            reference = "\n".join(x for x in (title, text) if x)
            cases.append(FileCase(dataset, f"{d['_id']}-deck", Path(f"{d['_id']}.pptx"), "pptx", "python-pptx",
                                  out.getvalue(), reference, len(deck.slides)))
    return cases


def _slide_texts(text: str, size: int = 400) -> list[str]:
    """The text cut after a sentence (". " or a CJK full stop) once a piece reaches `size` characters."""
    pieces, start = [], 0
    for end in (m.end() for m in _SENTENCE_END.finditer(text)):
        if end - start >= size:
            pieces.append(text[start:end].strip())
            start = end
    return [p for p in pieces + [text[start:].strip()] if p]


# ---------------------------------------------------------------- the tools: bytes -> (title, body)

def ours(case: FileCase) -> tuple[str, str]:
    doc = parse_bytes(case.data)
    return doc.title, "\n\n".join(b.text for b in doc.blocks)


class MarkItDownTool:
    """markitdown as a user calls it on a file path: the bytes plus the file's name and extension as hints (without
    them it refuses the GB18030 .txt files: "No converter attempted a conversion")."""

    def __init__(self):
        from markitdown import MarkItDown, StreamInfo

        self._md, self._info = MarkItDown(enable_plugins=False), StreamInfo

    def __call__(self, case: FileCase) -> tuple[str, str]:
        info = self._info(extension="." + case.ext, filename=case.path.name)
        result = self._md.convert_stream(io.BytesIO(case.data), stream_info=info)
        return result.title or "", result.text_content or ""


def pypdf_text(case: FileCase) -> tuple[str, str]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(case.data))
    return "", "\n".join(page.extract_text() or "" for page in reader.pages)


def pdfminer_text(case: FileCase) -> tuple[str, str]:
    from pdfminer.high_level import extract_text

    return "", extract_text(io.BytesIO(case.data))


TOOLS = ["ours", "markitdown", "pypdf", "pdfminer"]
PDF_ONLY = {"pypdf", "pdfminer"}
MARKDOWN_TOOLS = {"markitdown"}


# ---------------------------------------------------------------- scoring

_SPACE = re.compile(r"\s+")
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(f"[{_CJK}]|[^\\W{_CJK}]+|[^\\w\\s]")  # a word, one CJK character, or one punctuation mark
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+", re.M)
_MD_RULE = re.compile(r"^[ \t]*(?:[-*_][ \t]*){3,}$"  # a thematic break
                      r"|^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$", re.M)  # table rule
_MD_BULLET = re.compile(r"^[ \t]*[-*+][ \t]+", re.M)
_MD_EMPHASIS = re.compile(r"\*\*|__")
_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>~])")
_MD_COMMENT = re.compile(r"<!--.*?-->", re.S)  # markitdown's "<!-- Slide number: 3 -->"


def strip_markdown(text: str) -> str:
    """Light: headings' #, links and images to their text, rules and table separator rows, bullets, ** and __,
    table pipes, backslash escapes, HTML comments. Enough that markitdown is not charged for its own syntax."""
    text = _MD_COMMENT.sub("", text)
    text = _MD_LINK.sub(r"\1", text)
    text = _MD_RULE.sub("", text)
    text = _MD_HEADING.sub("", text)
    text = _MD_BULLET.sub("", text)
    text = _MD_EMPHASIS.sub("", text)
    text = text.replace("|", " ")
    return _MD_ESCAPE.sub(r"\1", text)


def scored_text(tool: str, title: str, body: str) -> str:
    """What each tool gives as the document's text. Ours: its title, then its blocks (the title heading is not a
    block). markitdown: its Markdown, lightly stripped; its `title` (HTML <title>) is left out, the Markdown
    already holds the heading. pypdf, pdfminer: their text (no title of their own)."""
    if tool == "ours":
        return f"{title}\n{body}" if title else body
    return strip_markdown(body) if tool in MARKDOWN_TOOLS else body


def squeeze(text: str, form: str = "NFC") -> str:
    return _SPACE.sub("", unicodedata.normalize(form, text))


def char_prf(reference: str, extracted: str, form: str = "NFC") -> tuple[float, float, float]:
    """Precision, recall and F1 of the two texts as multisets of characters, whitespace removed (NFC, nothing else:
    a ligature glyph or a wrong decoding counts as a wrong character; NFKC: ligatures and width variants folded)."""
    ref, hyp = Counter(squeeze(reference, form)), Counter(squeeze(extracted, form))
    overlap = sum((ref & hyp).values())
    n_ref, n_hyp = sum(ref.values()), sum(hyp.values())
    p = overlap / n_hyp if n_hyp else 0.0
    r = overlap / n_ref if n_ref else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def order_ratio(reference: str, extracted: str) -> tuple[float, int]:
    """difflib SequenceMatcher.ratio over tokens (words, single CJK characters, punctuation marks), so whitespace
    does not count but order, split or merged words and boilerplate do; the first ORDER_CAP tokens of each side.
    Also: how many hyphenated words of the reference (`low-expression`) the extract has joined (`lowexpression`),
    the mark of a line-end hyphen taken for a soft one."""
    a = _TOKEN.findall(unicodedata.normalize("NFC", reference))[:ORDER_CAP]
    b = _TOKEN.findall(unicodedata.normalize("NFC", extracted))[:ORDER_CAP]
    if not a and not b:
        return 1.0, 0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    joined = sum(1 for op, i1, i2, j1, j2 in matcher.get_opcodes()
                 if op == "replace" and "-" in a[i1:i2] and "".join(a[i1:i2]).replace("-", "") == "".join(b[j1:j2]))
    return matcher.ratio(), joined


# ---------------------------------------------------------------- step 1: fidelity and speed

class NoNetwork:
    """Every outgoing connection attempt in this process refused and counted while the tools run: all of them must
    work offline (markitdown's converters, magika's bundled model)."""

    def __enter__(self):
        import socket

        self.attempts: list[str] = []
        self._socket, self._saved = socket.socket, (socket.socket.connect, socket.socket.connect_ex)

        def refuse(sock, address, *_):
            self.attempts.append(repr(address)[:100])
            raise OSError("network disabled by bench/parse.py")
        socket.socket.connect = socket.socket.connect_ex = refuse
        return self

    def __exit__(self, *exc_info):
        self._socket.connect, self._socket.connect_ex = self._saved


def fidelity(cases: list[FileCase], repeats: int, log) -> dict:
    with NoNetwork() as guard:
        result = _fidelity(cases, repeats, log)
    result["network_attempts"] = guard.attempts[:20]
    result["network_attempt_count"] = len(guard.attempts)
    return result


def _fidelity(cases: list[FileCase], repeats: int, log) -> dict:
    tools = {"ours": ours, "markitdown": MarkItDownTool(), "pypdf": pypdf_text, "pdfminer": pdfminer_text}
    applies = {name: (lambda c, n=name: n not in PDF_ONLY or c.ext == "pdf") for name in tools}
    # warm-up, untimed: each tool once per format (imports, magika's model, font caches)
    for group in sorted({c.group for c in cases}):
        case = next(c for c in cases if c.group == group)
        for name, tool in tools.items():
            if applies[name](case):
                try:
                    tool(case)
                except Exception:  # noqa: BLE001 - counted in the timed passes
                    pass
    best: dict[tuple[str, int], float] = {}
    outputs: dict[tuple[str, int], tuple[str, str] | str] = {}
    for rep in range(repeats):
        started = time.perf_counter()
        for i, case in enumerate(cases):
            for name, tool in tools.items():
                if not applies[name](case):
                    continue
                t0 = time.perf_counter()
                try:
                    out = tool(case)
                except Exception as exc:  # noqa: BLE001 - a failure is a result
                    out = f"{type(exc).__name__}: {exc}"[:300] if not isinstance(exc, ParseError) else \
                        f"ParseError {exc.code}: {exc.message}"[:300]
                elapsed = time.perf_counter() - t0
                best[name, i] = min(best.get((name, i), elapsed), elapsed)
                outputs.setdefault((name, i), out)
        log(f"  pass {rep + 1}/{repeats}: {len(cases)} files x tools in {time.perf_counter() - started:.0f} s")
    per_file = []
    for (name, i), out in outputs.items():
        case = cases[i]
        row = {"tool": name, "dataset": case.dataset, "group": case.group, "doc": case.doc_id, "bytes": len(case.data),
               "pages": case.pages, "seconds": best[name, i]}
        if isinstance(out, str):
            row.update(failed=True, error=out, p=0.0, r=0.0, f1=0.0, f1_nfkc=0.0, order=0.0, joined=0, chars=0)
        else:
            text = scored_text(name, *out)
            p, r, f1 = char_prf(case.reference, text)
            order, joined = order_ratio(case.reference, text)
            row.update(failed=False, p=p, r=r, f1=f1, f1_nfkc=char_prf(case.reference, text, "NFKC")[2], order=order,
                       joined=joined, chars=len(squeeze(text)))
        per_file.append(row)
    return {"files": len(cases), "repeats": repeats, "groups": summarise(per_file), "worst": worst_files(per_file),
            "errors": [{k: r[k] for k in ("tool", "dataset", "doc", "group", "error")} for r in per_file
                       if r["failed"]][:50]}


def summarise(per_file: list[dict]) -> list[dict]:
    buckets: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in per_file:
        buckets[r["dataset"], r["group"], r["tool"]].append(r)
        buckets[r["dataset"], "all formats", r["tool"]].append(r)
    out = []
    for (dataset, group, tool), rows in buckets.items():
        seconds = sum(r["seconds"] for r in rows)
        pages = sum(r["pages"] or 0 for r in rows)
        out.append({
            "dataset": dataset, "group": group, "tool": tool, "files": len(rows),
            "failed": sum(r["failed"] for r in rows),
            "precision": statistics.fmean(r["p"] for r in rows), "recall": statistics.fmean(r["r"] for r in rows),
            "f1": statistics.fmean(r["f1"] for r in rows), "f1_min": min(r["f1"] for r in rows),
            "f1_nfkc": statistics.fmean(r["f1_nfkc"] for r in rows),
            "order": statistics.fmean(r["order"] for r in rows), "order_min": min(r["order"] for r in rows),
            "hyphens_joined": sum(r["joined"] for r in rows),
            "files_below_0_95": sum(r["f1"] < 0.95 or r["order"] < 0.95 for r in rows),
            "seconds": seconds, "files_per_s": len(rows) / seconds if seconds else None,
            "mb_per_s": sum(r["bytes"] for r in rows) / 1e6 / seconds if seconds else None,
            "pages_per_s": pages / seconds if seconds and pages and all(r["pages"] for r in rows) else None,
        })
    rank = {t: i for i, t in enumerate(TOOLS)}
    out.sort(key=lambda g: (list(FOLDERS).index(g["dataset"]), g["group"] == "all formats", g["group"],
                            rank[g["tool"]]))
    return out


def worst_files(per_file: list[dict], n: int = 3) -> list[dict]:
    """Our lowest-F1 and lowest-order files per format, beside what markitdown made of the same file."""
    peer = {(r["dataset"], r["doc"]): r for r in per_file if r["tool"] == "markitdown"}
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in per_file:
        if r["tool"] == "ours":
            groups[r["dataset"], r["group"]].append(r)
    out = []
    for (dataset, group), rows in sorted(groups.items()):
        for r in sorted(rows, key=lambda r: (r["f1"] + r["order"]))[:n]:
            m = peer.get((dataset, r["doc"]))
            out.append({"dataset": dataset, "group": group, "doc": r["doc"], "f1": r["f1"], "order": r["order"],
                        "markitdown_f1": m["f1"] if m else None, "markitdown_order": m["order"] if m else None,
                        "error": r.get("error")})
    return out


# ---------------------------------------------------------------- step 2: retrieval, files vs texts

def text_only_folder(folder: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels"):
        (into / name).symlink_to(folder / name)
    return into


def subset_folder(folder: Path, cases: list[FileCase], into: Path) -> Path:
    """Quick runs: a fixture folder cut down to the files in `cases` (symlinks; corpus.jsonl filtered)."""
    (into / "files").mkdir(parents=True)
    keep = {c.doc_id for c in cases if c.path.parent.parent == folder}
    for c in cases:
        if c.doc_id in keep:
            (into / "files" / c.path.name).symlink_to(c.path)
    with open(folder / "corpus.jsonl", encoding="utf-8") as f, open(into / "corpus.jsonl", "w") as out:
        out.writelines(line for line in f if line.strip() and str(json.loads(line)["_id"]) in keep)
    for name in ("queries.jsonl", "qrels"):
        (into / name).symlink_to(folder / name)
    return into


async def retrieval(datasets: list[str], cmrc_encoders: list[str], cases: list[FileCase] | None, log) -> list[dict]:
    """`cases`: quick runs only, the files to keep (else every file of each folder)."""
    runs = []
    for dataset in datasets:
        for encoder in (cmrc_encoders if dataset == "cmrc" else ["minilm"]):
            if not (REPO / "models" / "build" / encoder).is_dir():
                runs.append({"dataset": dataset, "encoder": encoder, "skipped": f"models/build/{encoder} not built"})
                continue
            with tempfile.TemporaryDirectory(prefix="bench-parse-") as tmp:
                settings = make_settings(Path(tmp) / "unused", encoder)  # this encoder for every partition
                source = FOLDERS[dataset] if cases is None else subset_folder(FOLDERS[dataset], cases,
                                                                              Path(tmp) / "subset")
                texts = text_only_folder(source, Path(tmp) / "texts")
                run = {"dataset": dataset, "encoder": encoder}
                for label, folder in (("files", source), ("texts", texts)):
                    started = time.perf_counter()
                    report = await evaluate_retrieval(settings, folder)
                    report["wall_s"] = round(time.perf_counter() - started, 1)
                    run[label] = report
                    log(f"  {dataset} {encoder} from {label}: nDCG@10 {report['ndcg@10']:.4f} "
                        f"R@100 {report['recall@100']:.4f} ({report['wall_s']} s)")
            run["delta_ndcg"] = round(run["files"]["ndcg@10"] - run["texts"]["ndcg@10"], 4)
            run["delta_recall"] = round(run["files"]["recall@100"] - run["texts"]["recall@100"], 4)
            run["target"] = TARGET_DELTA[dataset]
            run["met"] = abs(run["delta_ndcg"]) <= TARGET_DELTA[dataset]
            runs.append(run)
    return runs


# ---------------------------------------------------------------- step 3: ingest end to end

async def ingest(cases: list[FileCase], log) -> dict:
    files = [FileInput(c.path.name, c.data, id=c.doc_id) for c in cases]
    random.Random(0).shuffle(files)  # formats and languages mixed, as a real folder would be
    total_bytes = sum(len(f.data) for f in files)
    out: dict = {"files": len(files), "bytes": total_bytes, "batch": INGEST_BATCH}
    with tempfile.TemporaryDirectory(prefix="bench-parse-ingest-") as tmp:
        settings = make_settings(Path(tmp) / "data")
        out.update(encoder=", ".join(settings.encoder.names()), encoder_threads=settings.encoder.threads,
                   parse_workers=settings.parse.workers)

        # the parse stage alone: a pool like the server's, all files queued at once
        pool = ParserPool(settings.parse.workers, settings.parse.timeout_s, settings.parse.max_memory_mib,
                          parse_limits(settings.parse, settings.models_dir))
        try:
            started = time.perf_counter()
            await pool.start()
            out["pool_start_s"] = time.perf_counter() - started
            started = time.perf_counter()
            results = await asyncio.gather(*(pool.parse(f.data) for f in files), return_exceptions=True)
            out["parse_pool_s"] = time.perf_counter() - started
            out["parse_pool_failed"] = sum(isinstance(r, BaseException) for r in results)
        finally:
            await pool.close()
        log(f"  parse only ({settings.parse.workers} worker processes): {out['parse_pool_s']:.1f} s "
            f"(+{out['pool_start_s']:.1f} s pool start)")

        started = time.perf_counter()
        async with open_services(settings, warm_up=False, generation=False) as services:
            out["boot_s"] = time.perf_counter() - started
            chunks = failed = 0
            started = time.perf_counter()
            for start in range(0, len(files), INGEST_BATCH):
                batch = files[start:start + INGEST_BATCH]
                last = start + INGEST_BATCH >= len(files)
                result = await services.files.ingest("bench", "files", batch, wait=last)
                chunks += sum(f.chunks or 0 for f in result.stored)
                failed += sum(f.error is not None for f in result.files)
            out["ingest_s"] = time.perf_counter() - started
            out.update(chunks=chunks, failed=failed, indexed=result.indexed, index_error=result.index_error)
            log(f"  end to end: {len(files)} files -> {chunks} chunks in {out['ingest_s']:.1f} s ({failed} failed)")

            started = time.perf_counter()
            reindexed = await services.library.reindex("bench", "files")
            out["reindex_s"] = time.perf_counter() - started
            out["reindexed_version"] = reindexed[0].indexed_version if reindexed else None
            log(f"  encode+index only (reindex): {out['reindex_s']:.1f} s")
    return out


# ---------------------------------------------------------------- report

def _f(x, digits=3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _rate(x) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _ratio(a, b) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def markdown(r: dict) -> str:
    lines = machine.report_header("Parsing benchmark", r, "bench-parse", "a few files per format")
    lines += [
        "- Data: `shared/data/scifact_files` (500 SciFact abstracts: PDF by LibreOffice and by Chromium, DOCX, HTML "
        "with site boilerplate, Markdown, UTF-8 text) and `shared/data/cmrc_files` (250 Chinese Wikipedia paragraphs: "
        "LibreOffice PDF, DOCX, HTML with boilerplate, GB18030 text); reference text = title + text from each "
        "folder's corpus.jsonl. Neither folder has PowerPoint files: the run makes decks with python-pptx from the "
        f"first {PPTX_DECKS['scifact']} SciFact and {PPTX_DECKS['cmrc']} CMRC texts (the title on a title slide, "
        "then about 400 characters of text a slide in a text box), fidelity and speed only.", "",
    ]
    if "fidelity" in r:
        lines += _fidelity_section(r["fidelity"])
    if "retrieval" in r:
        lines += _retrieval_section(r["retrieval"])
    if "ingest" in r:
        lines += _ingest_section(r["ingest"])
    lines += ["## Targets (from the issue)", ""]
    for t in r["targets"]:
        state = {True: "MET", False: "NOT MET", None: "NO VERDICT"}[t["met"]]
        lines.append(f"- {state}: {t['what']}: {t['measured']}")
    findings = _findings(r)
    if findings:
        lines += ["", "## What this shows", ""] + findings
    return "\n".join(lines) + "\n"


def _fidelity_section(fid: dict) -> list[str]:
    lines = [
        "## 1. Text fidelity and parse speed", "",
        f"How: every file ({fid['files']}) through each tool in this one process, one file at a time, the tools "
        f"interleaved file by file; a file's time is its best of {fid['repeats']} passes (file bytes already in "
        "memory; each tool warmed up once per format beforehand, untimed). Ours: `appliance.parse.parse_bytes` "
        "(format from the content, no file name). markitdown "
        "(`MarkItDown(enable_plugins=False).convert_stream` with the file's name and extension as a "
        "`StreamInfo`, as `convert(path)` does; PDF through pdfplumber/pdfminer), scored on its Markdown with the "
        "syntax lightly stripped (heading #, links, rules, table pipes, bullets, **, backslash escapes). pypdf: "
        "`PdfReader(...).pages[i].extract_text()` joined. pdfminer.six: `pdfminer.high_level.extract_text`. A "
        "title is not repeated: ours is scored as title + blocks (its blocks leave the title heading out), markitdown "
        "on its Markdown alone (which holds the heading; its separate `title`, the HTML <title>, is left out).",
        "",
        "- char P / R / F1: the extracted and the reference text as multisets of characters, all whitespace removed, "
        "NFC (nothing else: a ligature glyph such as `ﬂ`, a wrong decoding, boilerplate count as wrong characters); "
        "mean over files. A failed file scores 0 everywhere. F1 NFKC: the same after NFKC on both sides (ligatures "
        "and width variants folded), to tell glyph-level differences from lost or added text.",
        f"- order: difflib `SequenceMatcher.ratio()` over tokens (words, single CJK characters, punctuation marks; "
        f"first {ORDER_CAP} of each side), so whitespace does not count but reading order, split or merged words and "
        "boilerplate do; mean over files (min in brackets). < 0.95: files whose char F1 or order is below 0.95. "
        "hyphens joined: hyphenated words of the reference (`low-expression`) that the extract has joined "
        "(`lowexpression`): a line-end hyphen taken for a soft one.",
        "- files/s, MB/s, pages/s: files, input bytes, PDF pages (slides for PPTX) over the summed per-file times, "
        "one thread.",
        "- Offline: every outgoing connection in the process was refused and counted while the tools ran: "
        + ("not checked in this run" if "network_attempt_count" not in fid else
           f"{fid['network_attempt_count']} attempts" + (f" ({', '.join(fid['network_attempts'])})"
                                                         if fid["network_attempts"] else "")) + ".", "",
        "| set | format (producer) | tool | files | failed | char P | char R | char F1 | F1 NFKC | order (min) | "
        "< 0.95 | hyphens joined | files/s | MB/s | pages/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in fid["groups"]:
        group = f"**{g['group']}**" if g["group"] == "all formats" else g["group"]
        lines.append(f"| {g['dataset']} | {group} | {g['tool']} | {g['files']} | {g['failed']} | "
                     f"{_f(g['precision'])} | {_f(g['recall'])} | {_f(g['f1'])} | {_f(g['f1_nfkc'])} | "
                     f"{_f(g['order'])} ({_f(g['order_min'], 2)}) | {g['files_below_0_95']} | {g['hyphens_joined']} | "
                     f"{_rate(g['files_per_s'])} | {_rate(g['mb_per_s'])} | "
                     f"{_rate(g['pages_per_s'])} |")
    lines += ["", "Ours against each peer (ratios ours / peer; F1 and order: above 1 means ours is closer to the "
              "reference; speed: above 1 means ours is faster). \"all formats\" for pypdf and pdfminer is PDF only.",
              "", "| set | format (producer) | peer | char F1 | order | files/s |", "|---|---|---|---|---|---|"]
    by_key = {(g["dataset"], g["group"], g["tool"]): g for g in fid["groups"]}
    for g in fid["groups"]:
        if g["tool"] == "ours":
            continue
        group = g["group"]
        mine = by_key.get((g["dataset"], group, "ours"))
        if group == "all formats" and g["tool"] in PDF_ONLY:  # compare like with like: our PDFs only
            mine = _merge([v for (d, grp, t), v in by_key.items() if d == g["dataset"] and t == "ours"
                           and grp.startswith("pdf")])
            group = "all PDFs"
        if mine is None:
            continue
        lines.append(f"| {g['dataset']} | {group} | {g['tool']} | {_ratio(mine['f1'], g['f1'])} | "
                     f"{_ratio(mine['order'], g['order'])} | {_ratio(mine['files_per_s'], g['files_per_s'])} |")
    lines.append("")
    if fid["worst"]:
        lines += ["Our lowest-scoring files per format (F1 + order), with markitdown on the same file:", "",
                  "| set | format | doc | ours F1 | ours order | markitdown F1 | markitdown order | error |",
                  "|---|---|---|---|---|---|---|---|"]
        for w in fid["worst"]:
            lines.append(f"| {w['dataset']} | {w['group']} | {w['doc']} | {_f(w['f1'])} | {_f(w['order'])} | "
                         f"{_f(w['markitdown_f1'])} | {_f(w['markitdown_order'])} | {w['error'] or ''} |")
        lines.append("")
    if fid["errors"]:
        lines += ["Failures (first 50):", ""] + [f"- {e['tool']} {e['dataset']} {e['doc']} ({e['group']}): "
                                                 f"`{e['error']}`" for e in fid["errors"]] + [""]
    return lines


def _merge(groups: list[dict]) -> dict | None:
    """Our PDF rows of one set, pooled (file-weighted means, summed times)."""
    if not groups:
        return None
    files = sum(g["files"] for g in groups)
    seconds = sum(g["seconds"] for g in groups)
    return {"f1": sum(g["f1"] * g["files"] for g in groups) / files,
            "order": sum(g["order"] * g["files"] for g in groups) / files,
            "files_per_s": files / seconds if seconds else None}


def _retrieval_section(runs: list[dict]) -> list[str]:
    lines = ["## 2. Retrieval from files vs from the same texts", "",
             "How: `appliance.evaluate.evaluate_retrieval` (default settings: hybrid search, k = 10 page for nDCG@10 "
             "and MRR@10, 150 chunks for recall@100) on the fixture folder, whose `files/` are ingested through the "
             "parsers (file stem = document id), and on a folder holding only the same corpus.jsonl, queries.jsonl "
             "and qrels (symlinks), ingested as text. Both in the same run with the same settings; only the encoder "
             "differs between rows.", "",
             "| set | encoder | from | files failed | nDCG@10 | recall@100 | MRR@10 | Δ nDCG@10 (files − texts) | "
             "Δ recall@100 | target \\|Δ nDCG\\| | met | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        if "skipped" in run:
            lines.append(f"| {run['dataset']} | {run['encoder']} | skipped: {run['skipped']} | | | | | | | | | |")
            continue
        for label in ("files", "texts"):
            q = run[label]
            tail = (f"{run['delta_ndcg']:+.4f} | {run['delta_recall']:+.4f} | ≤ {run['target']} | "
                    f"{'yes' if run['met'] else 'NO'}") if label == "files" else "| | |"
            failed = f"{q.get('files_failed', 0)} / {q['files']}" if label == "files" else "-"
            lines.append(f"| {run['dataset']} | {run['encoder']} | {label} | {failed} | {q['ndcg@10']:.4f} | "
                         f"{q['recall@100']:.4f} | {q['mrr@10']:.4f} | {tail} | {q['wall_s']} |")
    return lines + [""]


def _ingest_section(ing: dict) -> list[str]:
    total = ing["ingest_s"]
    rows = [
        ("end to end: `services.files.ingest`, batches of 32, waiting only on the last (parse + chunk + store + "
         "encode + index; the parser pool starts inside it)", total),
        (f"parse only: `ParserPool` ({ing['parse_workers']} worker processes, all files queued at once; pool start "
         f"{ing['pool_start_s']:.1f} s not included)", ing["parse_pool_s"]),
        (f"encode + index only: `library.reindex` of the partition (re-encodes every stored chunk with "
         f"{ing['encoder']}, {ing['encoder_threads']} threads, and rebuilds; no parsing)", ing["reindex_s"]),
    ]
    lines = ["## 3. Ingest of a folder of mixed files, end to end", "",
             f"How: all {ing['files']} files of both folders ({ing['bytes'] / 1e6:.1f} MB, shuffled with seed 0 so "
             f"formats and languages mix), one partition, a fresh data folder, default settings (encoder "
             f"{ing['encoder']}). Services boot {ing['boot_s']:.1f} s, not included. {ing['failed']} files failed; "
             f"{ing['chunks']} chunks; indexed at the end: {ing['indexed']}"
             + (f" (index error: {ing['index_error']})" if ing.get("index_error") else "") + ". "
             f"The stages overlap in the end-to-end run (a batch is parsed while the previous one is encoded) and "
             f"compete for the box's {os.cpu_count()} cores, so the stage times need not add up to the total.", "",
             "| stage | seconds | files/s | chunks/s | share of end to end |", "|---|---|---|---|---|"]
    for what, seconds in rows:
        lines.append(f"| {what} | {seconds:.1f} | {_rate(ing['files'] / seconds)} | "
                     f"{_rate(ing['chunks'] / seconds)} | {seconds / total:.0%} |")
    rest = total - ing["parse_pool_s"] - ing["reindex_s"]
    lines += ["", f"End to end minus parse-only minus encode+index: {rest:+.1f} s (chunking, the store, blobs, "
              "batching; negative where the stages overlapped).", ""]
    return lines


def _findings(r: dict) -> list[str]:
    out = []
    fid = r.get("fidelity")
    if fid:
        by_key = {(g["dataset"], g["group"], g["tool"]): g for g in fid["groups"]}
        for (dataset, group, tool), g in by_key.items():
            if tool != "markitdown" or group == "all formats":
                continue
            mine = by_key.get((dataset, group, "ours"))
            if mine is None:
                continue
            for metric in ("f1", "order"):
                if g[metric] - mine[metric] > 0.002:
                    out.append(f"- {dataset} {group}: markitdown's {metric} is higher than ours by "
                               f"{g[metric] - mine[metric]:.3f} ({g[metric]:.3f} vs {mine[metric]:.3f}).")
            if mine["files_per_s"] and g["files_per_s"] and g["files_per_s"] > mine["files_per_s"]:
                out.append(f"- {dataset} {group}: markitdown parses faster than ours "
                           f"({g['files_per_s']:.1f} vs {mine['files_per_s']:.1f} files/s).")
        for (dataset, group, tool), g in by_key.items():
            if group == "all formats":
                continue
            if g["failed"]:
                out.append(f"- {dataset} {group}: {g['failed']} of {g['files']} {tool} parses failed.")
            if g["f1_nfkc"] - g["f1"] > 0.001:
                out.append(f"- {dataset} {group}: {tool}'s char F1 is {g['f1']:.3f} as is but {g['f1_nfkc']:.3f} "
                           "after NFKC: its shortfall is ligature glyphs (ﬁ, ﬂ, ﬀ) or width variants, not lost "
                           "text.")
            if g["files_below_0_95"]:
                out.append(f"- {dataset} {group}: {g['files_below_0_95']} {tool} extracts score below 0.95 "
                           f"(lowest order {g['order_min']:.2f}).")
            if g["hyphens_joined"]:
                out.append(f"- {dataset} {group}: {tool} joined {g['hyphens_joined']} hyphenated words of the "
                           "reference (a real hyphen at a line end taken for a soft one).")
    steps = r.get("steps", {})
    own = {"fidelity": 1}  # cores this benchmark keeps busy in a step (elsewhere: all, encoder and parsers)
    busy = [f"{name} (1-min load {s['load_before']} -> {s['load_after']})" for name, s in steps.items()
            if max(s["load_before"], s["load_after"]) > own.get(name, os.cpu_count() or 1) + 0.5]
    if busy:
        out.append(f"- The box was busier than this benchmark alone during: {', '.join(busy)}; other work competed "
                   "for the cores, so the speeds there are on the low side.")
    return out


def judge(r: dict) -> list[dict]:
    verdicts = []
    for run in r.get("retrieval", []):
        if "skipped" in run:
            continue
        verdicts.append({"what": f"{run['dataset']} ({run['encoder']}): |nDCG@10 from files − from texts| ≤ "
                                 f"{run['target']}",
                         "measured": f"{run['files']['ndcg@10']:.4f} − {run['texts']['ndcg@10']:.4f} = "
                                     f"{run['delta_ndcg']:+.4f}", "met": run["met"]})
    if not verdicts:
        verdicts.append({"what": "retrieval from files vs texts", "measured": "not run", "met": None})
    return verdicts


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    log = machine.progress_log(started)
    results: dict = {"meta": {**machine.machine_info(PACKAGES), "quick": args.quick}}
    cases = load_cases(args.quick) + pptx_cases(args.quick)
    log(f"{len(cases)} files loaded ({sum(len(c.data) for c in cases) / 1e6:.1f} MB)")
    step = machine.step_runner(results)

    if not args.skip_fidelity:
        log("step 1: fidelity and speed, per tool and format")
        await step("fidelity", asyncio.to_thread(fidelity, cases, 1 if args.quick else args.repeats, log))
    if not args.skip_retrieval:
        log("step 2: retrieval from files vs from texts")
        encoders = [e.strip() for e in args.cmrc_encoders.split(",") if e.strip()]
        await step("retrieval", retrieval(list(FOLDERS), encoders[:1] if args.quick else encoders,
                                          cases if args.quick else None, log))
    if not args.skip_ingest:
        log("step 3: ingest of all files end to end")
        await step("ingest", ingest(cases, log))
    machine.write_results(args.out, results, markdown, started, judge, log)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
