import json
import mmap
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from appliance.encode import load_encoder
from appliance.config import IndexSettings
from appliance.index import (NewChunks, PartitionSnapshot, build_version, collect_garbage, current_version,
                            quantize)
from appliance.paths import model_folder
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
    return load_encoder("minilm", model_folder(models_dir, "minilm"))


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
    codes, scales, lengths = _stored(reopened, [0, 2])
    assert codes.dtype == np.int8 and codes.shape == (lengths.sum(), 384) and scales.shape == (lengths.sum(),)
    expected = encoder.encode([TEXTS[1]]).tokens[0].astype(np.float32)
    first = codes[:lengths[0]].astype(np.float32) * scales[:lengths[0], None]
    assert np.abs(first - expected).max() < 2e-3  # int8 with a per-token scale is within quantisation error


def test_an_int8_graph_ranks_by_the_exact_cosine_of_its_candidates(tmp_path, encoder):
    added = chunks(encoder, [1, 2, 3, 4, 5])
    snap = build_version(tmp_path, 7, 1, encoder.name, encoder.dim, None, np.zeros(0, np.int64), added,
                         IndexSettings(dtype="i8"), BM25Tokenizer().many)
    assert snap.hnsw.dtype.name == "I8"
    query = encoder.encode(["does exercise lower blood pressure"]).dense[0]
    rows, sims = snap.ann(query, 3)
    exact = added.dense.astype(np.float16).astype(np.float32) @ query  # the version keeps f16 vectors
    assert list(rows) == list(np.argsort(-exact)[:3])  # the exact order, not the int8 graph's estimate
    assert np.allclose(sims, np.sort(exact)[::-1][:3], atol=1e-5)
    assert snap.chunk(int(rows[0])).doc_key == "d4"


def test_incremental_versions_add_and_remove(tmp_path, encoder):
    v1 = build(tmp_path, encoder, 1, None, [], chunks(encoder, [1, 2, 3]))
    v2 = build(tmp_path, encoder, 2, v1, [2], chunks(encoder, [4, 5]))
    assert list(v2.chunk_ids) == [1, 3, 4, 5]
    assert [v2.chunk(r).doc_key for r in range(4)] == ["d1", "d3", "d4", "d5"]
    rows, _ = v2.ann(encoder.encode(["vitamin D deficiency"]).dense[0], 4)
    assert "d2" not in {v2.chunk(int(r)).doc_key for r in rows}
    # token vectors of carried rows still belong to their own chunks
    again = encoder.encode([TEXTS[3]]).tokens[0].astype(np.float32)
    codes, scales, _ = _stored(v2, [1])
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
    codes, _, lengths = _stored(v2, [0, 1])
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
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # the token shard this build had already published is gone too: only v1's shards are left
    assert sorted(p.name for p in (tmp_path / "tokens").iterdir()) == ["q000001.npy", "s000001.npy"]
    assert list(PartitionSnapshot(current_version(tmp_path)).chunk_ids) == [1, 2]



def test_what_a_build_cut_short_left_is_collected(tmp_path, encoder):
    build(tmp_path, encoder, 1, None, [], chunks(encoder, [1, 2]))
    before = sorted(tmp_path.rglob("*"))
    # what kill -9 or a power cut in the middle of the next build leaves behind
    (tmp_path / ".tmp-v00000002-0badcafe").mkdir()
    (tmp_path / ".tmp-v00000002-0badcafe" / "dense.npy").write_bytes(b"\0" * 64)
    (tmp_path / "v00000002-0badcafe").mkdir()  # renamed into place, never made current
    (tmp_path / ".CURRENT.tmp").write_text("v00000002-0badcafe")
    (tmp_path / "tokens" / "q000002.npy").write_bytes(b"\0")  # a shard no version references
    (tmp_path / "tokens" / "s000002.part").write_bytes(b"\0")
    collect_garbage(tmp_path)  # what boot (PartitionIndexer.open) and every build run
    assert sorted(tmp_path.rglob("*")) == before

