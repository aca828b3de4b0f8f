"""OCR benchmark: scanned copies of the SciFact and CMRC PDF fixtures, read by ours (PP-OCRv4 in the parse workers)
and by Debian's tesseract 5 (what a user would otherwise run: `tesseract`, or ocrmypdf around it), in the same run.

    .venv/bin/python bench/ocr.py              # every PDF of both folders (`just bench-ocr`)
    .venv/bin/python bench/ocr.py --limit 40   # the first 40 PDFs of each (a smaller run, reported as such)
    .venv/bin/python bench/ocr.py --quick      # 3 PDFs of each: for debugging

A scan: each page of a fixture PDF rendered at 200 dpi in grey and saved as an image-only PDF (Pillow), as a
scanner makes it; the text layer is gone. Steps, one after another so no two compete for the cores:

1. Read: ours through a `ParserPool` of 2 workers (the server's own path: `parse_bytes` with OCR in worker
   processes), all scans queued at once; tesseract on each page image (`-l eng` / `chi_sim`, its default page
   segmentation), 2 processes at a time with one thread each. Pages/s = pages / wall time on the 2 cores.
   Character error rate: edit distance between the OCR text and the fixture's own text layer (both parsed by
   `parse_bytes`, title and text, whitespace removed, NFKC) over the reference's length; mean over files. Reading
   order counts: a block read out of order costs its length twice.
2. Retrieval: `appliance.evaluate.evaluate_retrieval` on the original PDFs, on the scans (parsed, so read by our
   OCR), and on tesseract's text (as .txt files), each with the queries that have a judged document among the
   files: nDCG@10 and recall@100 (same settings, same run).

Writes bench/results/ocr.md and .json (--quick: bench/.cache/ocr-quick.*).
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import appliance.config  # noqa: E402,F401  (first: onnxruntime before usearch, see MODELS.md)
from appliance.evaluate import evaluate_retrieval  # noqa: E402
from appliance.parse import ParseError, ParserPool, parse_bytes  # noqa: E402
from appliance.wiring import parse_limits  # noqa: E402

import machine  # noqa: E402

REPO = machine.REPO
DATA = REPO.parent / "shared" / "data"
FOLDERS = {"scifact": DATA / "scifact_files", "cmrc": DATA / "cmrc_files"}
TESSERACT_LANG = {"scifact": "eng", "cmrc": "chi_sim"}
DPI = 200
TARGET_DELTA = 0.03  # |nDCG@10 from scans - nDCG@10 from the text layer|, from the issue
PACKAGES = ["rag-appliance", "pypdfium2", "pillow", "onnxruntime", "numpy"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, default=0, help="the first N PDFs of each folder (0: all)")
    p.add_argument("--quick", action="store_true", help="3 PDFs of each folder, written to bench/.cache")
    p.add_argument("--out", type=Path, help="default: bench/results/ocr (--quick: bench/.cache/ocr-quick)")
    return p.parse_args(argv)


def scan(pdf: bytes) -> tuple[bytes, list[bytes]]:
    """The image-only PDF and each page as a PNG (tesseract's input)."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf)
    images = [doc[i].render(scale=DPI / 72).to_pil().convert("L") for i in range(len(doc))]
    out = io.BytesIO()
    images[0].save(out, "PDF", resolution=DPI, save_all=True, append_images=images[1:])
    pngs = []
    for image in images:
        png = io.BytesIO()
        image.save(png, "PNG")
        pngs.append(png.getvalue())
    return out.getvalue(), pngs


def squeeze(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).split())


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, one numpy row per character of `a` (insertions by a running minimum)."""
    if not a or not b:
        return max(len(a), len(b))
    codes_b = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    offsets = np.arange(len(b) + 1)
    row = offsets.copy()
    for i, ch in enumerate(a, 1):
        kept = row[:-1] + (codes_b != ord(ch))  # substitution or match
        deleted = row[1:] + 1
        new = np.empty_like(row)
        new[0] = i
        new[1:] = np.minimum(kept, deleted)
        row = np.minimum.accumulate(new - offsets) + offsets  # insertions: new[j] <= new[j - 1] + 1
    return int(row[-1])


def _whole_text(doc) -> str:
    """The title (which blocks leave out when a heading became it) and the text: what the page shows."""
    return f"{doc.title}\n{doc.text}"


def cer(reference: str, text: str) -> float:
    ref, hyp = squeeze(reference), squeeze(text)
    return edit_distance(ref, hyp) / max(1, len(ref))


def load_cases(limit: int, log) -> list[dict]:
    cases = []
    for dataset, folder in FOLDERS.items():
        pdfs = sorted((folder / "files").glob("*.pdf"))[: limit or None]
        for path in pdfs:
            original = path.read_bytes()
            image_pdf, pngs = scan(original)
            cases.append({"dataset": dataset, "id": path.stem, "original": original, "scan": image_pdf,
                          "pngs": pngs, "reference": _whole_text(parse_bytes(original))})
        log(f"  {dataset}: {len(pdfs)} PDFs scanned at {DPI} dpi "
            f"({sum(len(c['pngs']) for c in cases if c['dataset'] == dataset)} pages)")
    return cases


async def read_ours(cases: list[dict], log) -> dict:
    s = machine.retrieval_settings(Path(tempfile.mkdtemp(prefix="bench-ocr-")))
    limits = parse_limits(s.parse, s.models_dir)
    assert limits.ocr_models, "models/build/ppocr-v4 is not built (just setup)"
    pool = ParserPool(2, max(s.parse.timeout_s, 600), s.parse.max_memory_mib, limits)
    await pool.start()
    try:
        started = time.perf_counter()
        docs = await asyncio.gather(*(pool.parse(c["scan"]) for c in cases), return_exceptions=True)
        wall = time.perf_counter() - started
    finally:
        await pool.close()
    for case, doc in zip(cases, docs):
        case["ours"] = "" if isinstance(doc, BaseException) else _whole_text(doc)
        case["ours_error"] = repr(doc) if isinstance(doc, BaseException) else None
    log(f"  ours: {wall:.1f} s, {sum(isinstance(d, BaseException) for d in docs)} failed")
    return {"wall_s": wall, "workers": 2}


def read_tesseract(cases: list[dict], log) -> dict:
    version = subprocess.run(["tesseract", "--version"], capture_output=True, text=True).stdout.split("\n")[0]

    def page(job: tuple[str, bytes]) -> str:
        lang, png = job
        done = subprocess.run(["tesseract", "stdin", "stdout", "-l", lang], input=png, capture_output=True,
                              env={**os.environ, "OMP_THREAD_LIMIT": "1"})
        return done.stdout.decode("utf-8", "replace")

    jobs = [(TESSERACT_LANG[c["dataset"]], png) for c in cases for png in c["pngs"]]
    started = time.perf_counter()
    with ThreadPoolExecutor(2) as workers:
        texts = iter(list(workers.map(page, jobs)))
    wall = time.perf_counter() - started
    for case in cases:
        case["tesseract"] = "\n".join(next(texts) for _ in case["pngs"])
    log(f"  tesseract ({version}): {wall:.1f} s")
    return {"wall_s": wall, "workers": 2, "version": version}


def quality(cases: list[dict], reading: dict) -> list[dict]:
    rows = []
    for dataset in FOLDERS:
        mine = [c for c in cases if c["dataset"] == dataset]
        pages = sum(len(c["pngs"]) for c in mine)
        for tool in ("ours", "tesseract"):
            errors = [cer(c["reference"], c[tool]) for c in mine]
            rows.append({"dataset": dataset, "tool": tool, "files": len(mine), "pages": pages,
                         "failed": sum(1 for c in mine if not c[tool].strip()),
                         "cer": float(np.mean(errors)), "cer_median": float(np.median(errors)),
                         "cer_over_5pct": sum(e > 0.05 for e in errors)})
    for row in rows:  # pages/s over both sets: each tool read them all in one timed run
        total = sum(len(c["pngs"]) for c in cases)
        row["pages_per_s"] = total / reading[row["tool"]]["wall_s"]
    return rows


def judged_folder(dataset: str, cases: list[dict], into: Path, kind: str) -> Path:
    """A BEIR folder of the files of `cases` (the originals, the scans, or tesseract's text) with the queries that
    judge one of them."""
    folder = FOLDERS[dataset]
    (into / "files").mkdir(parents=True)
    ids = {c["id"] for c in cases}
    for c in cases:
        if kind == "tesseract":
            (into / "files" / f"{c['id']}.txt").write_text(c["tesseract"] or " ", encoding="utf-8")
        else:
            (into / "files" / f"{c['id']}.pdf").write_bytes(c["original" if kind == "text layer" else "scan"])
    with open(folder / "corpus.jsonl", encoding="utf-8") as f, open(into / "corpus.jsonl", "w") as out:
        out.writelines(line for line in f if line.strip() and str(json.loads(line)["_id"]) in ids)
    (into / "qrels").mkdir()
    lines = (folder / "qrels" / "test.tsv").read_text().splitlines()
    kept = [line for line in lines[1:] if line.split("\t")[1] in ids]
    (into / "qrels" / "test.tsv").write_text("\n".join([lines[0], *kept]) + "\n")
    queries = {line.split("\t")[0] for line in kept}
    with open(folder / "queries.jsonl", encoding="utf-8") as f, open(into / "queries.jsonl", "w") as out:
        out.writelines(line for line in f if line.strip() and str(json.loads(line)["_id"]) in queries)
    return into


async def retrieval(cases: list[dict], log) -> list[dict]:
    runs = []
    for dataset in FOLDERS:
        mine = [c for c in cases if c["dataset"] == dataset]
        for kind in ("text layer", "scans (ours)", "tesseract"):
            with tempfile.TemporaryDirectory(prefix="bench-ocr-") as tmp:
                folder = judged_folder(dataset, mine, Path(tmp) / "folder", kind)
                started = time.perf_counter()
                report = await evaluate_retrieval(machine.retrieval_settings(Path(tmp) / "unused"), folder)
            runs.append({"dataset": dataset, "from": kind, "queries": report.get("queries"),
                         "ndcg@10": report["ndcg@10"], "recall@100": report["recall@100"],
                         "files_failed": report.get("files_failed"), "wall_s": time.perf_counter() - started})
            log(f"  {dataset} from {kind}: nDCG@10 {report['ndcg@10']:.4f} ({runs[-1]['wall_s']:.0f} s)")
    return runs


def markdown(r: dict) -> str:
    subset = f"the first {r['meta']['limit']} PDFs (by name)" if r["meta"]["limit"] else "every PDF"
    peer = r["reading"]["tesseract"]["version"]
    lines = machine.report_header("OCR benchmark", r, "bench-ocr", "3 PDFs of each folder") + [
        f"- Data: `shared/data/scifact_files` and `cmrc_files`, {subset} of each, scanned here: every page rendered "
        f"at {DPI} dpi in grey, saved as an image-only PDF (Pillow). Reference text: the fixture PDF's own text layer "
        "(`parse_bytes`).",
        f"- Ours: PP-OCRv4 (models/ppocr-v4.toml) in 2 parse workers, one thread each. Peer: {peer} (Debian), "
        "`-l eng` or `chi_sim`, 2 processes, one thread each.", "",
        "## Reading", "",
        "| set | tool | files | pages | empty | CER (mean) | CER (median) | files over 5 % | pages/s (2 cores, "
        "both sets) |", "|---|---|---|---|---|---|---|---|---|"]
    for q in r["quality"]:
        lines.append(f"| {q['dataset']} | {q['tool']} | {q['files']} | {q['pages']} | {q['failed']} | {q['cer']:.3f} | "
                     f"{q['cer_median']:.3f} | {q['cer_over_5pct']} | {q['pages_per_s']:.2f} |")
    by = {(q["dataset"], q["tool"]): q for q in r["quality"]}
    lines += ["", "Ours against tesseract: " + "; ".join(
        f"{d}: CER {by[(d, 'ours')]['cer']:.3f} vs {by[(d, 'tesseract')]['cer']:.3f}" for d in FOLDERS)
        + f"; speed {by[('scifact', 'ours')]['pages_per_s'] / by[('scifact', 'tesseract')]['pages_per_s']:.2f}x.",
        "", "## Retrieval", "",
        "| set | from | queries | nDCG@10 | recall@100 | files failed | wall s |", "|---|---|---|---|---|---|---|"]
    for run in r["retrieval"]:
        lines.append(f"| {run['dataset']} | {run['from']} | {run['queries']} | {run['ndcg@10']:.4f} | "
                     f"{run['recall@100']:.4f} | "
                     f"{run['files_failed']} | {run['wall_s']:.0f} |")
    lines += ["", "## Targets", ""] + [f"- {t['what']}: {t['measured']} ({'met' if t['met'] else 'not met'})"
                                       for t in r["targets"]]
    return "\n".join(lines) + "\n"


def judge(r: dict) -> list[dict]:
    out = []
    for dataset in FOLDERS:
        runs = {run["from"]: run for run in r["retrieval"] if run["dataset"] == dataset}
        delta = runs["scans (ours)"]["ndcg@10"] - runs["text layer"]["ndcg@10"]
        out.append({"what": f"{dataset}: nDCG@10 from scans within {TARGET_DELTA} of the text layer",
                    "measured": f"{delta:+.4f}", "met": abs(delta) <= TARGET_DELTA})
    return out


async def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    log = machine.progress_log(started)
    limit = 3 if args.quick else args.limit
    results: dict = {"meta": {**machine.machine_info(PACKAGES), "limit": limit, "quick": args.quick}}
    step = machine.step_runner(results)
    cases = load_cases(limit, log)
    reading: dict = {}
    await step("read_ours", read_ours(cases, log))
    reading["ours"] = results["read_ours"]
    before = time.perf_counter()
    reading["tesseract"] = read_tesseract(cases, log)
    results["steps"]["read_tesseract"] = {"wall_s": round(time.perf_counter() - before, 1),
                                          "load_before": None, "load_after": round(os.getloadavg()[0], 2)}
    results["reading"] = reading
    results["quality"] = quality(cases, reading)
    await step("retrieval", retrieval(cases, log))
    out = args.out or (REPO / "bench" / (".cache/ocr-quick" if args.quick else "results/ocr"))
    machine.write_results(out, results, markdown, started, judge, log)


if __name__ == "__main__":
    asyncio.run(main())
