"""bench/results/vectors_scale.md from the results of bench/vectors_scale.py."""
from __future__ import annotations

from bench.machine import report_header

from .systems import HNSW, NPROBE, PQ, RESCORE, ivf_lists


def markdown(r: dict) -> str:
    m = r["meta"]
    lines = report_header(f"Dense vectors at {m['chunks']:,} chunks: USearch quantisation vs faiss IVF-PQ", r,
                          "bench-vectors", f"{m['chunks']:,} vectors")
    lines += ["", f"How it is measured: {m['chunks']:,} vectors (SciFact's chunk vectors copied with noise "
              f"{m['noise']} per dimension, re-normalised; f16 on disk), {m['queries']} queries (SciFact's judged "
              f"queries and noisy copies), recall@{m['k']} against the exact top {m['k']} by inner product. HNSW: "
              f"{HNSW}; faiss IVF{ivf_lists(m['chunks'])},{PQ}, nprobe {NPROBE}. `+rescore`: the index's best {RESCORE}, ordered by their "
              "exact score from the memory-mapped f16 vectors. Each index is served by a fresh process (USearch "
              "memory-maps its file with view=True, as the product does); RSS counts the touched pages of mapped "
              "files, the anonymous part is what the process holds itself. One query at a time, one thread.", "",
              "| system | build s | MiB on disk | bytes/vector | recall@10 | p50 ms | p99 ms | RSS loaded MiB | "
              "RSS after MiB | of it anonymous | p50 vs f16 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    systems = r["systems"]
    reference = systems.get("usearch-f16", {}).get("p50_ms")
    for name, s in systems.items():
        ratio = f"{s['p50_ms'] / reference:.2f}x" if reference else ""
        lines.append(f"| {name} | {s['build_s']}{' (shared)' if s.get('reused') else ''} | "
                     f"{s['disk_bytes'] / 2**20:.0f} | {s['bytes_per_vector']} | {s['recall@10']} | {s['p50_ms']} | "
                     f"{s['p99_ms']} | {s['rss_loaded_mib']} | {s['rss_after_mib']} | {s['rss_anon_after_mib']} | "
                     f"{ratio} |")
    return "\n".join(lines) + "\n"
