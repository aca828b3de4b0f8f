import json
import os

import numpy as np
import pytest

from appliance.encode import load_encoder
from appliance.config import IndexSettings
from appliance.index import NewChunks, PartitionSnapshot, build_version, current_version
from appliance.models import model_path
from appliance.text import BM25Tokenizer

TEXTS = {
    1: "Aspirin reduces the risk of heart attack in adults.",
    2: "Vitamin D deficiency is common in northern countries.",
    3: "The mitochondria is the powerhouse of the cell.",
    4: "Regular exercise lowers blood pressure.",
    5: "Smoking causes lung cancer and heart disease.",
}


@pytest.fixture(scope="module")
def encoder(models_dir):
    return load_encoder("minilm", model_path(models_dir, "minilm"))


def chunks(encoder, ids):
    texts = [TEXTS[i] for i in ids]
    enc = encoder.encode(texts)
    docs = [{"key": f"d{i}", "title": "", "source": "", "metadata": {"n": i}} for i in ids]
    return NewChunks(np.asarray(ids, np.int64), np.zeros(len(ids), np.int32), texts, docs, enc.dense, enc.tokens)


def build(folder, encoder, version, previous, removed, added):
    return build_version(folder, 7, version, encoder.name, encoder.dim, previous, np.asarray(removed, np.int64),
                         added, IndexSettings(), BM25Tokenizer().many)


def test_build_search_and_reopen(tmp_path, encoder):
    snap = build(tmp_path, encoder, 1, None, [], chunks(encoder, [1, 2, 3]))
    assert snap.size == 3 and snap.has_token_vectors and snap.store_version == 1
    rows, sims = snap.ann(encoder.encode(["vitamin D"]).dense[0], 2)
    assert snap.chunk(int(rows[0])).doc_key == "d2" and sims[0] > sims[1]
    rows, scores = snap.bm25_search(BM25Tokenizer()("powerhouse cell"), 5)
    assert [snap.chunk(int(r)).doc_key for r in rows] == ["d3"]  # only chunks sharing a term come back
    assert snap.bm25_search(["zzzunknown"], 5)[0].size == 0
    info = snap.chunk(0)
    assert info.text == TEXTS[1] and info.metadata == {"n": 1}
    reopened = PartitionSnapshot(current_version(tmp_path))
    assert list(reopened.chunk_ids) == [1, 2, 3] and reopened.text(2) == TEXTS[3]
    codes, scales, lengths = reopened.token_vectors([0, 2])
    assert codes.dtype == np.int8 and codes.shape == (lengths.sum(), 384) and scales.shape == (lengths.sum(),)
    expected = encoder.encode([TEXTS[1]]).tokens[0].astype(np.float32)
    first = codes[:lengths[0]].astype(np.float32) * scales[:lengths[0], None]
    assert np.abs(first - expected).max() < 2e-3  # int8 with a per-token scale is within quantisation error


def test_incremental_versions_add_and_remove(tmp_path, encoder):
    v1 = build(tmp_path, encoder, 1, None, [], chunks(encoder, [1, 2, 3]))
    v2 = build(tmp_path, encoder, 2, v1, [2], chunks(encoder, [4, 5]))
    assert list(v2.chunk_ids) == [1, 3, 4, 5]
    assert [v2.chunk(r).doc_key for r in range(4)] == ["d1", "d3", "d4", "d5"]
    rows, _ = v2.ann(encoder.encode(["vitamin D deficiency"]).dense[0], 4)
    assert "d2" not in {v2.chunk(int(r)).doc_key for r in rows}
    # token vectors of carried rows still belong to their own chunks
    again = encoder.encode([TEXTS[3]]).tokens[0].astype(np.float32)
    codes, scales, _ = v2.token_vectors([1])
    assert np.abs(codes.astype(np.float32) * scales[:, None] - again).max() < 2e-3
    # the old version stays readable while open (searches in flight), but is no longer current
    assert v1.text(1) == TEXTS[2]
    assert current_version(tmp_path) == v2.folder and not v1.folder.exists()


def test_token_shards_are_compacted_when_mostly_dead(tmp_path, encoder):
    v1 = build(tmp_path, encoder, 1, None, [], chunks(encoder, [1, 2, 3, 4]))
    v2 = build(tmp_path, encoder, 2, v1, [1, 2, 3], chunks(encoder, [5]))
    manifest = json.loads((v2.folder / "manifest.json").read_text())
    assert len(manifest["token_shards"]) == 1  # 1 live of 4 rows: rewritten into a single new shard
    assert sorted(p.name[0] for p in (tmp_path / "tokens").glob("*.npy")) == ["q", "s"]
    codes, _, lengths = v2.token_vectors([0, 1])
    assert len(lengths) == 2 and codes.shape[0] == lengths.sum() > 0


def test_a_failed_build_leaves_the_current_version_intact(tmp_path, encoder, monkeypatch):
    v1 = build(tmp_path, encoder, 1, None, [], chunks(encoder, [1, 2]))
    import appliance.index.builder as builder

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(builder, "_point_current", crash)  # an injected fault at the very last step
    with pytest.raises(OSError):
        build(tmp_path, encoder, 2, v1, [], chunks(encoder, [3]))
    assert current_version(tmp_path) == v1.folder
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []
    assert list(PartitionSnapshot(current_version(tmp_path)).chunk_ids) == [1, 2]


def test_chunk_ids_must_be_new(tmp_path, encoder):
    v1 = build(tmp_path, encoder, 1, None, [], chunks(encoder, [1, 2]))
    with pytest.raises(ValueError, match="unique"):
        build(tmp_path, encoder, 2, v1, [], chunks(encoder, [2]))
    assert current_version(tmp_path) == v1.folder


def test_empty_partition_version(tmp_path, encoder):
    snap = build(tmp_path, encoder, 3, None, [], NewChunks.empty(encoder.dim, True))
    assert snap.size == 0 and snap.ann(np.ones(384, np.float32), 3)[0].size == 0
    assert snap.bm25_search(["cell"], 3)[0].size == 0
    assert os.path.exists(snap.folder / "manifest.json")
