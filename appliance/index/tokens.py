"""Token vectors for late interaction, as stored: int8 per token, or residuals against k-means centroids.

int8 (a code per dimension and a scale per token, 388 bytes at 384-d) is exact enough for MaxSim but costs 6.8 GiB
per 100k chunks. The residual codec is ColBERTv2's: a token is its nearest centroid (2 bytes) plus, per dimension,
which of 2^bits buckets its residual falls in (bits/8 bytes), 50 bytes at 1 bit and 384-d. A partition's centroids
are trained once, on the first build that has enough tokens; later tokens use them as they are (the token space of
one encoder does not drift with a partition's topic enough to matter, and re-training would re-code every shard).
A version's shards all use one codec: the build that trains the codebook re-codes every int8 shard it has.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

INT8, RESIDUAL = "int8", "residual"
CODECS = (INT8, RESIDUAL)
_BLOCK = 32_768  # tokens per matrix product while assigning centroids: bounds the (block, K) scores in memory


@dataclass(slots=True, frozen=True)
class TokenBlock:
    """Some rows' token vectors, stacked: float32 (tokens, dim), unit length, and how many belong to each row."""
    vectors: np.ndarray
    lengths: np.ndarray

    @classmethod
    def empty(cls, dim: int) -> "TokenBlock":
        return cls(np.zeros((0, dim), np.float32), np.zeros(0, np.int64))


@dataclass(slots=True, frozen=True)
class TokenCodes:
    """Some rows' token vectors as stored (stacked codes, `lengths` tokens per row) and how to decode them: a
    centroid id and packed residual per token (`codebook` set), or int8 codes and a scale per token."""
    first: np.ndarray
    second: np.ndarray
    lengths: np.ndarray
    codebook: "Codebook | None" = None

    def blocks(self, size: int) -> Iterator[tuple[slice, np.ndarray, np.ndarray | None]]:
        """(tokens, float32 vectors, their norms or None when already unit length), `size` tokens at a time.
        A block small enough to stay in the CPU's cache is decoded and used before the next one is made: the late
        stage decodes ~5.4k tokens (30 candidates at 100k chunks) per query, and decoding them all into one float32
        array, normalised in place, took ~20 % longer (5.34 against 4.43 ms p50 on a 2-core AVX2 box). The caller
        divides its dot products by the norms instead of every element of the vectors."""
        for start in range(0, len(self.first), size):
            part = slice(start, start + size)
            if self.codebook is None:
                yield part, dequantize(self.first[part], self.second[part]), None
            else:
                yield part, *self.codebook.decode_unscaled(self.first[part], self.second[part])

    def decoded(self) -> TokenBlock:
        """All of them decoded to unit float32 vectors at once (re-coding, benchmarks)."""
        if self.codebook is None:
            return TokenBlock(dequantize(self.first, self.second), self.lengths)
        return TokenBlock(self.codebook.decode(self.first, self.second), self.lengths)


