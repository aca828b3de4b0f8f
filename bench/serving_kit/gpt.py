"""GPTCache 0.1.44 as its docs set it up: sqlite + faiss data manager, SearchDistanceEvaluation, put/get API, fed
the same precomputed vectors as ours (so only the cache logic differs).

Facts read from the installed source (stated in the report):
- `Cache.init` defaults: similarity_evaluation=ExactMatchEvaluation(), `Config().similarity_threshold` = 0.8.
- `SearchDistanceEvaluation()`: max_distance 4.0, positive False: score = 4 - d, d = faiss squared L2 distance
  (IndexIDMap+Flat, METRIC_L2); a hit needs score >= 4 * threshold. With unit vectors d = 2 - 2 cos, so a hit
  needs cosine >= 2 * threshold - 1 (0.8 -> cosine 0.6).
- `VectorBase("faiss")` top_k default 1: only the nearest stored question is considered.
- `get_data_manager` max_size default 1000 (LRU eviction): raised to 200,000 here, like our max_entries.
"""
from __future__ import annotations

import atexit
import importlib.util
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

MAX_SIZE = 200_000


def cos_of(threshold: float) -> float:
    return round(2 * threshold - 1, 4)


class Gpt:
    def __init__(self, dim: int, lookup_vector, threshold: float = 0.8):
        from gptcache import Cache, Config
        from gptcache.manager import CacheBase, VectorBase, get_data_manager
        from gptcache.processor.pre import get_prompt
        from gptcache.similarity_evaluation import SearchDistanceEvaluation

        if importlib.util.find_spec("sqlalchemy") is None:  # else GPTCache shells out to `pip install` at runtime
            raise RuntimeError("GPTCache's sqlite store needs sqlalchemy: pip install 'sqlalchemy>=2'")
        tmp = Path(tempfile.mkdtemp(prefix="gptcache-"))
        # GPTCache registers an atexit close that writes its faiss index: remove the folder after it (LIFO)
        atexit.register(shutil.rmtree, tmp, True)
        self.data_manager = get_data_manager(
            CacheBase("sqlite", sql_url=f"sqlite:///{tmp / 'sqlite.db'}"),
            VectorBase("faiss", dimension=dim, index_path=str(tmp / "faiss.index")), max_size=MAX_SIZE)
        self.cache = Cache()
        self.cache.init(pre_embedding_func=get_prompt, embedding_func=lambda text, **_: lookup_vector(text),
                        data_manager=self.data_manager, similarity_evaluation=SearchDistanceEvaluation(),
                        config=Config(similarity_threshold=threshold))

    def set_threshold(self, threshold: float) -> None:
        self.cache.config.similarity_threshold = threshold

    def put(self, question: str, answer: str) -> None:
        from gptcache.adapter.api import put

        put(question, answer, cache_obj=self.cache)

    def bulk(self, questions: list[str], answers: list[str], vectors: np.ndarray) -> None:
        """GPTCache's own bulk load (DataManager.import_data), for filling 100k entries."""
        for i in range(0, len(questions), 5000):
            self.data_manager.import_data(questions[i:i + 5000], answers[i:i + 5000],
                                          [v for v in vectors[i:i + 5000]], [None] * len(questions[i:i + 5000]))

    def get(self, question: str, **kwargs):
        from gptcache.adapter.api import get

        return get(question, cache_obj=self.cache, **kwargs)

    def close(self) -> None:
        self.data_manager.close()


def evaluate_sweep(pairs, vectors, thresholds: list[float], direct: float | None = 0.8) -> dict:
    """evaluate_pairs' protocol for GPTCache: every text_a put once, then each text_b looked up with `get`.

    With top_k 1 nothing but the nearest entry's score decides a hit, so one `get` pass at the lowest threshold,
    recording the score through GPTCache's own `hit_callback`, gives the outcome at every higher threshold. A
    second, plain pass at `direct` checks that: its counts must equal the derived ones."""
    texts_a = list(dict.fromkeys(p.a for p in pairs))
    gpt = Gpt(vectors.dense.shape[1], lambda text: vectors.dense[vectors.row[text]], min(thresholds))
    try:
        for text in texts_a:
            gpt.put(text, text)
        found, latencies = [], []
        for pair in pairs:
            seen = []
            started = time.perf_counter()
            answer = gpt.get(pair.b, hit_callback=seen.extend)
            latencies.append((time.perf_counter() - started) * 1000)
            found.append(None if answer is None else (answer, seen[0][1] * 4.0))  # score back on 0..max_distance
        out = {}
        for t in thresholds:
            answers = [f[0] if f and 4.0 * t <= f[1] else None for f in found]
            right, wrong = _judge(pairs, answers)
            out[str(t)] = counts(pairs, len(texts_a), right, wrong, latencies) | {
                "threshold": t, "min_cosine": cos_of(t)} | breakdown(pairs, answers)
        if direct is not None:
            gpt.set_threshold(direct)
            latencies = []
            answers = []
            for pair in pairs:
                started = time.perf_counter()
                answers.append(gpt.get(pair.b))
                latencies.append((time.perf_counter() - started) * 1000)
            right, wrong = _judge(pairs, answers)
            out[f"direct {direct}"] = counts(pairs, len(texts_a), right, wrong, latencies) | {
                "threshold": direct, "min_cosine": cos_of(direct)} | breakdown(pairs, answers)
    finally:
        gpt.close()
    return out


def _judge(pairs, answers: list) -> tuple[int, int]:
    from appliance.text import question_key

    right = wrong = 0
    for pair, answer in zip(pairs, answers):
        if answer is None:
            continue
        if pair.label == 1 and question_key(answer) == question_key(pair.a):
            right += 1
        else:
            wrong += 1
    return right, wrong


def breakdown(pairs, found: list) -> dict:
    from appliance.text import question_key

    on_dup = sum(1 for p, f in zip(pairs, found)
                 if f is not None and p.label == 1 and question_key(f) != question_key(p.a))
    on_non = sum(1 for p, f in zip(pairs, found) if f is not None and p.label == 0)
    same = sum(1 for p, f in zip(pairs, found) if f is not None and question_key(f) == question_key(p.b)
               and not (p.label == 1 and question_key(f) == question_key(p.a)))
    return {"wrong_on_duplicates": on_dup, "wrong_on_non_duplicates": on_non, "wrong_same_text": same}


def counts(pairs, stored: int, right: int, wrong: int, latencies: list[float]) -> dict:
    """The same fields as appliance.cache.evaluate.evaluate_pairs."""
    hits = right + wrong
    return {"pairs": len(pairs), "duplicates": sum(p.label for p in pairs), "stored": stored,
            "right_hits": right, "wrong_hits": wrong, "hit_rate": round(hits / len(pairs), 4),
            "wrong_hit_share": round(wrong / hits, 4) if hits else 0.0,
            "p50_lookup_ms": round(float(np.percentile(latencies, 50)), 3),
            "p99_lookup_ms": round(float(np.percentile(latencies, 99)), 3)}