def test_token_shards_stay_few_under_pure_additions(tmp_path, encoder):
    """Each shard is an open file per mapped version: one-chunk versions must not add one each (issue 10, item 4),
    and merging them must not rewrite every row every time."""
    texts = [f"Note {i} on the maintenance of pump model {i}." for i in range(40)]
    enc = encoder.encode(texts)
    params = IndexSettings(max_token_shards=3)
    snap, written = None, 0
    for i in range(40):
        added = NewChunks(np.asarray([i + 1]), np.zeros(1, np.int32), [texts[i]],
                          [{"key": f"d{i}", "title": "", "source": "", "metadata": {}}], enc.dense[i:i + 1],
                          [enc.tokens[i]])
        snap = build_version(tmp_path, 7, i + 1, encoder.name, encoder.dim, snap, np.zeros(0, np.int64), added,
                             params, BM25Tokenizer().many)
        shards = json.loads((snap.folder / "manifest.json").read_text())["token_shards"]
        assert len(shards) <= 3 and len(list((tmp_path / "tokens").glob("*.npy"))) == 2 * len(shards)
        written += len(snap.token_shards[shards[-1]][1])  # every version writes one shard: its newest
    total = sum(len(t) for t in enc.tokens)
    assert written < 6 * total  # a rewrite of every row each time would be ~20x
    codes, scales, lengths = _stored(snap, range(40))
    expected_codes, expected_scales = quantize(np.concatenate(enc.tokens))
    assert list(lengths) == [len(t) for t in enc.tokens]
    assert np.array_equal(codes, expected_codes) and np.array_equal(scales, expected_scales)