class Codebook:
    """Centroids (K, dim) and, per dimension, the cut points between residual buckets and each bucket's value."""

    def __init__(self, centroids: np.ndarray, cutoffs: np.ndarray, values: np.ndarray):
        # kept at f16 precision, as saved: codes a build makes and codes made after a reload are the same
        self.centroids = np.ascontiguousarray(np.asarray(centroids, np.float16), np.float32)
        self.cutoffs = np.ascontiguousarray(cutoffs, np.float32)  # (dim, 2^bits - 1), ascending
        self.values = np.ascontiguousarray(values, np.float32)  # (dim, 2^bits)
        self.bits = int(np.log2(self.values.shape[1]))
        self.dim = int(self.centroids.shape[1])
        table = _byte_table(self.values, self.bits)
        self._table = table.reshape(-1, table.shape[2])  # row position * 256 + byte
        self._offsets = np.arange(table.shape[0], dtype=np.int64) * 256

    @property
    def code_bytes(self) -> int:
        return self.dim * self.bits // 8

    def encode(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Nearest centroid ids (uint16) and packed residual buckets (uint8, code_bytes per token)."""
        vectors = np.asarray(vectors, np.float32)
        ids = self.nearest(vectors)
        residual = vectors - self.centroids[ids]
        buckets = np.zeros(residual.shape, np.uint8)
        for cut in range(self.cutoffs.shape[1]):
            buckets += residual > self.cutoffs[:, cut]
        return ids.astype(np.uint16), _pack(buckets, self.bits)

    def decode(self, ids: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """Unit-length float32 vectors back from `encode`'s codes."""
        vectors, norms = self.decode_unscaled(ids, packed)
        vectors /= norms[:, None]
        return vectors

    def decode_unscaled(self, ids: np.ndarray, packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`encode`'s codes back to float32 vectors before normalisation (centroid + residual), and their norms."""
        packed = np.asarray(packed)
        # one lookup per stored byte (its 8 / bits dimensions at once), as a flat take: a 2-D fancy index is ~8x
        # slower, and this runs on the late stage's request path
        rows = (packed.astype(np.int64) + self._offsets).ravel()
        vectors = np.take(self._table, rows, axis=0).reshape(len(packed), self.dim)
        vectors += np.take(self.centroids, np.asarray(ids, np.int64), axis=0)
        return vectors, np.maximum(np.sqrt(np.einsum("ij,ij->i", vectors, vectors)), 1e-12)

    def nearest(self, vectors: np.ndarray) -> np.ndarray:
        return _nearest(vectors, self.centroids)

    def save(self, path: Path) -> None:
        """Beside the target, fsynced, renamed: a crash leaves all of it or none. The caller fsyncs the folder."""
        part = path.with_name(path.name + ".part")
        with open(part, "wb") as f:
            np.savez(f, centroids=self.centroids.astype(np.float16), cutoffs=self.cutoffs, values=self.values)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, path)

    @classmethod
    def load(cls, path: Path) -> "Codebook":
        with np.load(path) as saved:
            return cls(saved["centroids"].astype(np.float32), saved["cutoffs"], saved["values"])


def train_codebook(sample: np.ndarray, centroids: int, bits: int, iterations: int = 8, seed: int = 0) -> Codebook:
    """k-means on `sample` (unit token vectors), then per dimension the residuals' quantiles as bucket cut points
    and the mean residual of each bucket as its value (a bucket's value is what the decoder adds back)."""
    if bits not in (1, 2, 4, 8):
        raise ValueError("bits must be 1, 2, 4 or 8")
    sample = np.asarray(sample, np.float32)
    rng = np.random.default_rng(seed)
    centroids = max(1, min(centroids, len(sample), 65_536))  # ids are stored as uint16
    means = sample[rng.choice(len(sample), centroids, replace=False)].copy()
    for _ in range(iterations):
        ids = _nearest(sample, means)
        counts = np.bincount(ids, minlength=centroids)
        sums = np.zeros_like(means)
        np.add.at(sums, ids, sample)
        empty = counts == 0
        means[~empty] = sums[~empty] / counts[~empty, None]
        means[empty] = sample[rng.choice(len(sample), int(empty.sum()), replace=False)]  # re-seed lost centroids
    means = np.asarray(means, np.float16).astype(np.float32)  # as the codebook keeps them
    residual = sample - means[_nearest(sample, means)]
    levels = 2 ** bits
    cutoffs = np.quantile(residual, np.arange(1, levels) / levels, axis=0).T.astype(np.float32)  # (dim, levels-1)
    buckets = np.zeros(residual.shape, np.int64)
    for cut in range(levels - 1):
        buckets += residual > cutoffs[:, cut]
    values = np.zeros((sample.shape[1], levels), np.float32)
    for level in range(levels):
        chosen = buckets == level
        values[:, level] = (residual * chosen).sum(axis=0) / np.maximum(chosen.sum(axis=0), 1)
    return Codebook(means, cutoffs, values)


def quantize(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per vector: codes = round(v * 127 / max|v|), scale = max|v| / 127."""
    vectors = np.asarray(vectors, np.float32)
    peak = np.maximum(np.abs(vectors).max(axis=1), 1e-12)
    codes = np.round(vectors * (127.0 / peak)[:, None]).astype(np.int8)
    return codes, (peak / 127.0).astype(np.float32)


def dequantize(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    return np.asarray(codes).astype(np.float32) * np.asarray(scales, np.float32)[:, None]


def _nearest(vectors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of each vector's nearest centroid (squared distance, less the vectors' own norms)."""
    norms = (centroids ** 2).sum(axis=1)
    ids = np.zeros(len(vectors), np.int64)
    for start in range(0, len(vectors), _BLOCK):
        block = vectors[start:start + _BLOCK]
        ids[start:start + _BLOCK] = np.argmin(norms[None, :] - 2 * block @ centroids.T, axis=1)
    return ids


def _byte_table(values: np.ndarray, bits: int) -> np.ndarray:
    """(bytes per token, 256, dims per byte): what each possible byte at each position decodes to."""
    per_byte = 8 // bits
    every = np.arange(256, dtype=np.uint8)[:, None]
    shifts = (bits * np.arange(per_byte - 1, -1, -1)).astype(np.uint8)
    buckets = (every >> shifts) & np.uint8(2 ** bits - 1)  # (256, per_byte)
    dims = values.shape[0]
    table = np.zeros((dims // per_byte, 256, per_byte), np.float32)
    for position in range(dims // per_byte):
        columns = position * per_byte + np.arange(per_byte)
        table[position] = values[columns[None, :], buckets]
    return table


def _pack(buckets: np.ndarray, bits: int) -> np.ndarray:
    """(t, dim) values below 2^bits -> (t, dim * bits / 8) bytes, the first dimension in the high bits."""
    per_byte = 8 // bits
    grouped = buckets.reshape(len(buckets), -1, per_byte).astype(np.uint8)
    shifts = (bits * np.arange(per_byte - 1, -1, -1)).astype(np.uint8)
    return np.bitwise_or.reduce(grouped << shifts, axis=2).astype(np.uint8)


def _unpack(packed: np.ndarray, bits: int, dim: int) -> np.ndarray:
    if bits == 1:
        return np.unpackbits(packed, axis=1, count=dim)
    per_byte = 8 // bits
    shifts = (bits * np.arange(per_byte - 1, -1, -1)).astype(np.uint8)
    mask = np.uint8(2 ** bits - 1)
    return ((packed[:, :, None] >> shifts) & mask).reshape(len(packed), dim)
