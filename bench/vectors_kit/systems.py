"""The vector indexes bench/vectors_scale.py compares: how each is built and saved, and how a serving process
loads it and answers one query. Each `+rescore` system searches its index for RESCORE candidates and orders them
by their exact inner product with the query, read from the memory-mapped f16 vectors (dense.npy)."""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HNSW = {"connectivity": 16, "expansion_add": 128, "expansion_search": 64}  # the product's IndexSettings defaults
PQ = "PQ48"  # 48 bytes a vector, as USearch b1 (384 bits)
NPROBE = 32
RESCORE = 100
THREADS = 2  # building; a query runs on one thread, as in the product's search pool
NAMES = ("usearch-f16", "usearch-i8", "usearch-i8+rescore", "usearch-b1+rescore", "faiss-ivfpq",
         "faiss-ivfpq+rescore")


def ivf_lists(n: int) -> int:
    """faiss's rule of thumb, ~4 sqrt(n) inverted lists, as a power of two (4096 at 1M)."""
    return 2 ** round(np.log2(4 * np.sqrt(n)))


def _index_file(name: str) -> str:
    base = name.removesuffix("+rescore")
    return f"{base}.faiss" if base.startswith("faiss") else f"{base}.usearch"


def build(name: str, folder: Path, vectors: np.ndarray) -> dict:
    """Build and save `name`'s index (shared by a system and its +rescore twin; reused when already saved)."""
    path = folder / _index_file(name)
    facts = path.with_suffix(path.suffix + ".json")
    if path.exists() and facts.exists():
        return json.loads(facts.read_text()) | {"reused": True}
    started = time.perf_counter()
    if name.startswith("faiss"):
        _build_ivf_pq(path, vectors)
    else:
        _build_hnsw(path, vectors, name.split("-")[1].removesuffix("+rescore"))
    built = {"build_s": round(time.perf_counter() - started, 1), "disk_bytes": path.stat().st_size,
             "bytes_per_vector": round(path.stat().st_size / len(vectors), 1)}
    facts.write_text(json.dumps(built))
    return built


def load(name: str, folder: Path, vectors: np.ndarray) -> Callable[[np.ndarray, int], np.ndarray]:
    path = folder / _index_file(name)
    if name.startswith("faiss"):
        import faiss

        faiss.omp_set_num_threads(1)
        index = faiss.read_index(str(path))
        index.nprobe = NPROBE

        def candidates(q: np.ndarray, k: int) -> np.ndarray:
            return index.search(q[None, :], k)[1][0]
    else:
        from usearch.index import Index

        index = Index.restore(str(path), view=True)
        binary = index.dtype.name.lower().startswith("b1")

        def candidates(q: np.ndarray, k: int) -> np.ndarray:
            return index.search(np.packbits(q > 0) if binary else q, k).keys
    if not name.endswith("+rescore"):
        return candidates

    def rescored(q: np.ndarray, k: int) -> np.ndarray:
        rows = np.sort(candidates(q, RESCORE))  # in file order: the page cache reads ahead
        rows = rows[rows >= 0]
        scores = np.asarray(vectors[rows], np.float32) @ q
        return rows[np.argsort(-scores)[:k]]
    return rescored


def _build_hnsw(path: Path, vectors: np.ndarray, dtype: str) -> None:
    from usearch.index import Index

    binary = dtype == "b1"
    index = Index(ndim=vectors.shape[1], metric="hamming" if binary else "cos", dtype=dtype, **HNSW)
    for start in range(0, len(vectors), 100_000):
        block = np.asarray(vectors[start:start + 100_000], np.float32)
        index.add(np.arange(start, start + len(block)), np.packbits(block > 0, axis=1) if binary else block,
                  threads=THREADS)
    index.save(str(path))


def _build_ivf_pq(path: Path, vectors: np.ndarray) -> None:
    import faiss

    faiss.omp_set_num_threads(THREADS)
    lists = ivf_lists(len(vectors))
    index = faiss.index_factory(vectors.shape[1], f"IVF{lists},{PQ}", faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(2)
    sample = np.asarray(vectors[np.sort(rng.choice(len(vectors), min(len(vectors), lists * 40), replace=False))],
                        np.float32)
    index.train(sample)
    for start in range(0, len(vectors), 100_000):
        index.add(np.asarray(vectors[start:start + 100_000], np.float32))
    faiss.write_index(index, str(path))
