"""Token vectors stored as residuals against a partition's k-means centroids (appliance/index/tokens.py)."""
import json

import numpy as np
import pytest

from appliance.config import IndexSettings
from appliance.encode import load_encoder
from appliance.index import (Codebook, NewChunks, PartitionSnapshot, build_version, collect_garbage, current_version,
                             needs_recoding, train_codebook)
from appliance.index.tokens import _pack, _unpack
from appliance.paths import model_folder
from appliance.text import BM25Tokenizer

WORDS = ("pump valve seal bearing motor shaft coolant filter gasket rotor sensor relay fuse breaker cable "
         "inverter battery charger panel meter").split()


@pytest.fixture(scope="module")
def encoder(models_dir):
    return load_encoder("minilm", model_folder(models_dir, "minilm"))


@pytest.fixture(scope="module")
def encoded(encoder):
    texts = [f"Report {i}: the {WORDS[i % 20]} of unit {i} was replaced after the {WORDS[(i * 7) % 20]} failed "
             f"during the {WORDS[(i * 3) % 20]} test." for i in range(60)]
    return texts, encoder.encode(texts)


def small(**overrides) -> IndexSettings:
    """A codebook a test can afford: few centroids, trained as soon as a partition holds 300 token vectors."""
    return IndexSettings(**({"codebook_centroids": 32, "codebook_min_tokens": 300, "codebook_sample": 4096}
                            | overrides))


def chunks(texts, enc, ids) -> NewChunks:
    rows = [i - 1 for i in ids]
    return NewChunks(np.asarray(ids, np.int64), np.zeros(len(ids), np.int32), [texts[r] for r in rows],
                     [{"key": f"d{i}", "title": "", "source": "", "metadata": {}} for i in ids],
                     enc.dense[rows], [enc.tokens[r] for r in rows])


