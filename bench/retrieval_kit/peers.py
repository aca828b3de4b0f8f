"""The peers: what a user would build instead, fed the same chunks and the same vectors as the appliance.

(a) faiss IndexFlatIP + rank_bm25 BM25Okapi, glued in Python with RRF (k = 60), run one after the other.
(b) txtai Embeddings with hybrid search and content storage, vectors supplied by an external transform.

Both encode the query with the appliance's encoder (MiniLM ONNX or USE; their own instance, same thread count);
`search_vector` takes a precomputed query vector instead (search-only timing, and the 100k-chunk scale step, where
no encoder is loaded at all).
txtai tokenises for BM25 as it does out of the box (Unicode word segmentation: one term per Chinese character);
(a) gets the appliance's tokenizer (stemming, jieba): rank_bm25 has none of its own (it takes token lists), and
whitespace splitting would not segment Chinese at all.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from appliance.retrieve import rrf
from appliance.text import BM25Tokenizer
from vectors_kit.systems import NPROBE, PQ, ivf_lists  # the IVF-PQ of bench/vectors_scale.py

from .data import Corpus
from .measure import doc_ranking, ms_since

OVERFETCH = 10  # each list fetches 10 x k before fusion, as the appliance does (retrieve.overfetch)


class FaissRankBM25:
    name = "faiss+rank_bm25"

    def __init__(self, corpus: Corpus, encoder, rrf_k: int = 60, ivf_pq: bool = False):
        """`ivf_pq`: the dense half is IVF-PQ re-scored exactly (what a user at a million vectors picks) instead of
        an exact flat index."""
        from rank_bm25 import BM25Okapi

        started = time.perf_counter()
        self.encoder = encoder
        self.tokenize = BM25Tokenizer()
        self.rrf_k = rrf_k
        self.index = _ivf_pq(corpus.dense) if ivf_pq else _flat(corpus.dense)
        if ivf_pq:
            self.index_type = f"IVF{ivf_lists(len(corpus.dense))},{PQ},RFlat, nprobe {NPROBE}"
        self.bm25 = BM25Okapi([self.tokenize(corpus.bm25_text(r)) for r in range(len(corpus.texts))])
        self.build_s = round(time.perf_counter() - started, 1)

    def lists(self, query: str, fetch: int, vector: np.ndarray | None = None) -> tuple[list[int], list[int]]:
        """BM25 rows and dense rows, best first (BM25 only where a query term occurs, as bm25s does)."""
        vector = self.encoder.encode([query]).dense if vector is None else vector
        _, ids = self.index.search(vector, fetch)
        dense = [int(i) for i in ids[0] if i >= 0]
        scores = self.bm25.get_scores(self.tokenize(query))
        fetch = min(fetch, int(np.count_nonzero(scores > 0)))
        if fetch == 0:
            return [], dense
        top = np.argpartition(-scores, fetch - 1)[:fetch]
        return [int(i) for i in top[np.argsort(-scores[top], kind="stable")]], dense

    def search(self, query: str, k: int) -> list[int]:
        return self.search_vector(query, None, k)

    def search_vector(self, query: str, vector: np.ndarray | None, k: int) -> list[int]:
        """`vector`: the query's (1, dim) embedding, or None to encode it here."""
        bm25, dense = self.lists(query, k * OVERFETCH, vector)
        return [row for row, _ in rrf([x for x in (bm25, dense) if x], self.rrf_k)[:k]]

    def search_all(self, query: str, k: int) -> dict[str, list[int]]:
        """One pass, three rankings: BM25 alone, dense alone, fused (for the quality table)."""
        bm25, dense = self.lists(query, k * OVERFETCH)
        fused = [row for row, _ in rrf([x for x in (bm25, dense) if x], self.rrf_k)[:k]]
        return {"bm25": bm25[:k], "dense": dense[:k], "hybrid": fused}


IVF_REFINE = 4  # candidates re-scored exactly: 4 x what the search asks for


def _flat(dense: np.ndarray):
    import faiss

    index = faiss.IndexFlatIP(dense.shape[1])  # exact search: cosine on normalised vectors
    index.add(np.ascontiguousarray(dense, dtype=np.float32))
    return index


