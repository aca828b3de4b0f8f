"""Cache layers on their own: key normalisation, exact (memory + disk, TTL, restarts), semantic (real MiniLM
vectors: paraphrases hit, near-misses do not, tenants and index versions scope entries, questions MiniLM cannot
represent stay out), single flight, and `appliance eval cache` on real QQP and AFQMC pairs. The embedding cache and
tenant isolation by id: test_cache_tenants.py."""
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest

from appliance.cache import ExactCache, SemanticCache, SemanticParams, SingleFlight, answer_key, near_miss
from appliance.cache.evaluate import evaluate_pairs, load_pairs
from appliance.cache.semantic import UNREPRESENTED
from appliance.encode import load_encoder
from appliance.text import question_key
from appliance.paths import model_folder
from support import DATA, ROOT

QQP = DATA / "qqp_pairs_en" / "pairs.tsv"
AFQMC = DATA / "afqmc_pairs_zh" / "pairs.tsv"
PARAMS = SemanticParams(threshold=0.9, late_threshold=0.85, max_entries=1000, ttl_s=3600)


@pytest.fixture(scope="module")
def minilm(models_dir):
    return load_encoder("minilm", model_folder(models_dir, "minilm"), threads=1)


def vectors(encoder, text):
    encoded = encoder.encode([text])
    return encoded.dense[0], encoded.tokens[0]


def test_normalised_questions_share_a_key():
    assert question_key("RAG系统") == question_key("RAG 系统") == question_key("ＲＡＧ　系统？") == "rag系统"
    assert question_key("  What IS   bm25?! ") == question_key("what is bm25") == "what is bm25"
    assert question_key("costs 3.5 dollars") != question_key("costs 35 dollars")
    base = answer_key("What is BM25?", "t", {"p": 1}, "s")
    assert answer_key("what is bm25", "t", {"p": 1}, "s") == base
    assert len({base, answer_key("What is BM25?", "u", {"p": 1}, "s"), answer_key("What is BM25?", "t", {"p": 2}, "s"),
                answer_key("What is BM25?", "t", {"p": 1}, "other")}) == 4


def test_exact_cache_survives_a_restart_and_expires(tmp_path):
    cache = ExactCache(tmp_path / "exact", memory_items=2, ttl_s=3600, size_limit_bytes=1 << 26)
    for n in range(5):
        cache.put(f"k{n}", {"answer": n})
    assert cache.get("k0") == {"answer": 0}, "evicted from memory, still on disk"
    cache.close()
    reopened = ExactCache(tmp_path / "exact", memory_items=2, ttl_s=3600, size_limit_bytes=1 << 26)
    assert reopened.get("k4") == {"answer": 4} and reopened.get("missing") is None
    assert reopened.delete("k4") and reopened.get("k4") is None
    reopened.close()
    short = ExactCache(tmp_path / "short", memory_items=8, ttl_s=0.3, size_limit_bytes=1 << 26)
    short.put("k", {"answer": 1})
    assert short.get("k") == {"answer": 1}
    time.sleep(0.5)
    assert short.get("k") is None, "expired in memory and on disk"
    short.close()


def test_semantic_cache_hits_paraphrases_and_rejects_near_misses(tmp_path, minilm):
    cache = SemanticCache(tmp_path / "sem", minilm.dim, PARAMS, 1 << 26)
    stored = "How do I learn Python quickly?"
    dense, tokens = vectors(minilm, stored)
    cache.store("t", "s", stored, dense, {"p": 1}, {"answer": "practice"}, tokens)

    def lookup(question, tenant="t", scope="s", versions=None):
        dense, tokens = vectors(minilm, question)
        return cache.lookup(tenant, scope, question, dense, versions or {"p": 1}, tokens)

    hit = lookup("How can I learn Python quickly?").hit
    assert hit is not None and hit.payload == {"answer": "practice"} and hit.similarity >= 0.9
    for near in ("How do I learn Java quickly?", "How do I not learn Python quickly?"):
        found = lookup(near)
        assert found.hit is None, near
    assert lookup("How can I learn Python quickly?", tenant="u").hit is None, "another tenant's entries"
    assert lookup("How can I learn Python quickly?", scope="other").hit is None, "another prompt or model"
    stale = lookup("How can I learn Python quickly?", versions={"p": 2})
    assert stale.hit is None and "index changed" in stale.rejected[0] and len(cache) == 0
    cache.close()


def test_semantic_entries_persist_and_are_listed_invalidated_and_deleted(tmp_path, minilm):
    params = SemanticParams(0.9, 0.0, max_entries=3, ttl_s=3600)
    cache = SemanticCache(tmp_path / "sem", minilm.dim, params, 1 << 26)
    ids = [cache.store("t", "s", f"question {n}", vectors(minilm, f"question {n}")[0], {"p": 1, "q": n},
                       {"answer": str(n)}) for n in range(4)]
    cache.store("u", "s", "question 9", vectors(minilm, "question 9")[0], {"p": 1}, {"answer": "9"})
    assert [e["id"] for e in cache.entries("t")] == ids[:0:-1], "newest first; the oldest went past max_entries"
    cache.close()
    cache = SemanticCache(tmp_path / "sem", minilm.dim, params, 1 << 26)
    assert len(cache) == 4 and cache.holds("t", ids[3]) and not cache.holds("u", ids[3])
    assert not cache.delete("u", ids[3]), "a tenant cannot delete another's entry"
    assert cache.delete("t", ids[3]) and not cache.holds("t", ids[3])
    assert cache.invalidate("t", "q", 2) == 1 and [e["id"] for e in cache.entries("t")] == [ids[2]]
    cache.close()