def test_token_shards_are_durable_before_the_version_that_uses_them(tmp_path, encoder, monkeypatch):
    """Power loss must not leave CURRENT on a version whose shards are missing or zero-filled (issue 10, item 10):
    each shard is fsynced before its rename, and tokens/ after it, all before CURRENT moves."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append(("rename", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    build(tmp_path, encoder, 1, None, [], chunks(encoder, [1, 2]))
    tokens = tmp_path.resolve() / "tokens"
    current = events.index(("rename", str(tmp_path.resolve() / "CURRENT")))
    for name in ("q000001", "s000001"):
        renamed = events.index(("rename", str(tokens / f"{name}.npy")))
        assert events.index(("fsync", str(tokens / f"{name}.part"))) < renamed
        assert renamed < events.index(("fsync", str(tokens)), renamed) < current


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


def test_prefetch_reads_every_file_of_the_version_within_its_budget(tmp_path, encoder):
    snap = build(tmp_path, encoder, 1, None, [], chunks(encoder, [1, 2, 3]))
    files = snap.files()
    # what every search walks page by page first, then the token vectors, then the rest
    walked = [snap.folder / name for name in ("hnsw.usearch", "bm25/indptr.csc.index.npy",
                                              "bm25/indices.csc.index.npy", "bm25/data.csc.index.npy",
                                              "chunk_ids.npy", "token_refs.npy")]
    token_files = snap.token_files()
    assert len(token_files) == 2 and files[:len(walked) + 2] == walked + token_files
    rest = set(files[len(walked) + 2:])  # what only hits read, and BM25's statistics for the next build
    assert {snap.folder / "texts.bin", snap.folder / "docs.json", snap.folder / "bm25" / "term_ids.npy"} <= rest
    total, tokens = snap.disk_bytes()
    assert total == sum(f.stat().st_size for f in files) and tokens == sum(f.stat().st_size for f in token_files)
    assert len(set(files)) == len(files)
    assert snap.prefetch(10**12) == total  # all of it when the budget allows
    assert snap.prefetch(1000) == 1000  # and never past the budget
    assert snap.prefetch(0) == 0


def test_will_need_tokens_reads_the_asked_rows_into_the_page_cache_and_nothing_else(tmp_path, encoder):
    if shutil.which("fincore") is None:
        pytest.skip("fincore (util-linux) is not installed")
    ids = list(range(1, 201))
    texts = [TEXTS[1 + i % 5] for i in ids]
    enc = encoder.encode(texts)
    docs = [{"key": f"d{i}", "title": "", "source": "", "metadata": {}} for i in ids]
    snap = build(tmp_path, encoder, 1, None, [], NewChunks(np.asarray(ids, np.int64), np.zeros(200, np.int32),
                                                          texts, docs, enc.dense, enc.tokens))
    codes = snap.token_files()[0]  # int8 codes, 384 bytes a token: ~230 pages
    size, page = codes.stat().st_size, mmap.PAGESIZE
    _advise(codes, os.POSIX_FADV_DONTNEED)
    if _resident(codes) > size // 2:
        pytest.skip("this filesystem keeps files in memory (tmpfs): nothing to read in")
    _advise(codes, os.POSIX_FADV_WILLNEED)  # the control: does this filesystem read ahead on advice at all?
    if not _wait_resident(codes, 1):
        pytest.skip("this filesystem ignores read-ahead advice")
    _advise(codes, os.POSIX_FADV_DONTNEED)

    shard, start, count = (int(x) for x in snap.token_refs[150])
    stored = snap.token_shards[shard][0]
    stride, offset = stored.strides[0], size - stored.nbytes  # the array runs to the file's end
    pages = (offset + (start + count) * stride - 1) // page - (offset + start * stride) // page + 1
    snap.will_need_tokens([150])
    _wait_resident(codes, pages * page)
    # the row's pages, read without touching them (a filesystem block bigger than a page may bring a few more)
    assert pages * page <= _resident(codes) <= (pages + 16) * page < size // 4
    assert np.array_equal(snap.token_codes([150]).first, stored[start:start + count])


def _advise(path, advice: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, advice)
    finally:
        os.close(fd)


def _wait_resident(path, at_least: int) -> bool:
    deadline = time.monotonic() + 5
    while _resident(path) < at_least:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _resident(path) -> int:
    """Bytes of the file in the page cache."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def test_a_versions_bm25_from_the_previous_statistics_scores_as_a_full_build(tmp_path, encoder):
    v1 = build(tmp_path / "a", encoder, 1, None, [], chunks(encoder, [1, 2, 3]))
    v2 = build(tmp_path / "a", encoder, 2, v1, [2], chunks(encoder, [4, 5]))  # statistics of 1, 3 + new 4, 5
    full = build_version(tmp_path / "b", 7, 2, encoder.name, encoder.dim, None, np.zeros(0, np.int64),
                         _rows_of(v2, encoder), IndexSettings(bm25_incremental=False), BM25Tokenizer().many)
    assert (v2.folder / "bm25" / "terms.json").exists()
    for question in ("heart disease", "blood pressure exercise", "powerhouse of the cell", "vitamin"):
        terms = BM25Tokenizer()(question)
        got, want = v2.bm25_search(terms, 5), full.bm25_search(terms, 5)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), question
    assert v2.bm25_search(BM25Tokenizer()("vitamin deficiency"), 5)[0].size == 0  # chunk 2's terms went with it


def test_a_changed_title_of_a_kept_document_rebuilds_its_bm25_text(tmp_path, encoder):
    v1 = build(tmp_path, encoder, 1, None, [], chunks(encoder, [1, 2]))
    renamed = chunks(encoder, [3])
    renamed.docs[0] = {**renamed.docs[0], "key": "d1", "title": "Cardiology bulletin"}  # d1's new fields win
    v2 = build(tmp_path, encoder, 2, v1, [], renamed)
    rows, _ = v2.bm25_search(BM25Tokenizer()("cardiology bulletin"), 5)
    assert sorted(int(v2.chunk_ids[r]) for r in rows) == [1, 3]  # the kept chunk 1 is found by its new title


def _rows_of(snapshot, encoder) -> NewChunks:
    texts = [snapshot.text(r) for r in range(snapshot.size)]
    enc = encoder.encode(texts)
    docs = [snapshot.docs[int(snapshot.doc_index[r])] for r in range(snapshot.size)]
    return NewChunks(np.asarray(snapshot.chunk_ids, np.int64), np.zeros(snapshot.size, np.int32), texts, docs,
                     enc.dense, enc.tokens)


def _stored(snapshot: PartitionSnapshot, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    codes = snapshot.token_codes(rows)
    return codes.first, codes.second, codes.lengths
