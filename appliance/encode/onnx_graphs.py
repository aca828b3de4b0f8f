"""Which ONNX graph of a model encodes what, measured once at load (never assumed from the CPU's name).

A model folder may hold two graphs of the same model: `model.onnx` (int8, dynamically quantised: the reference,
what the shipped indexes were encoded with) and `model-fp32.onnx` (exported at build time from the original
checkpoint). Which is faster depends on the CPU: int8 quantises each matmul's input at run time and leans on
VNNI/AMX dot products that AVX2-only CPUs emulate; fp32 pays for 4x the weight bytes. So at load each graph
encodes a few queries and a few passages, interleaved, and each workload takes the faster graph, provided it
ranks as the reference does (its vectors agree with the reference's on every calibration text).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

GRAPH_FILES = {"int8": "model.onnx", "fp32": "model-fp32.onnx"}  # the first is the reference
GRAPH_SETTINGS = ("auto", *GRAPH_FILES)
QUERY_TOKENS = 64  # a length group this wide or narrower is encoded as queries are
MIN_AGREEMENT = 0.995  # cosine of a graph's dense vector with the reference's (fp32 vs int8: >= 0.9993 measured)
MARGIN = 0.05  # another graph must be this much faster than the reference to replace it (boots stay stable)

_QUERIES = [
    "what causes high blood pressure in adults",
    "How do I reset the VPN token on a new laptop?",
    "side effects of statins",
    "Which regions does the 2024 maintenance contract cover, and who signs off on renewals?",
    "mitochondrial DNA mutations and ageing",
    "refund policy for cancelled orders",
    "Is vitamin D supplementation linked to fewer fractures in elderly patients?",
    "error 503 after upgrading the load balancer",
]
_PASSAGE = ("The study followed patients for five years after the first diagnosis and measured how often the "
            "condition returned, comparing those who received the new treatment with those who did not. ")
_PASSAGES = [_PASSAGE * 4, _PASSAGE * 3]


@dataclass(slots=True, frozen=True)
class GraphChoice:
    """The graph each workload runs on, and what was measured to choose it (median ms per call)."""
    query: str
    passage: str
    query_ms: dict[str, float] = field(default_factory=dict)
    passage_ms: dict[str, float] = field(default_factory=dict)
    agreement: dict[str, float] = field(default_factory=dict)  # lowest cosine with the reference's vectors
    reason: str = ""

    def graphs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.query, self.passage)))


def graph_paths(model_dir: Path, setting: str) -> dict[str, Path]:
    """The graphs to load for `setting` ("auto": every one the folder has; else that one, which must exist)."""
    if setting not in GRAPH_SETTINGS:
        raise ValueError(f"encoder graph {setting!r} is not one of {GRAPH_SETTINGS}")
    wanted = GRAPH_FILES if setting == "auto" else {setting: GRAPH_FILES[setting]}
    found = {name: Path(model_dir) / file for name, file in wanted.items() if (Path(model_dir) / file).is_file()}
    if not found:
        missing = ", ".join(wanted.values())
        raise FileNotFoundError(f"{model_dir} has no {missing}: run `appliance models build` (the fp32 graph needs "
                                "torch and onnx at build time)")
    return found


def choose_graphs(graphs: list[str], forward: Callable[[str, list[str]], np.ndarray], rounds: int = 3) -> GraphChoice:
    """Time `forward(graph, texts)` (dense vectors out) on queries one by one and on a passage batch, per graph."""
    if len(graphs) == 1:
        return GraphChoice(graphs[0], graphs[0], reason="one graph loaded")
    reference = next(name for name in GRAPH_FILES if name in graphs)
    expected = forward(reference, _QUERIES + _PASSAGES)
    agreement = {g: float((forward(g, _QUERIES + _PASSAGES) * expected).sum(axis=1).min())
                 for g in graphs if g != reference}
    candidates = [reference, *(g for g, cosine in agreement.items() if cosine >= MIN_AGREEMENT)]
    query_ms: dict[str, list[float]] = {g: [] for g in candidates}
    passage_ms: dict[str, list[float]] = {g: [] for g in candidates}
    for _ in range(rounds):  # interleaved, so a burst of load elsewhere hits every graph alike
        for graph in candidates:
            for query in _QUERIES:
                query_ms[graph].append(_timed(forward, graph, [query]))
            passage_ms[graph].append(_timed(forward, graph, _PASSAGES))
    q = {g: round(statistics.median(v), 3) for g, v in query_ms.items()}
    p = {g: round(statistics.median(v), 3) for g, v in passage_ms.items()}
    disagreeing = [g for g in agreement if g not in candidates]
    reason = f"{', '.join(disagreeing)} disagreed with {reference}: not used" if disagreeing else "fastest measured"
    return GraphChoice(_fastest(q, reference), _fastest(p, reference), q, p, agreement, reason)


def _fastest(ms: dict[str, float], reference: str) -> str:
    best = min(ms, key=ms.__getitem__)
    return best if ms[best] < ms[reference] * (1 - MARGIN) else reference


def _timed(forward: Callable[[str, list[str]], np.ndarray], graph: str, texts: list[str]) -> float:
    started = time.perf_counter()
    forward(graph, texts)
    return (time.perf_counter() - started) * 1000
