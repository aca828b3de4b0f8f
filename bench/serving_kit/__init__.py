"""Pieces of bench/serving.py: the semantic cache against GPTCache (cache_eval, latency), the loopback load test
(load), and the report (report, targets)."""