def build(folder, encoder, version, previous, added, params, removed=()):
    return build_version(folder, 7, version, encoder.name, encoder.dim, previous, np.asarray(removed, np.int64),
                         added, params, BM25Tokenizer().many)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_buckets_pack_and_unpack_exactly(bits):
    buckets = np.random.default_rng(bits).integers(0, 2 ** bits, size=(7, 384), dtype=np.uint8)
    packed = _pack(buckets, bits)
    assert packed.shape == (7, 384 * bits // 8) and packed.dtype == np.uint8
    assert np.array_equal(_unpack(packed, bits, 384), buckets)


def test_residual_codes_keep_the_token_vectors_close(encoded):
    _, enc = encoded
    vectors = np.concatenate(enc.tokens).astype(np.float32)
    previous = 0.0
    for bits in (1, 2):
        book = train_codebook(vectors, 32, bits)
        ids, packed = book.encode(vectors)
        assert ids.dtype == np.uint16 and packed.shape == (len(vectors), 384 * bits // 8)
        decoded = book.decode(ids, packed)
        reference = book.centroids[ids.astype(np.int64)] + book.values[np.arange(384), _unpack(packed, bits, 384)]
        assert np.allclose(decoded, reference / np.linalg.norm(reference, axis=1, keepdims=True), atol=1e-6)
        similarity = cosines(decoded, vectors)
        assert similarity.min() > 0.5 and similarity.mean() > previous  # more bits, closer
        previous = similarity.mean()
        centroid_only = cosines(book.centroids[ids.astype(np.int64)], vectors).mean()
        assert similarity.mean() > centroid_only + 0.02  # the residual bits carry what the centroid misses
    assert previous > 0.9


def test_a_codebook_survives_a_save_and_load(tmp_path, encoded):
    vectors = np.concatenate(encoded[1].tokens).astype(np.float32)
    book = train_codebook(vectors, 16, 2)
    book.save(tmp_path / "book.npz")
    again = Codebook.load(tmp_path / "book.npz")
    ids, packed = book.encode(vectors[:50])
    assert all(np.array_equal(a, b) for a, b in zip(again.encode(vectors[:50]), (ids, packed)))
    assert np.array_equal(again.decode(ids, packed), book.decode(ids, packed))
    with pytest.raises(ValueError, match="bits"):
        train_codebook(vectors, 16, 3)


def test_a_partition_switches_to_residuals_once_it_has_enough_tokens(tmp_path, encoder, encoded):
    texts, enc = encoded
    params = small()
    v1 = build(tmp_path, encoder, 1, None, chunks(texts, enc, range(1, 11)), params)
    assert v1.token_codec == "int8" and v1.token_count < 300  # below the threshold: int8, as before
    v2 = build(tmp_path, encoder, 2, v1, chunks(texts, enc, range(11, 41)), params, removed=[3])
    assert v2.token_codec == "residual" and v2.token_count >= 300
    tokens = tmp_path / "tokens"
    assert sorted(p.name[0] for p in tokens.glob("*.npy")) == ["c", "r"]  # the int8 shard was re-coded and went
    assert len(list(tokens.glob("codebook-*.npz"))) == 1
    manifest = json.loads((v2.folder / "manifest.json").read_text())
    assert manifest["token_codec"] == "residual" and manifest["token_codebook"].startswith("codebook-")
    kept = [i for i in range(1, 41) if i != 3]
    assert list(v2.chunk_ids) == kept
    block = v2.token_vectors(range(len(kept)))
    want = np.concatenate([enc.tokens[i - 1] for i in kept]).astype(np.float32)
    assert list(block.lengths) == [len(enc.tokens[i - 1]) for i in kept]
    assert cosines(block.vectors, want).mean() > 0.85  # re-coded old rows and new rows alike
    # later builds code with the same codebook, and a reopened version reads the same vectors
    v3 = build(tmp_path, encoder, 3, v2, chunks(texts, enc, [41, 42]), params)
    assert v3.manifest["token_codebook"] == manifest["token_codebook"]
    assert len(list(tokens.glob("codebook-*.npz"))) == 1
    reopened = PartitionSnapshot(current_version(tmp_path))
    assert np.array_equal(reopened.token_vectors([0, 40]).vectors, v3.token_vectors([0, 40]).vectors)
    residual = reopened.token_shards[reopened.manifest["token_shards"][0]]
    assert residual[0].dtype == np.uint16 and residual[1].shape[1] == 48  # 2 + 48 bytes a token at 1 bit, 384-d


def test_the_re_coding_build_removes_the_int8_shard_while_the_open_int8_version_still_reads_it(tmp_path, encoder,
                                                                                              encoded):
    texts, enc = encoded
    v1 = build(tmp_path, encoder, 1, None, chunks(texts, enc, range(1, 11)), small())
    codes_before = np.array(v1.token_codes([0, 9]).first)
    v2 = build(tmp_path, encoder, 2, v1, chunks(texts, enc, range(11, 41)), small())  # crosses: re-coded
    tokens = tmp_path / "tokens"
    names = sorted(p.name for p in tokens.iterdir())
    assert [n[0] for n in names] == ["c", "c", "r"] and names[1].startswith("codebook-")  # int8 files went
    assert np.array_equal(v1.token_codes([0, 9]).first, codes_before)  # a search on v1 still reads them (mapped)
    collect_garbage(tmp_path, keep=v2)
    assert sorted(p.name for p in tokens.iterdir()) == names  # what the current version uses stays
    assert v2.token_codec == "residual"


def test_a_big_int8_partition_is_not_re_coded_by_an_ordinary_build(tmp_path, encoder, encoded):
    texts, enc = encoded
    v1 = build(tmp_path, encoder, 1, None, chunks(texts, enc, range(1, 41)), small(token_codec="int8"))
    v2 = build(tmp_path, encoder, 2, v1, chunks(texts, enc, [41]), small())  # past the threshold already
    assert v2.token_codec == "int8" and needs_recoding(v2, small())  # re-coding a big partition waits to be asked
    v3 = build_version(tmp_path, 7, 3, encoder.name, encoder.dim, v2, np.zeros(0, np.int64),
                       chunks(texts, enc, [42]), small(), BM25Tokenizer().many, recode=True)
    assert v3.token_codec == "residual" and not needs_recoding(v3, small()) and v3.size == 42


def test_int8_stays_when_the_settings_say_so(tmp_path, encoder, encoded):
    texts, enc = encoded
    snap = build(tmp_path, encoder, 1, None, chunks(texts, enc, range(1, 41)), small(token_codec="int8"))
    assert snap.token_codec == "int8" and snap.codebook is None and snap.token_count >= 300
    assert not list((tmp_path / "tokens").glob("codebook-*"))


def test_a_residual_partition_ranks_as_its_int8_copy(tmp_path, encoder, encoded):
    """MaxSim over decoded residuals picks the same passage as over int8 for questions about one report."""
    texts, enc = encoded
    residual = build(tmp_path / "r", encoder, 1, None, chunks(texts, enc, range(1, 61)), small(token_bits=2))
    exact = build(tmp_path / "i", encoder, 1, None, chunks(texts, enc, range(1, 61)), small(token_codec="int8"))
    from appliance.retrieve import maxsim
    agree = 0
    for i in range(0, 60, 6):
        question = encoder.encode([f"What was replaced in unit {i} after the {WORDS[(i * 7) % 20]} failed?"])
        q = question.tokens[0].astype(np.float32)
        scores = [maxsim(q, snap.token_vectors(range(60))) for snap in (residual, exact)]
        agree += int(np.argmax(scores[0]) == np.argmax(scores[1]))
        assert np.corrcoef(scores[0], scores[1])[0, 1] > 0.9
    assert agree >= 8
