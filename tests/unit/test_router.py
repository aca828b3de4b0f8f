"""The small/large model router: trained (router.training), deciding (router.decision) and evaluated
(evaluate.router) on the labelled questions with the real MiniLM encoder. Its question features: test_question.py."""
from __future__ import annotations

import numpy as np
import pytest

from appliance.encode import Encoded, load_encoder
from appliance.evaluate.router import cross_validate, evaluate_router
from appliance.paths import model_folder
from appliance.router import Router, build_router, encode_questions, load_questions, train_router
from appliance.text import normalise_question
from support import DATA

QUESTIONS = DATA / "router_questions" / "questions.jsonl"


@pytest.fixture(scope="module")
def encoder(models_dir):
    return load_encoder("minilm", model_folder(models_dir, "minilm"), threads=1, max_length=256)


@pytest.fixture(scope="module")
def data(encoder):
    """texts, labels, categories and the embeddings of the normalised texts (encoded once: ~15 s on one core)."""
    texts, labels, categories = load_questions(QUESTIONS)
    return texts, labels, categories, encode_questions(encoder, texts)


@pytest.fixture(scope="module")
def router(data) -> Router:
    texts, labels, _, emb = data
    return Router(train_router(texts, labels, emb, "minilm"))


def embed(encoder, text: str) -> np.ndarray:
    return encoder.encode([normalise_question(text)]).dense[0]


def test_data_artifacts_do_not_change_the_decision(encoder, router):
    pairs = [("What is the capital of France?", "what is the capital of france"),
             ("Who plays Young Voldemort in The Half-Blood Prince?",
              "who plays young voldemort in the half blood prince"),
             ("Which park is larger, Doñana National Park or Timanfaya National Park?",
              "which park is larger doñana national park or timanfaya national park")]
    decided = []
    for a, b in pairs:
        da, db = router.decide(a, embed(encoder, a)), router.decide(b, embed(encoder, b))
        assert (da.engine, da.reason, da.p_large) == (db.engine, db.reason, db.p_large)
        decided.append(da.engine)
    assert decided == ["small", "small", "large"]


def test_cross_validated_routing_meets_the_targets(data):
    texts, labels, categories, emb = data
    cv = cross_validate(texts, labels, emb, "minilm", folds=5, categories=categories)
    # Measured: simple_to_small 0.955, complex_to_large 0.94, small_share_80_20 0.776 (l2 100 / 0.3).
    assert cv["simple_to_small"] >= 0.9 and cv["complex_to_large"] >= 0.9, cv
    assert cv["small_share_80_20"] >= 0.7
    per = cv["per_category"]
    assert per["code_generation"] == 1.0 and per["math_word_problem"] >= 0.95
    assert per["multihop_bridge"] >= 0.8 and per["multihop_comparison"] >= 0.8  # the hard ones: 0.84, 0.92


def test_bias_moves_the_small_share_monotonically(data, router):
    texts, labels, _, emb = data
    biases = [-4.0, -2.0, -1.0, 0.0, 1.0, 2.0, 4.0]
    shares = [evaluate_router(router, texts, labels, emb, bias=b)["small_share_80_20"] for b in biases]
    assert all(a >= b for a, b in zip(shares, shares[1:])), shares
    assert shares[0] > shares[3] > shares[-1]


def test_rules_and_reasons(encoder, router):
    simple = "who wrote the novel moby dick"
    code = "def add(a: int, b: int) -> int:\n    \"\"\"Return the sum of a and b.\n    >>> add(1, 2)\n    3\n    \"\"\""
    e = embed(encoder, simple)
    d = router.decide(simple, e)
    assert d.engine == "small" and d.reason.startswith("classifier p_large=") and 0.0 <= d.p_large < 0.5
    longer = router.decide(simple, e, max_words_small=3)
    assert (longer.engine, longer.reason, longer.p_large) == ("large", "longer than 3 words", d.p_large)
    assert router.decide(simple, e, context_tokens=50_000).reason.startswith("context 50000 tokens")
    assert router.decide(code, embed(encoder, code)).reason == "code cue"
    # Short maths and code requests: the classifier's data has none (GSM8K is long, HumanEval is code), rules do.
    for text, reason in [("Write a Python function that reverses a linked list.", "code cue"),
                         ("Solve 3x + 5 = 20 for x.", "maths cue"), ("What is 15% of 240?", "maths cue")]:
        assert router.decide(text, embed(encoder, text)).reason == reason, text
    assert "bias -1" in router.decide(simple, e, bias=-1.0).reason


def test_save_load_round_trip_and_build(tmp_path, data, router, encoder):
    texts, labels, _, emb = data
    cache = {normalise_question(t): v for t, v in zip(texts, emb)}

    class CachedEncoder:  # the real encoder's vectors for these questions, without encoding them again
        name, dim = encoder.name, encoder.dim

        def encode(self, batch: list[str]) -> Encoded:
            return Encoded(np.stack([cache[t] for t in batch]), None)

    path = build_router(tmp_path / "router", QUESTIONS, CachedEncoder())
    assert path.name == "router.npz" and [p.name for p in path.parent.iterdir()] == ["router.npz"]
    loaded = Router.load(path, embedder="minilm")
    assert (loaded.embedder, loaded.dim) == ("minilm", 384)
    for t, v in zip(texts, emb):
        a, b = router.decide(t, v, bias=0.3), loaded.decide(t, v, bias=0.3)
        assert (a.engine, a.reason, a.p_large) == (b.engine, b.reason, b.p_large)


def test_embedder_mismatch_is_refused(tmp_path, router):
    router.weights.save(tmp_path / "router.npz")
    with pytest.raises(ValueError, match="trained for embedder 'minilm'"):
        Router.load(tmp_path / "router.npz", embedder="use")
    use_vector = np.ones(512, np.float32) / np.sqrt(512)  # the USE encoder's dense size
    with pytest.raises(ValueError, match="384-d.*512-d"):
        router.decide("who wrote hamlet", use_vector)


def test_a_router_file_from_another_version_is_refused(tmp_path, router):
    path = tmp_path / "router.npz"
    router.weights.save(path)
    with np.load(path) as z:
        fields = dict(z)
    np.savez(path, **(fields | {"format": np.array(2)}))
    with pytest.raises(ValueError, match="another version"):
        Router.load(path)


def test_decision_time_over_the_dataset(data, router):
    """A property of the algorithm (a dot product, a few regexes and set look-ups), so each question's time is its
    best of 5 calls: on a shared 2-core box 1-3% of single calls are pre-empted for ~4 ms, whatever the code does
    (measured: p50 0.07 ms, p95 0.2 ms). The bound is loose on purpose; speed belongs in the benchmarks."""
    texts, labels, _, emb = data
    best = np.full(len(texts), np.inf)
    for _ in range(5):
        for i, (t, e) in enumerate(zip(texts, emb)):
            best[i] = min(best[i], router.decide(t, e).decision_ms)
    assert np.percentile(best, 99) < 5.0
    assert evaluate_router(router, texts, labels, emb)["p99_decision_ms"] > 0
