"""bench/results/query_encoding.md from the results of bench/query_encoding.py."""
from __future__ import annotations

from bench.machine import report_header


def markdown(r: dict) -> str:
    lines = report_header("Query encoding: MiniLM's int8 and fp32 ONNX graphs", r, "bench-encoding", "")
    if r["meta"].get("earlier_fp32"):
        lines += ["", f"`fp32 earlier`: the graph in `{r['meta']['earlier_fp32']}`, timed beside today's fp32 graph "
                  "(`--earlier-fp32`)."]
    lines += ["", "How it is measured: SciFact's judged queries (one at a time unless said), 2 intra-op threads, the "
              "product's ONNX sessions and encoder; the peer runs sentence-transformers' recipe (mean pooling) in "
              "transformers + torch fp32 on the same checkpoint, 2 threads. `rest` is encode's mean minus the "
              "tokenizer's and the session's: padding, pooling, normalising, token vectors.", ""]
    graphs, peer = r["graphs"], r["peer"]
    lines += ["## One query at a time (ms)", "",
              "| graph | tokenizer p50 | session p50 | session p99 | rest (mean) | encode p50 | encode p99 | "
              "via micro-batcher p50 | p99 | encode p50 vs torch |", "|---|---|---|---|---|---|---|---|---|---|"]
    torch_p50 = peer["latency"]["p50_ms"]
    for name, g in graphs.items():
        b = g["breakdown"]
        lines.append(f"| {name} | {b['tokenizer']['p50_ms']} | {b['session']['p50_ms']} | {b['session']['p99_ms']} "
                     f"| {b['rest_of_encode_ms']} | {b['encode']['p50_ms']} | {b['encode']['p99_ms']} | "
                     f"{g['single']['p50_ms']} | {g['single']['p99_ms']} | "
                     f"{torch_p50 / b['encode']['p50_ms']:.2f}x faster |")
    lines.append(f"| transformers + torch {peer['torch']} (peer) | | | | | {torch_p50} | "
                 f"{peer['latency']['p99_ms']} | | | 1.00x |")
    if "interleaved" in r:
        lines += ["", "### The same, graphs interleaved (25 queries on each in turn, so a slow spell of the box hits "
                  "all alike)", "", "| graph | encode p50 | p99 | mean |", "|---|---|---|---|"]
        lines += [f"| {name} | {m['p50_ms']} | {m['p99_ms']} | {m['mean_ms']} |" for name, m in r["interleaved"].items()]
    lines += ["", f"## {next(iter(graphs.values()))['concurrent']['clients']} concurrent clients through the "
              "micro-batcher", "", "| graph | queries/s | p50 ms | p99 ms | mean batch |", "|---|---|---|---|---|"]
    for name, g in graphs.items():
        c = g["concurrent"]
        lines.append(f"| {name} | {c['queries_per_s']} | {c['p50_ms']} | {c['p99_ms']} | {c['mean_batch']} |")
    lines += ["", "## Passages (ingest), batches of 32", "", "| graph | passages/s |", "|---|---|"]
    lines += [f"| {name} | {g['passages']['passages_per_s']} |" for name, g in graphs.items()]
    lines += ["", "## Agreement (cosine of the dense vectors of the same queries)", "", "| pair | min | mean |",
              "|---|---|---|"]
    lines += [f"| {pair.replace('_', ' ')} | {a['min']} | {a['mean']} |" for pair, a in r["agreement"].items()]
    if "ranking" in r:
        lines += ["", "## Ranking: SciFact, hybrid + late interaction, documents encoded on int8", "",
                  "| queries on | nDCG@10 | recall@100 | MRR@10 | search p50 ms | p99 ms |", "|---|---|---|---|---|---|"]
        for name, s in r["ranking"].items():
            lines.append(f"| {name} | {s['ndcg@10']} | {s['recall@100']} | {s['mrr@10']} | {s['p50_ms']} | "
                         f"{s['p99_ms']} |")
    lines += ["", "## What `encoder.graph = \"auto\"` picked, load by load", "",
              "| load ms | queries on | passages on | query ms (median, per graph) | passage batch ms |",
              "|---|---|---|---|---|"]
    for a in r["auto"]:
        lines.append(f"| {a['load_ms']} | {a['query']} | {a['passage']} | {a['query_ms']} | {a['passage_ms']} |")
    if "thread_pool" in r:
        lines += ["", "## The session's thread pool: one query at a time", "",
                  "Sessions built as the product builds them (2 intra-op threads) but for ONNX Runtime's spin entries; "
                  "CPU after a run: what the process used in the 50 ms after a run returned (the cores the search "
                  "threads need next), mean of 40.", "",
                  "| graph: thread pool | session p50 ms | p99 ms | mean ms | CPU ms in the 50 ms after a run |",
                  "|---|---|---|---|---|"]
        lines += [f"| {name} | {t['p50_ms']} | {t['p99_ms']} | {t['mean_ms']} | {t['cpu_ms_after_run']} |"
                  for name, t in r["thread_pool"].items()]
    return "\n".join(lines) + "\n"
