"""The peers at the scale step: built over the very chunks and vectors of the synthetic partition, timed search-only
with the query vectors ours was timed with. Quality is not judged there (the chunks are perturbed copies).

rank_bm25 scores every chunk in Python (~10 queries/s at 100k), so faiss+rank_bm25 is timed on a few queries
only. txtai gets a build deadline: it is measured if its index is built in time, else skipped with a note.
"""
from __future__ import annotations

import ctypes
import gc
import shutil
import time
from pathlib import Path

import numpy as np

from appliance.index import PartitionSnapshot

from .data import CACHE, Corpus
from .measure import folder_bytes, rss_bytes
from .peers import BuildTimeout, FaissRankBM25, TxtaiHybrid
from .searchonly import QueryVectors, measure_peer

SLOW_TXTAI_S = 300  # past this, the report says txtai's build was slow (it is still measured)
IVF_PQ_FROM = 500_000  # chunks: from here faiss's dense half is IVF-PQ (an exact flat index is not what one picks)


def corpus_from_snapshot(snapshot: PartitionSnapshot) -> Corpus:
    """Texts, titles, document keys and vectors of every row, as read_corpus does for the datasets."""
    keys, titles = [], []
    for row in range(snapshot.size):
        doc = snapshot.docs[int(snapshot.doc_index[row])]
        keys.append(doc["key"])
        titles.append(doc["title"])
    return Corpus(doc_keys=keys, titles=titles, texts=[snapshot.text(r) for r in range(snapshot.size)],
                  dense=np.asarray(snapshot.dense, dtype=np.float32))


def run(version_folder: Path, queries: QueryVectors, clients: int, max_requests: int, slow_queries: int,
        txtai_limit_s: float, log=print) -> dict:
    corpus = corpus_from_snapshot(PartitionSnapshot(version_folder))
    log(f"  peers at scale: {len(corpus.texts)} chunks read back from our partition")
    out: dict = {}
    for cls in (FaissRankBM25, TxtaiHybrid):
        slow = cls is FaissRankBM25
        rss_before = _trimmed_rss()
        log(f"  {cls.name}: building over {len(corpus.texts)} chunks"
            + (f" (stopped if still reading documents after {txtai_limit_s:.0f} s)" if not slow else ""))
        started = time.perf_counter()
        try:
            peer = (cls(corpus, None, ivf_pq=len(corpus.texts) >= IVF_PQ_FROM) if slow
                    else cls(corpus, None, deadline=started + txtai_limit_s))
        except BuildTimeout as exc:
            out[cls.name] = {"skipped": f"index build passed {txtai_limit_s:.0f} s ({exc})",
                             "build_s": round(time.perf_counter() - started, 1)}
            log(f"    skipped: {out[cls.name]['skipped']}")
            continue
        result = {"build_s": peer.build_s, "memory": {"rss_growth_build": _growth(rss_before, _trimmed_rss()),
                                                       **_disk(peer)}}
        if not slow and peer.build_s > SLOW_TXTAI_S:
            result["note"] = f"index build took {peer.build_s} s (over {SLOW_TXTAI_S} s)"
        if hasattr(peer, "index_type"):
            result["index_type"] = peer.index_type
        timed = queries.head(slow_queries) if slow else queries
        log(f"    built in {peer.build_s} s; timing {len(timed)} queries (search-only)")
        result["search_only"] = measure_peer(peer, timed, clients, max_requests, 2 * len(timed) if slow else None)
        result["timed_queries"] = len(timed)
        log(f"    {result}")
        out[cls.name] = result
        peer = None  # free this index before the next one is built
    return out


def _disk(peer) -> dict:
    """What the index takes on disk when saved the peer's own way (rank_bm25 has no on-disk format)."""
    if isinstance(peer, FaissRankBM25):
        import faiss
        return {"disk_bytes": int(faiss.serialize_index(peer.index).nbytes),
                "disk_note": "faiss index serialised; rank_bm25 lives in memory only"}
    folder = CACHE / "scale-txtai-saved"
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    peer.embeddings.save(str(folder))
    out = {"disk_bytes": folder_bytes(folder), "save_s": round(time.perf_counter() - started, 1),
           "disk_note": "embeddings.save(): content database, faiss index and BM25 terms"}
    shutil.rmtree(folder, ignore_errors=True)
    return out


def _trimmed_rss() -> dict[str, int]:
    """RSS once freed heap memory is handed back to the kernel, so growth means memory the index really holds."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the figure only gets noisier
        pass
    return rss_bytes()


def _growth(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in before}
