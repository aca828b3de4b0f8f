"""Does Chinese late interaction pay? The product's character late interaction (encode/chars.py: every CJK
character embedded alone by USE, MaxSim of the question's content characters against each candidate's, blended
by rank with the fused order) swept over `retrieve.late_weight_zh` on CMRC: chosen on the even questions,
reported on the odd ones against hybrid without it (weight 0)."""
from __future__ import annotations

import time

import numpy as np

from appliance.evaluate import ndcg_at
from appliance.retrieve import PartitionFilter
from appliance.wiring import open_services

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)  # 0: off (hybrid alone); 1: MaxSim order alone


async def run(settings_for, data, tenant: str, partition: str, log) -> dict:
    where = PartitionFilter(tenant, (partition,))
    qids = list(data.queries)
    rows = []
    for weight in WEIGHTS:
        async with open_services(settings_for(retrieve_late_weight_zh=str(weight)), warm_up=True,
                                 generation=False) as services:
            split = {"even": [], "odd": []}
            latency, late_ms = [], []
            for n, qid in enumerate(qids):
                started = time.perf_counter()
                result = await services.retriever.search(data.queries[qid], where, 10)
                latency.append((time.perf_counter() - started) * 1000)
                late_ms.append(result.timings.get("late_interaction") or 0.0)
                ranked = list(dict.fromkeys(h.chunk.doc_key for h in result.hits))
                split["even" if n % 2 == 0 else "odd"].append(ndcg_at(ranked, data.qrels[qid]))
        row = {"weight": weight, **{k: round(float(np.mean(v)), 4) for k, v in split.items()},
               "p50_ms": round(float(np.percentile(latency, 50)), 2),
               "p99_ms": round(float(np.percentile(latency, 99)), 2),
               "late_p50_ms": round(float(np.percentile(late_ms, 50)), 2)}
        rows.append(row)
        log(f"chinese late interaction: {row}")
    chosen = max(rows, key=lambda r: (r["even"], -r["weight"]))
    return {"grid": rows, "chosen": chosen, "off": rows[0], "default": settings_for().retrieve.late_weight_zh}
