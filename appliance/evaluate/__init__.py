"""Offline evaluations behind `appliance eval ...`: retrieval on a BEIR-format folder (`retrieval.py`, whose loaders
and metrics are this package's surface: benchmarks and tests score with the same procedure), conversations per
turn (`conversations.py`), answers of real engines against gold answers (`answers.py`, `answer_sets.py`, scored
by `scoring.py`: SQuAD and CMRC) and the router (`router.py`). They open the services through `wiring`, as the
server does, so they sit above it; the submodules other than `retrieval` are imported where used (the CLI imports
each inside its command).
"""
from .retrieval import (EVAL_PARTITION, EVAL_TENANT, RECALL_CHUNKS, BeirData, beir_documents, evaluate_retrieval,
                        load_beir, load_qrels, mrr_at, ndcg_at, read_jsonl, recall_at, score_queries)

__all__ = ["EVAL_PARTITION", "EVAL_TENANT", "RECALL_CHUNKS", "BeirData", "beir_documents", "evaluate_retrieval",
           "load_beir", "load_qrels", "mrr_at", "ndcg_at", "read_jsonl", "recall_at", "score_queries"]
