"""Incremental BM25 (appliance/index/bm25_terms.py) scores exactly as bm25s does when it indexes the same rows."""
import bm25s
import numpy as np
import pytest
from support import SCIFACT

from appliance.evaluate import load_beir
from appliance.index.bm25_terms import TermStats, write_bm25
from appliance.text import BM25Tokenizer


@pytest.fixture(scope="module")
def corpus():
    data = load_beir(SCIFACT)
    docs = data.corpus[:400]
    tokenizer = BM25Tokenizer()
    return tokenizer.many([f"{d['title']}\n{d['text']}" for d in docs]), [tokenizer(t) for t in
                                                                           list(data.queries.values())[:40]]


def bm25s_scores(tokens: list[list[str]], queries) -> list[np.ndarray]:
    index = bm25s.BM25()
    index.index(tokens, show_progress=False)
    return [index.get_scores_from_ids(index.get_tokens_ids(q)) for q in queries]


def our_scores(folder, stats: TermStats, queries) -> list[np.ndarray]:
    assert write_bm25(folder, stats)
    index = bm25s.BM25.load(str(folder), mmap=True)  # the way a snapshot opens it
    return [index.get_scores_from_ids(index.get_tokens_ids(q)) for q in queries]


def test_scores_from_term_statistics_equal_bm25s_index(tmp_path, corpus):
    tokens, queries = corpus
    tokens = tokens[:100] + [[]] + tokens[100:]  # a row without a term ("!!!") counts in N and the mean length
    ours = our_scores(tmp_path / "bm25", TermStats.from_tokens(tokens), queries)
    theirs = bm25s_scores(tokens, queries)
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))  # bit for bit, not merely close
    assert sum(int(np.count_nonzero(s)) for s in ours) > 1000


def test_a_version_from_the_previous_statistics_plus_the_delta_equals_a_full_build(tmp_path, corpus):
    tokens, queries = corpus
    first = TermStats.from_tokens(tokens[:300])
    first.save(tmp_path)
    loaded = TermStats.load(tmp_path)
    removed = {3, 50, 51, 299}
    kept = np.asarray([r for r in range(300) if r not in removed])
    rows = [tokens[r] for r in kept] + tokens[300:]
    incremental = loaded.take(kept).then(tokens[300:])
    assert incremental.rows == len(rows) and list(incremental.lengths) == [len(t) for t in rows]
    ours = our_scores(tmp_path / "bm25", incremental, queries)
    theirs = bm25s_scores(rows, queries)
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))


def test_terms_no_row_has_leave_the_vocabulary(tmp_path):
    stats = TermStats.from_tokens([["alpha", "beta", "beta"], ["gamma", "zyzzyva"], ["beta", "gamma"]])
    assert stats.vocab == ["alpha", "beta", "gamma", "zyzzyva"] and list(stats.counts[:2]) == [1, 2]
    after = stats.take(np.asarray([0, 2])).then([["delta"]])  # row 1 (the only zyzzyva) deleted
    assert after.vocab == ["alpha", "beta", "gamma", "delta"]
    assert [after.vocab[i] for i in after.term_ids] == ["alpha", "beta", "beta", "gamma", "delta"]
    assert TermStats.load(tmp_path) is None  # a version written before the statistics: built from its texts


def test_no_terms_at_all_writes_nothing(tmp_path):
    assert not write_bm25(tmp_path / "bm25", TermStats.from_tokens([[], []]))
    assert not (tmp_path / "bm25").exists()
