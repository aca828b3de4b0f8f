"""Token-vector codecs compared on one partition's vectors, the same candidates and the same MaxSim.

Every codec codes the same int8 token vectors (the product's store before the residual codec); a query's
candidates are its product-path fused list (hybrid, no late stage), and each codec re-ranks them by MaxSim over
its own decoded vectors. What is timed per query is the late stage alone: gather the candidates' codes, decode,
MaxSim.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from appliance.index import PartitionSnapshot, TokenBlock, train_codebook
from appliance.retrieve import maxsim

_ROWS = 2048  # rows decoded from int8 at a time while coding a copy


@dataclass(slots=True)
class CodedTokens:
    """One codec's copy of every row's token vectors."""
    name: str
    bytes_per_token: float
    decode: Callable[[np.ndarray], TokenBlock]  # rows -> their decoded vectors
    train_s: float = 0.0
    encode_s: float = 0.0


def int8_tokens(snapshot: PartitionSnapshot) -> CodedTokens:
    return CodedTokens("int8 (today)", snapshot.dim + 4, snapshot.token_vectors)


def training_sample(snapshot: PartitionSnapshot, limit: int, seed: int = 0) -> np.ndarray:
    """`limit` token vectors of random rows: what the product's first residual build trains on."""
    rng = np.random.default_rng(seed)
    per_row = snapshot.token_count / snapshot.size
    rows = np.sort(rng.permutation(snapshot.size)[: int(limit / per_row) + 1])
    vectors = snapshot.token_vectors(rows).vectors
    return vectors[rng.choice(len(vectors), min(limit, len(vectors)), replace=False)]


def first_rows_sample(snapshot: PartitionSnapshot, limit: int) -> np.ndarray:
    """The token vectors of the partition's first rows, `limit` of them: what a partition filled by a trickle of
    small ingests trains its codebook on (its first `codebook_min_tokens`), then codes everything after with."""
    lengths = np.asarray(snapshot.token_refs)[:, 2]
    rows = int(np.searchsorted(np.cumsum(lengths), limit)) + 1
    return snapshot.token_vectors(np.arange(min(rows, snapshot.size))).vectors[:limit]


def residual_tokens(snapshot: PartitionSnapshot, sample: np.ndarray, centroids: int, bits: int,
                    trained_on: str = "") -> CodedTokens:
    started = time.perf_counter()
    book = train_codebook(sample, centroids, bits)
    trained = time.perf_counter()
    codes = [book.encode(block) for block in _blocks(snapshot)]
    ids, packed = np.concatenate([c[0] for c in codes]), np.concatenate([c[1] for c in codes])
    encoded = time.perf_counter()
    starts, lengths = _layout(snapshot)

    def decode(rows: np.ndarray) -> TokenBlock:
        picked = _gather(starts, lengths, rows)
        return TokenBlock(book.decode(ids[picked], packed[picked]), lengths[rows])

    return CodedTokens(f"ours residual, {centroids} centroids, {bits} bit{'s' if bits > 1 else ''}{trained_on}",
                       2 + book.code_bytes, decode, round(trained - started, 1), round(encoded - trained, 1))


def faiss_pq_tokens(snapshot: PartitionSnapshot, sample: np.ndarray, subquantizers: int) -> CodedTokens:
    """faiss's product quantizer (8 bits per sub-vector): `subquantizers` bytes per token."""
    import faiss

    started = time.perf_counter()
    pq = faiss.ProductQuantizer(snapshot.dim, subquantizers, 8)
    pq.train(np.ascontiguousarray(sample, np.float32))
    trained = time.perf_counter()
    codes = np.concatenate([pq.compute_codes(np.ascontiguousarray(block)) for block in _blocks(snapshot)])
    encoded = time.perf_counter()
    starts, lengths = _layout(snapshot)

    def decode(rows: np.ndarray) -> TokenBlock:
        vectors = pq.decode(codes[_gather(starts, lengths, rows)])
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return TokenBlock(vectors, lengths[rows])

    return CodedTokens(f"faiss PQ, {subquantizers} x 8 bits", subquantizers, decode, round(trained - started, 1),
                       round(encoded - trained, 1))


@dataclass(slots=True, frozen=True)
class Candidates:
    """One query: its token vectors, the fused candidates' rows in order, and its judgments."""
    tokens: np.ndarray
    rows: np.ndarray
    relevant: dict[str, int]


def rank(coded: CodedTokens, snapshot: PartitionSnapshot, queries: list[Candidates], k: int = 10) -> dict:
    from appliance.evaluate import mrr_at, ndcg_at

    ndcg, mrr, late_ms = [], [], []
    for q in queries:
        started = time.perf_counter()
        scores = maxsim(q.tokens, coded.decode(q.rows))
        late_ms.append((time.perf_counter() - started) * 1000)
        order = q.rows[np.argsort(-scores, kind="stable")[:k]]
        ranked = list(dict.fromkeys(snapshot.docs[int(snapshot.doc_index[r])]["key"] for r in order))
        ndcg.append(ndcg_at(ranked, q.relevant))
        mrr.append(mrr_at(ranked, q.relevant))
    per_100k = coded.bytes_per_token * snapshot.token_count / snapshot.size * 100_000
    return {"codec": coded.name, "bytes_per_token": coded.bytes_per_token,
            "gib_per_100k_chunks": round(per_100k / 2**30, 3),
            "ndcg@10": round(float(np.mean(ndcg)), 4), "mrr@10": round(float(np.mean(mrr)), 4),
            "late_p50_ms": round(float(np.percentile(late_ms, 50)), 2),
            "late_p99_ms": round(float(np.percentile(late_ms, 99)), 2), "train_s": coded.train_s,
            "encode_s": coded.encode_s, "queries": len(queries)}


def _blocks(snapshot: PartitionSnapshot):
    for start in range(0, snapshot.size, _ROWS):
        yield snapshot.token_vectors(np.arange(start, min(start + _ROWS, snapshot.size))).vectors


def _layout(snapshot: PartitionSnapshot) -> tuple[np.ndarray, np.ndarray]:
    """Where each row's tokens start in a copy coded in row order, and how many it has."""
    lengths = np.asarray(snapshot.token_refs)[:, 2].astype(np.int64)
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths


def _gather(starts: np.ndarray, lengths: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return np.concatenate([np.arange(starts[r], starts[r] + lengths[r]) for r in rows])
