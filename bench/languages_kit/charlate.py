"""Would Chinese late interaction pay? USE has no token vectors and no PyPI package ships a Chinese token model
fast enough to index with (MODELS.md), so the candidate is character-level: every CJK character of the questions
and candidates embedded alone by USE (a static table), MaxSim of a question's content characters against a
passage's characters, optionally weighted by each character's IDF over the candidates' partition.

The hybrid page of 30 candidates per question is re-ranked by RRF over (hybrid rank, MaxSim rank) with weight
`alpha` on MaxSim (alpha 1 = MaxSim alone, as the English stage does). alpha and the weighting are chosen on the
even questions and reported on the odd ones, against hybrid without it."""
from __future__ import annotations

import math
import re
import time
from collections import Counter

import numpy as np

from appliance.evaluate import ndcg_at
from appliance.retrieve import PartitionFilter

CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
# question words, pronouns and particles: what a question is made of besides what it asks about
FUNCTION = set("的了吗呢吧啊呀么嘛哦哪那这个些们我你您他她它是在有和与或及就都也还又再要会能可以想请问怎样如何为什什么"
               "啥谁几多少时候何里去来到把被给对让从用得地着过很太最更")
ALPHAS = (1.0, 0.5, 0.3, 0.2, 0.1)
CANDIDATES = 30


async def run(services, data, tenant: str, partition: str, encoder, log) -> dict:
    where = PartitionFilter(tenant, (partition,))
    pages = {}
    for qid, text in data.queries.items():
        pages[qid] = (text, (await services.retriever.search(text, where, CANDIDATES)).hits)
    chars = sorted({c for text, hits in pages.values() for c in CJK.findall(text + "".join(h.chunk.text for h in hits))})
    started = time.perf_counter()
    table = np.vstack([encoder.encode(chars[i:i + 256]).dense for i in range(0, len(chars), 256)]).astype(np.float32)
    table_s = round(time.perf_counter() - started, 2)
    row = {c: i for i, c in enumerate(chars)}
    texts = {h.chunk.chunk_id: h.chunk.text for _, hits in pages.values() for h in hits}
    df = Counter(c for t in texts.values() for c in set(CJK.findall(t)))
    idf = {c: math.log(1 + len(texts) / (1 + df[c])) for c in chars}

    def maxsim(question: str, passage: str, weighted: bool) -> float:
        q_chars = [c for c in dict.fromkeys(CJK.findall(question)) if c not in FUNCTION]
        p_chars = list(dict.fromkeys(CJK.findall(passage)))
        if not q_chars or not p_chars:
            return 0.0
        best = (table[[row[c] for c in q_chars]] @ table[[row[c] for c in p_chars]].T).max(axis=1)
        w = np.array([idf[c] for c in q_chars]) if weighted else np.ones(len(q_chars))
        return float((best * w).sum() / w.sum())

    def ndcg(qids, alpha: float | None, weighted: bool) -> float:
        out = []
        for qid in qids:
            text, hits = pages[qid]
            order = list(range(len(hits)))
            if alpha is not None:
                scores = np.array([maxsim(text, h.chunk.text, weighted) for h in hits])
                late_rank = {int(i): r for r, i in enumerate(np.argsort(-scores, kind="stable"), 1)}
                order.sort(key=lambda i: -(alpha / (60 + late_rank[i]) + (1 - alpha) / (61 + i)))
            out.append(ndcg_at(list(dict.fromkeys(hits[i].chunk.doc_key for i in order)), data.qrels[qid]))
        return round(float(np.mean(out)), 4)

    qids = list(pages)
    even, odd = qids[0::2], qids[1::2]
    grid = [{"weighted": w, "alpha": a, "even": ndcg(even, a, w)} for w in (False, True) for a in ALPHAS]
    best = max(grid, key=lambda g: g["even"])
    started = time.perf_counter()
    held_out = ndcg(odd, best["alpha"], best["weighted"])
    rerank_ms = round((time.perf_counter() - started) * 1000 / len(odd), 2)
    result = {"chars": len(chars), "table_s": table_s, "grid": grid, "chosen": best,
              "hybrid": {"even": ndcg(even, None, False), "odd": ndcg(odd, None, False)},
              "late_odd": held_out, "rerank_ms_per_question": rerank_ms, "candidates": CANDIDATES}
    log(f"chinese late interaction: {result}")
    return result
