"""A partition's index at one version: immutable, memory-mapped, safe to search from many threads.

Everything a search needs lives in the version folder, texts and document fields included, so a search sees one
consistent state (old or new) while an ingest builds the next version beside it.
Row i of every array belongs to chunk_ids[i]; USearch keys are chunk ids; bm25s document i is row i.
"""
from __future__ import annotations

import contextlib
import json
import mmap
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
from usearch.index import Index, ScalarKind

from .tokens import INT8, RESIDUAL, Codebook, TokenBlock, TokenCodes

RESCORE_FACTOR, RESCORE_MIN = 4, 40  # an int8 graph's candidates per wanted hit, and at least this many
CURRENT = "CURRENT"
# Bump on any change to the files below; a version of another format is rebuilt from the store. Format 3 is format
# 4 with int8 token vectors only: it is read as it is, and `appliance reindex --tokens` re-codes its vectors.
FORMAT = 4
READABLE = (3, 4)
# What every search reads at random, in the order a warm-up reads it (`PartitionSnapshot.files`)
_WALKED = ("hnsw.usearch", "bm25/indptr.csc.index.npy", "bm25/indices.csc.index.npy", "bm25/data.csc.index.npy",
           "chunk_ids.npy", "token_refs.npy")


class IndexFormatError(ValueError):
    """A version folder written by another format of this code."""


@dataclass(slots=True, frozen=True)
class ChunkInfo:
    chunk_id: int
    doc_key: str
    ordinal: int
    title: str
    source: str
    metadata: dict
    text: str
    file: str = ""  # the file the document was parsed from
    page: int | None = None
    page_end: int | None = None
    section: tuple[str, ...] = ()