def test_semantic_cache_neither_answers_nor_stores_what_minilm_cannot_represent(tmp_path, minilm):
    pairs = [p for p in load_pairs(AFQMC) if p.label == 1][:30]
    a, b = minilm.encode([p.a for p in pairs]), minilm.encode([p.b for p in pairs])
    assert float(min(a.unknown.min(), b.unknown.min())) > PARAMS.max_unknown, "mostly [UNK] word pieces"
    cache = SemanticCache(tmp_path / "sem", minilm.dim, PARAMS, 1 << 26)
    for i, pair in enumerate(pairs):
        assert cache.store("t", "s", pair.a, a.dense[i], {}, {"answer": pair.a}, a.tokens[i], a.unknown[i]) is None
    assert len(cache) == 0
    for i, pair in enumerate(pairs):  # as an earlier version stored them: still no answer for a Chinese question
        cache.store("t", "s", pair.a, a.dense[i], {}, {"answer": pair.a}, a.tokens[i])
    for i, pair in enumerate(pairs):
        found = cache.lookup("t", "s", pair.b, b.dense[i], {}, b.tokens[i], b.unknown[i])
        assert found.hit is None and found.rejected == [UNREPRESENTED], pair
    english = minilm.encode(["How do I learn Python quickly?", "How can I learn Python quickly?"])
    assert english.unknown.tolist() == [0.0, 0.0]
    cache.store("t", "s", "How do I learn Python quickly?", english.dense[0], {}, {"answer": "practice"},
                english.tokens[0], english.unknown[0])
    hit = cache.lookup("t", "s", "How can I learn Python quickly?", english.dense[1], {}, english.tokens[1],
                       english.unknown[1]).hit
    assert hit is not None and hit.payload == {"answer": "practice"}
    cache.close()


def test_near_miss_rules():
    assert near_miss("top 5 movies of 2020", "top 10 movies of 2020") == "different numbers"
    assert near_miss("Can I pay with Huabei?", "Why can't I pay with Huabei?") == "negation differs"
    assert near_miss("为什么不能用花呗", "为什么能用花呗") == "negation differs"
    assert near_miss("Is Obama taller than Biden?", "Is Obama taller than Trump?").startswith("different name")
    assert near_miss("Why do Indians love cricket?", "Why do people in India love cricket?") is None
    assert near_miss("How do I lose weight?", "What is the best way to lose weight?") is None


def test_single_flight_computes_once_and_bounds_the_wait():
    async def scenario():
        flight = SingleFlight(wait_s=1.0)
        computed = []

        async def request(key):
            if flight.lead(key):
                await asyncio.sleep(0.1)
                computed.append(key)
                flight.finish(key, f"answer {key}")
                return f"answer {key}"
            return await flight.wait(key)

        results = await asyncio.gather(*(request("k") for _ in range(8)))
        slow = SingleFlight(wait_s=0.05)
        assert slow.lead("x")
        waited = await slow.wait("x")
        slow.finish("x", None)
        return results, computed, waited, len(flight)

    results, computed, waited, left = asyncio.run(scenario())
    assert results == ["answer k"] * 8 and computed == ["k"] and left == 0
    assert waited is None, "a follower stops waiting after wait_s"


def test_eval_cache_on_qqp_pairs(tmp_path, minilm):
    pairs = load_pairs(QQP)[:300]
    encode = lambda texts: (minilm.encode(texts).dense, minilm.encode(texts).tokens)  # noqa: E731
    report = evaluate_pairs(pairs, encode, PARAMS)
    assert report["pairs"] == 300 and report["right_hits"] + report["wrong_hits"] > 0
    assert report["right_hits"] > 2 * report["wrong_hits"], report
    assert 0 <= report["wrong_hit_share"] < 0.34 and report["p99_lookup_ms"] > 0
    sample = tmp_path / "pairs.tsv"
    sample.write_text("text_a\ttext_b\tlabel\n" + "".join(f"{p.a}\t{p.b}\t{p.label}\n" for p in pairs[:40]))
    out = subprocess.run([sys.executable, "-m", "appliance", "eval", "cache", "--pairs", str(sample), "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={"APPLIANCE_MODELS_DIR": str(ROOT / "models"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    assert {"right_hits", "wrong_hits", "pairs", "wrong_hit_share", "p99_lookup_ms"} <= set(cli) and cli["pairs"] == 40
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\n")
    out = subprocess.run([sys.executable, "-m", "appliance", "eval", "cache", "--pairs", str(bad)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode != 0 and "header" in out.stderr


def test_eval_cache_on_afqmc_pairs_serves_no_chinese_question(minilm):
    pairs = load_pairs(AFQMC)[:300]
    encoded = {}

    def encode(texts):
        missing = [t for t in dict.fromkeys(texts) if t not in encoded]
        for i in range(0, len(missing), 64):
            batch = minilm.encode(missing[i:i + 64])
            encoded.update(zip(missing[i:i + 64], zip(batch.dense, batch.tokens, batch.unknown)))
        rows = [encoded[t] for t in texts]
        return np.stack([r[0] for r in rows]), [r[1] for r in rows], np.array([r[2] for r in rows])

    report = evaluate_pairs(pairs, encode, PARAMS)
    assert report["right_hits"] == report["wrong_hits"] == report["stored"] == 0 and report["refused"] == 300
    # an encoder reporting no coverage, and no Chinese check of terms behind it: what the guard alone keeps out
    similarity_only = replace(PARAMS, threshold_zh=PARAMS.threshold, max_term_difference_zh=1.0)
    blind = evaluate_pairs(pairs, lambda texts: encode(texts)[:2], similarity_only)
    assert blind["wrong_hits"] > 10 * blind["right_hits"], blind