def _ivf_pq(dense: np.ndarray):
    """IVF-PQ trained on 40 vectors per list, each search's candidates re-scored on the exact vectors (RFlat)."""
    import faiss

    lists = ivf_lists(len(dense))
    index = faiss.index_factory(dense.shape[1], f"IVF{lists},{PQ},RFlat", faiss.METRIC_INNER_PRODUCT)
    sample = np.random.default_rng(2).choice(len(dense), min(len(dense), lists * 40), replace=False)
    index.train(np.ascontiguousarray(dense[np.sort(sample)], dtype=np.float32))
    for start in range(0, len(dense), 100_000):
        index.add(np.ascontiguousarray(dense[start:start + 100_000], dtype=np.float32))
    faiss.extract_index_ivf(index).nprobe = NPROBE
    index.k_factor = IVF_REFINE
    return index


class BuildTimeout(RuntimeError):
    """A peer's index build ran past the time it was given."""


class TxtaiHybrid:
    name = "txtai"

    def __init__(self, corpus: Corpus, encoder, deadline: float | None = None):
        """`encoder`: None where every query comes with its vector (search_vector). `deadline`: a perf_counter
        time; the build stops with BuildTimeout if it is still reading documents then."""
        from txtai import Embeddings

        started = time.perf_counter()
        n = len(corpus.texts)
        texts = [corpus.bm25_text(r) for r in range(n)]
        # txtai hands the transform the texts to embed; corpus texts map to their stored vectors, and so do the
        # queries given to search_vector; anything else (a query) goes through the ONNX encoder. It must be a plain
        # function: txtai calls other callables first.
        self.known = known = {t: corpus.dense[r] for r, t in enumerate(texts)}
        self.encoder_calls = 0

        def transform(batch: list[str]) -> np.ndarray:
            found = [known.get(t) for t in batch]
            missing = [i for i, v in enumerate(found) if v is None]
            if missing:
                if encoder is None:
                    raise LookupError("no encoder: a query must come with its vector (search_vector)")
                self.encoder_calls += 1
                encoded = encoder.encode([batch[i] for i in missing]).dense
                for i, vector in zip(missing, encoded):
                    found[i] = vector
            return np.stack(found).astype(np.float32)

        # hybrid=True: txtai's default BM25 scoring (terms index, normalised scores, convex fusion 0.5/0.5) + dense
        # index (faiss, txtai's own choice of index type by size). content=True: texts stored in its SQLite.
        self.embeddings = Embeddings(method="external", transform=transform, content=True, hybrid=True)
        self.embeddings.index(_until(deadline, ((r, {"text": t}, None) for r, t in enumerate(texts))))
        # txtai's content database shares one cursor and temporary tables between searches; its own Application
        # (what its API server runs) therefore serialises every search under a lock. Do the same.
        self.lock = threading.RLock()
        self.build_s = round(time.perf_counter() - started, 1)
        build = self.embeddings.config.get("build", {})
        self.index_type = f"{self.embeddings.config.get('backend')} {build.get('settings', {}).get('components', '?')}"

    def search(self, query: str, k: int) -> list[int]:
        with self.lock:
            results = self.embeddings.search(query, k)
        return [int(r["id"]) for r in results]

    def search_vector(self, query: str, vector: np.ndarray, k: int) -> list[int]:
        """txtai embeds a query through the transform, so the vector is handed over there (a dict entry); the text
        still goes to its BM25 side."""
        self.known.setdefault(query, vector[0])
        return self.search(query, k)


def _until(deadline: float | None, items):
    for n, item in enumerate(items):
        if deadline is not None and n % 1000 == 0 and time.perf_counter() > deadline:
            raise BuildTimeout(f"still reading documents after {n}")
        yield item


def quality(peer, corpus: Corpus, data, page_k: int, deep_k: int) -> tuple[dict, dict, list[float]]:
    """Per ranking kind, the document rankings of every judged query from a `page_k` search (nDCG, MRR) and from a
    `deep_k` one (recall), as appliance.evaluate scores ours; plus the time of each page search (ms)."""
    def search(text: str, k: int) -> dict[str, list[int]]:
        return peer.search_all(text, k) if hasattr(peer, "search_all") else {"hybrid": peer.search(text, k)}

    page: dict[str, dict[str, list[str]]] = {}
    deep: dict[str, dict[str, list[str]]] = {}
    samples = []
    for qid, text in data.queries.items():
        started = time.perf_counter()
        rows = search(text, page_k)
        samples.append(ms_since(started))
        for ranked, found in ((page, rows), (deep, search(text, deep_k))):
            for kind, chunks in found.items():
                ranked.setdefault(kind, {})[qid] = doc_ranking(corpus.doc_keys[r] for r in chunks)
    return page, deep, samples
