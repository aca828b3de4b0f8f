"""bench/results/token_vectors.md from the run's results."""
from __future__ import annotations

from bench.machine import report_header


def markdown(r: dict) -> str:
    lines = report_header("Token vectors for late interaction: codecs, disk, cold partitions", r,
                          "bench-tokens", "")
    source = r["source"]
    lines += ["", f"SciFact: 5,183 abstracts -> {source['chunks']} chunks, ingested once with int8 token vectors "
              f"({source['ingest_s']} s, cached); 300 judged queries.", ""]
    lines += _codecs(r["codecs"]) + _product(r["product"]) + _cold(r["cold"])
    return "\n".join(lines) + "\n"


def _codecs(rows: list[dict]) -> list[str]:
    base = rows[0]
    lines = ["## Codecs on the same vectors and candidates", "",
             "Each query's 30 fused candidates (the product's hybrid search, late stage off) re-ranked by MaxSim over "
             "each codec's decoded token vectors; the late stage alone is timed (gather the candidates' codes, "
             "decode, MaxSim). Every codec codes the same int8 vectors and trains on the same 131,072-token sample. "
             "GiB per 100k chunks at SciFact's tokens per chunk.", "",
             "| codec | bytes/token | GiB per 100k chunks | size vs int8 | nDCG@10 | Δ nDCG vs int8 | MRR@10 | "
             "late p50 ms | late p99 ms | train s | code all s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['codec']} | {row['bytes_per_token']} | {row['gib_per_100k_chunks']} | "
                     f"{base['bytes_per_token'] / row['bytes_per_token']:.2f}x smaller | {row['ndcg@10']} | "
                     f"{row['ndcg@10'] - base['ndcg@10']:+.4f} | {row['mrr@10']} | {row['late_p50_ms']} | "
                     f"{row['late_p99_ms']} | {row['train_s']} | {row['encode_s']} |")
    return lines + [""]


def _product(p: dict) -> list[str]:
    lines = ["## The product path", "",
             "SciFact scored through the retriever (`appliance eval retrieval`'s procedure, hybrid + late "
             "interaction, query encoding included): the int8 partition as stored, and a copy re-coded by "
             "`Library.reindex(tokens_only=True)` (`appliance reindex --tokens`) with the default settings, "
             "no text encoded again.", "",
             "| codec | nDCG@10 | recall@100 | MRR@10 | p50 ms | p99 ms | token vectors on disk | "
             "whole index on disk | re-code s |", "|---|---|---|---|---|---|---|---|---|"]
    for label in ("int8", "residual"):
        row = p[label]
        lines.append(f"| {label} | {row['ndcg@10']} | {row['recall@100']} | {row['mrr@10']} | {row['p50_ms']} | "
                     f"{row['p99_ms']} | {row['token_vector_bytes'] / 2**20:.1f} MiB | "
                     f"{row['index_bytes'] / 2**20:.1f} MiB | {row.get('recode_s', '')} |")
    ratio = p["int8"]["token_vector_bytes"] / p["residual"]["token_vector_bytes"]
    per_100k = p["residual"]["token_vector_bytes"] / p["residual"]["chunks"] * 1e5 / 2**30
    lines += ["", f"Token vectors {ratio:.2f}x smaller: {per_100k:.3f} GiB per 100k chunks (codebook included); "
              f"nDCG@10 {p['residual']['ndcg@10'] - p['int8']['ndcg@10']:+.4f}.", ""]
    return lines


def _cold(c: dict) -> list[str]:
    lines = ["## Cold partitions: the first 100 queries after a boot", "",
             "The partition's files evicted from the page cache (posix_fadvise DONTNEED, nothing mapping them), "
             "then the server's boot with its warm-up (prefetch of the index files on or off, "
             "`index.warm_max_mib`), then the first 100 judged queries one at a time, then the same 100 again "
             "(warm; the caches are off, so they are encoded again). Late stage alone and the whole search (query "
             "encoding included).", "",
             "| partition | first 100: late p50 / p99 ms | warm: late p50 / p99 ms | first 100: search p50 / p99 ms | "
             "warm: search p50 / p99 ms | first p99 / warm p99 (search) | warm-up ms |",
             "|---|---|---|---|---|---|---|"]
    for key, row in c.items():
        first, warm = row["first"], row["warm"]
        warm_up = ", ".join(f"{k} {v:.0f}" for k, v in row["warm_up_ms"].items())
        lines.append(f"| {key} | {first['late_p50_ms']} / {first['late_p99_ms']} | {warm['late_p50_ms']} / "
                     f"{warm['late_p99_ms']} | {first['total_p50_ms']} / {first['total_p99_ms']} | "
                     f"{warm['total_p50_ms']} / {warm['total_p99_ms']} | "
                     f"{first['total_p99_ms'] / max(warm['total_p99_ms'], 1e-9):.2f} | {warm_up} |")
    return lines + [""]