class PartitionSnapshot:
    def __init__(self, folder: Path, expansion_search: int = 64):
        self.folder = Path(folder)
        self.manifest = json.loads((self.folder / "manifest.json").read_text())
        if self.manifest.get("format") not in READABLE:
            raise IndexFormatError(f"{self.folder}: index format {self.manifest.get('format')}, expected {FORMAT}")
        self.partition_id: int = self.manifest["partition_id"]
        self.store_version: int = self.manifest["store_version"]
        self.encoder: str = self.manifest["encoder"]
        self.language: str = self.manifest.get("language", "")  # the partition's when it was built ("": before)
        self.dim: int = self.manifest["dim"]
        self.chunk_ids = np.load(self.folder / "chunk_ids.npy", mmap_mode="r")
        self.doc_index = np.load(self.folder / "doc_index.npy", mmap_mode="r")
        self.ordinals = np.load(self.folder / "ordinals.npy", mmap_mode="r")
        self.text_offsets = np.load(self.folder / "text_offsets.npy", mmap_mode="r")
        self.dense = np.load(self.folder / "dense.npy", mmap_mode="r")
        self.docs: list[dict] = json.loads((self.folder / "docs.json").read_text(encoding="utf-8"))
        self.pages = np.load(self.folder / "pages.npy", mmap_mode="r")
        self.section_index = np.load(self.folder / "section_index.npy", mmap_mode="r")
        self.sections = [tuple(p) for p in json.loads((self.folder / "sections.json").read_text(encoding="utf-8"))]
        self._texts = _map(self.folder / "texts.bin")
        self.size = int(len(self.chunk_ids))
        self.hnsw: Index | None = None
        self.bm25: bm25s.BM25 | None = None
        if self.size:
            self.hnsw = Index.restore(str(self.folder / "hnsw.usearch"), view=True)
            self.hnsw.expansion_search = expansion_search
            if (self.folder / "bm25").is_dir():  # absent when no chunk has a single BM25 term
                self.bm25 = bm25s.BM25.load(str(self.folder / "bm25"), mmap=True)
        self._rescored = self.hnsw is not None and self.hnsw.dtype == ScalarKind.I8  # an int8 graph: see ann
        self.token_refs = None
        # shard -> its two arrays: int8 (codes, f32 scales) or residual (uint16 centroid ids, packed buckets)
        self.token_shards: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._token_maps: dict[int, tuple[_MappedArray, _MappedArray]] = {}
        self.token_codec: str = self.manifest.get("token_codec", INT8)
        self.codebook: Codebook | None = None
        if self.manifest.get("token_vectors"):
            self.token_refs = np.load(self.folder / "token_refs.npy", mmap_mode="r")
            tokens = self.folder.parent / "tokens"
            if self.token_codec == RESIDUAL:
                self.codebook = Codebook.load(tokens / self.manifest["token_codebook"])
            for shard in self.manifest["token_shards"]:
                maps = tuple(_MappedArray.open(path) for path in shard_files(tokens, shard, self.token_codec))
                self._token_maps[shard] = maps
                self.token_shards[shard] = (maps[0].array, maps[1].array)

    @property
    def has_token_vectors(self) -> bool:
        return self.token_refs is not None

    # -- search ------------------------------------------------------------------------------------------------

    def ann(self, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and cosine similarities of the k nearest chunks."""
        if self.hnsw is None:
            return _empty()
        wanted = max(k * RESCORE_FACTOR, RESCORE_MIN) if self._rescored else k
        found = self.hnsw.search(vector.astype(np.float32), min(wanted, self.size))
        keys = np.asarray(found.keys, dtype=np.int64)
        rows = np.searchsorted(self.chunk_ids, keys)
        if not self._rescored:
            return rows, 1.0 - np.asarray(found.distances, dtype=np.float32)
        # An int8 graph ranks close neighbours only roughly: its candidates are re-ranked by their exact cosine
        # from the version's f16 vectors (the rows read in file order; bench/results/vectors_scale.md).
        rows = np.sort(rows)
        similarity = np.asarray(self.dense[rows], np.float32) @ vector.astype(np.float32)
        best = np.argsort(-similarity, kind="stable")[:k]
        return rows[best], similarity[best]

    def bm25_search(self, terms: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and BM25 scores of the k best chunks that share at least one term with the query."""
        if self.bm25 is None:
            return _empty()
        ids = self.bm25.get_tokens_ids(terms)
        if not ids:
            return _empty()
        scores = self.bm25.get_scores_from_ids(ids)
        k = min(k, int(np.count_nonzero(scores)))
        if k == 0:
            return _empty()
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return top.astype(np.int64), scores[top].astype(np.float32)

    @property
    def token_count(self) -> int:
        """Token vectors the version's rows have (what a re-coding or a codebook's training would see)."""
        return int(np.asarray(self.token_refs)[:, 2].sum()) if self.token_refs is not None and self.size else 0

    def token_codes(self, rows) -> TokenCodes:
        """The rows' token vectors as stored, stacked, with what decodes them."""
        assert self.token_refs is not None
        firsts, seconds, lengths = [], [], []
        for shard, start, count in self._refs(rows):
            first, second = self.token_shards[shard]
            firsts.append(first[start:start + count])
            seconds.append(second[start:start + count])
            lengths.append(count)
        if not firsts:
            first, second = next(iter(self.token_shards.values()), (np.zeros((0, self.dim), np.int8),
                                                                    np.zeros(0, np.float32)))
            return TokenCodes(first[:0], second[:0], np.zeros(0, np.int64), self.codebook)
        return TokenCodes(np.concatenate(firsts), np.concatenate(seconds), np.asarray(lengths, np.int64),
                          self.codebook)

    def will_need_tokens(self, rows) -> None:
        """Ask the kernel to read the rows' token vectors in now, all at once. Rows not in the page cache (a boot's
        warm-up read only part of a big partition, or none) then arrive in one round of reads issued together
        instead of one page fault after another as the late stage reaches each row. About 3 us a row when its pages
        are cached already (30 rows: 83 us)."""
        if self.token_refs is None or not _ADVISE:
            return
        for shard, start, count in self._refs(rows):
            for mapped in self._token_maps[shard]:
                mapped.will_need(start, count)

    def _refs(self, rows) -> list[list[int]]:
        """The rows' (shard, start, count) as Python ints (one conversion, not three per row)."""
        return np.asarray(self.token_refs)[np.asarray(rows, np.int64)].reshape(-1, 3).tolist()

    def token_vectors(self, rows) -> TokenBlock:
        """The rows' token vectors, decoded to float32 (unit length)."""
        codes = self.token_codes(rows)
        return codes.decoded() if len(codes.lengths) else TokenBlock.empty(self.dim)

    # -- disk -------------------------------------------------------------------------------------------------

    def token_files(self) -> list[Path]:
        """The shared files under tokens/ this version reads: its shards and its codebook."""
        tokens = self.folder.parent / "tokens"
        files = [path for shard in self.manifest.get("token_shards", [])
                 for path in shard_files(tokens, shard, self.token_codec)]
        return files + ([tokens / self.manifest["token_codebook"]] if self.manifest.get("token_codebook") else [])

    def files(self) -> list[Path]:
        """Every file this version reads, in the order a boot's warm-up reads them when its budget may not cover
        them all: first what every search walks from page to dependent page (the graph, BM25's postings, the row
        arrays each hit is looked up in), whose faults cannot overlap; then the token vectors, whose cold rows the
        late stage asks for all at once (`will_need_tokens`); then the rest (what only the k hits read, and BM25's
        term statistics, which only the next build reads)."""
        walked = [self.folder / name for name in _WALKED + (("dense.npy",) if self._rescored else ())]
        walked = [f for f in walked if f.exists()]
        rest = sorted(f for f in self.folder.rglob("*") if f.is_file() and f not in walked)
        return walked + self.token_files() + rest

    def prefetch(self, budget_bytes: int) -> int:
        """Read this version's files into the page cache, up to `budget_bytes`; returns the bytes read. A search
        then takes no major page faults: a cold 100k-chunk partition's first queries otherwise paid ~7x the warm
        late stage. The mmaps see the cached pages; nothing is copied into the process."""
        done, buffer = 0, memoryview(bytearray(1 << 20))
        try:
            files = self.files()
        except FileNotFoundError:  # a newer version replaced this one meanwhile
            return 0
        for path in files:
            try:
                with open(path, "rb", buffering=0) as f:
                    while done < budget_bytes and (n := f.readinto(buffer[:budget_bytes - done])):
                        done += n
            except FileNotFoundError:  # a newer version replaced this one meanwhile
                break
            if done >= budget_bytes:
                break
        return done

    def disk_bytes(self) -> tuple[int, int]:
        """Bytes on disk of everything this version reads, and of its token vectors alone; (0, 0) once a newer
        version replaced it and its files went."""
        try:
            tokens = sum(path.stat().st_size for path in self.token_files())
            return sum(f.stat().st_size for f in self.folder.rglob("*") if f.is_file()) + tokens, tokens
        except FileNotFoundError:
            return 0, 0

    # -- fields ------------------------------------------------------------------------------------------------

    def text(self, row: int) -> str:
        start, end = int(self.text_offsets[row]), int(self.text_offsets[row + 1])
        return self._texts[start:end].decode("utf-8") if self._texts is not None else ""

    def section(self, row: int) -> tuple[str, ...]:
        slot = int(self.section_index[row])
        return self.sections[slot] if slot >= 0 else ()

    def chunk(self, row: int) -> ChunkInfo:
        doc = self.docs[int(self.doc_index[row])]
        page, page_end = (int(x) or None for x in self.pages[row])
        return ChunkInfo(
            chunk_id=int(self.chunk_ids[row]), doc_key=doc["key"], ordinal=int(self.ordinals[row]),
            title=doc["title"], source=doc["source"], metadata=doc["metadata"], text=self.text(row),
            file=doc.get("file", ""), page=page, page_end=page_end, section=self.section(row),
        )


def shard_files(tokens_dir: Path, shard: int, codec: str = INT8) -> tuple[Path, Path]:
    """A shard's two files: int8 codes and scales (q, s), or residual centroid ids and packed buckets (c, r)."""
    first, second = ("q", "s") if codec == INT8 else ("c", "r")
    return tokens_dir / f"{first}{shard:06d}.npy", tokens_dir / f"{second}{shard:06d}.npy"


def current_version(partition_dir: Path) -> Path | None:
    pointer = Path(partition_dir) / CURRENT
    if not pointer.exists():
        return None
    folder = Path(partition_dir) / pointer.read_text().strip()
    return folder if (folder / "manifest.json").exists() else None


@dataclass(slots=True, frozen=True)
class _MappedArray:
    """An .npy file's array over a read-only map of the whole file, kept to advise the kernel on rows' pages."""
    array: np.ndarray
    map: mmap.mmap
    offset: int  # where the array's data begins in the file

    @classmethod
    def open(cls, path: Path) -> "_MappedArray":
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(f)
            offset = f.tell()
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        array = np.ndarray(shape, dtype, buffer=mapped, offset=offset, order="F" if fortran else "C")
        return cls(array, mapped, offset)

    def will_need(self, start: int, count: int) -> None:
        """Start reading rows [start, start + count) into the page cache without waiting for them (advice only:
        a kernel that refuses it leaves the rows to be faulted in as before)."""
        if count > 0:
            stride = self.array.strides[0]
            begin = self.offset + start * stride
            aligned = begin - begin % mmap.PAGESIZE
            with contextlib.suppress(OSError, ValueError):  # ValueError: a range past the file's end
                self.map.madvise(mmap.MADV_WILLNEED, aligned, begin + count * stride - aligned)


_ADVISE = hasattr(mmap, "MADV_WILLNEED")


def _map(path: Path) -> mmap.mmap | None:
    if path.stat().st_size == 0:
        return None
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.float32)


def version_files(partition_dir: Path) -> tuple[str, list[Path]] | None:
    """The current version's name (what CURRENT holds) and what a copy of it needs (the version folder, its token
    shards and codebook), relative to `partition_dir`; None without a current version. Every file is immutable
    once published, so a backup may link them while the server builds the next version."""
    partition_dir = Path(partition_dir)
    folder = current_version(partition_dir)
    if folder is None:
        return None
    manifest = json.loads((folder / "manifest.json").read_text())
    tokens = partition_dir / "tokens"
    codec = manifest.get("token_codec", INT8)
    files = [path for shard in manifest.get("token_shards", []) for path in shard_files(tokens, shard, codec)]
    files += [tokens / manifest["token_codebook"]] if manifest.get("token_codebook") else []
    files += sorted(f for f in folder.rglob("*") if f.is_file())
    return folder.name, [f.relative_to(partition_dir) for f in files]
