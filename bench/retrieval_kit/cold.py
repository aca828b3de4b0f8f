"""After a boot: the first queries against a partition whose files are not in the page cache, then the same queries
again (warm). Each pass runs in a process of its own, as a boot is (in one that already mapped the files, their
pages could not be dropped).

A pass may also leave out part of what the product does there (`Variant`), so a run shows what each part brings:
the boot's read of the index files in the product's order or token files first (the order before stop 32), and the
late stage's read-ahead of its candidates' token rows (`PartitionSnapshot.will_need_tokens`) on or off.
"""
from __future__ import annotations

import asyncio
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psutil

from appliance.config import IndexSettings
from appliance.index import PartitionSnapshot, current_version
from appliance.retrieve import Target
from appliance.timings import Stage, Timings

from .data import make_settings
from .kit import StageKit
from .measure import SPEED_K, evict, latency_stats, ms_since

COLD_QUERIES = 100  # timed after a boot, then again warm
STAGES = (Stage.ENCODE, Stage.BM25, Stage.ANN, Stage.LATE_INTERACTION)


@dataclass(slots=True, frozen=True)
class Variant:
    """What a pass's boot and searches do: `budget_bytes` of the index read at boot (None: the server's default,
    `index.warm_max_mib` capped at half the available memory; 0: nothing read), `tokens_first` (token files before
    the graph and BM25, as before stop 32) and `advise` (the late stage's read-ahead)."""
    budget_bytes: int | None = None
    tokens_first: bool = False
    advise: bool = True


def cold_and_warm(partition_dir: Path, queries: list[str], late: bool) -> dict:
    """The retrieval benchmark's pair: the boot's prefetch off and on (the server's default budget)."""
    out = {f"prefetch {'on' if on else 'off'}": in_own_process(partition_dir, queries, late,
                                                               Variant(None if on else 0))
           for on in (False, True)}
    return {"late": late, "queries": min(COLD_QUERIES, len(queries)), **out}


def in_own_process(partition_dir: Path, queries: list[str], late: bool, variant: Variant) -> dict:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        return child.submit(cold_pass, partition_dir, queries[:COLD_QUERIES], late, asdict(variant)).result()


def cold_pass(partition_dir: Path, queries: list[str], late: bool, variant: dict) -> dict:
    """The partition's files dropped from the page cache (as after a reboot; nothing maps them yet in this fresh
    process), the partition opened and warmed as the server's boot does (its read of the index files within the
    budget, then one search), the queries one at a time, then the same again (warm)."""
    v = Variant(**variant)
    if not v.advise:  # ablations: this process only
        from appliance.index import snapshot as snapshot_module
        snapshot_module._ADVISE = False
    if v.tokens_first:
        PartitionSnapshot.files = lambda self: self.token_files() + sorted(
            f for f in self.folder.rglob("*") if f.is_file())

    async def run() -> dict:
        settings = make_settings(partition_dir.parent / "app", "minilm")
        app = await StageKit.open(settings)
        try:
            evict(partition_dir)
            snapshot = PartitionSnapshot(current_version(partition_dir), IndexSettings().expansion_search)
            targets = [Target("scale", snapshot)]
            started = time.perf_counter()
            budget = v.budget_bytes if v.budget_bytes is not None else min(
                settings.index.warm_max_mib << 20, psutil.virtual_memory().available // 2)
            read = await asyncio.to_thread(snapshot.prefetch, budget) if budget else 0
            await timed_search(app, targets, "warm up", late)
            warm_up_ms = ms_since(started)
            first = [await timed_search(app, targets, q, late) for q in queries]
            again = [await timed_search(app, targets, q, late) for q in queries]
        finally:
            await app.stop()
        return {"first": _stats(first), "warm": _stats(again), "warm_up_ms": round(warm_up_ms, 1),
                "prefetched_mib": round(read / 2**20, 1)}

    return asyncio.run(run())


async def timed_search(app: StageKit, targets: list[Target], text: str, late: bool) -> dict[str, float]:
    """One search as the retriever runs it (query encoding included), its stage timings in ms."""
    timings = Timings()
    started = time.perf_counter()
    query = await app.batcher.encode(text)
    terms = app.tokenizer(text)
    timings.add(Stage.ENCODE, ms_since(started))
    await app.searcher.search(targets, query.dense, query.tokens, terms, SPEED_K, timings, late=late)
    timings.add(Stage.TOTAL, ms_since(started))
    return timings.as_dict()


def _stats(runs: list[dict[str, float]]) -> dict:
    total = latency_stats([t["total"] for t in runs])
    out = {"p50_ms": total["p50_ms"], "p99_ms": total["p99_ms"]}
    for stage in STAGES:
        times = [t.get(stage.value, 0.0) for t in runs]
        name = "late" if stage == Stage.LATE_INTERACTION else stage.value
        out[f"{name}_p50_ms"] = round(float(np.percentile(times, 50)), 2)
        out[f"{name}_p99_ms"] = round(float(np.percentile(times, 99)), 2)
    return out
