"""all-MiniLM-L6-v2 (int8 ONNX) through ONNX Runtime, with its WordPiece tokenizer from `tokenizers`.

Dense vector: mean-pool of the last hidden states over real tokens, L2-normalised (the sentence-transformers
recipe). Token vectors: the normalised hidden states of content tokens (no [CLS]/[SEP]/padding/punctuation),
kept in f16 for the late-interaction stage. Queries and passages each run on the graph measured fastest for them
at load (int8 or fp32; see onnx_graphs).
"""
from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from .base import Encoded, l2_normalise
from .onnx_graphs import QUERY_TOKENS, GraphChoice, choose_graphs, graph_paths


class OnnxEncoder:
    has_token_vectors = True

    def __init__(self, model_dir: Path, threads: int = 2, max_length: int = 256, graph: str = "auto"):
        model_dir = Path(model_dir)
        self._sessions = {name: _session(path, threads) for name, path in graph_paths(model_dir, graph).items()}
        self._inputs = {name: {i.name for i in s.get_inputs()} for name, s in self._sessions.items()}
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer.no_padding()  # padded per group of similar lengths in `encode`
        vocab = self._tokenizer.get_vocab()
        self._skip = np.zeros(len(vocab) + 1, dtype=bool)
        self._special = np.zeros(len(vocab) + 1, dtype=bool)  # [CLS], [SEP]...: not part of the text
        for token, idx in vocab.items():
            special = token.startswith("[") and token.endswith("]") and token != "[UNK]"
            self._special[idx] = special
            self._skip[idx] = special or token == "[UNK]" or _is_punctuation(token)
        self._unk = vocab.get("[UNK]", -1)
        self.name = "minilm"
        self.dim = int(next(iter(self._sessions.values())).get_outputs()[0].shape[-1] or 384)
        self.graphs: GraphChoice = choose_graphs(list(self._sessions), self._dense_on)
        for unused in set(self._sessions) - set(self.graphs.graphs()):
            del self._sessions[unused]  # its memory back; the choice is made once per load

    def encode(self, texts: list[str]) -> Encoded:
        """Encode in groups of similar token length: a batch pads to its longest text, and on a CPU the padding
        costs as much as real tokens (measured: 128 queries one by one 1.94 s, in batches of 16 2.34 s, in
        batches of 16 sorted by length 1.60 s)."""
        dense = np.zeros((len(texts), self.dim), np.float32)
        tokens: list[np.ndarray] = [None] * len(texts)  # type: ignore[list-item]
        encodings = self._tokenizer.encode_batch(texts)
        for group in _length_groups([len(e.ids) for e in encodings]):
            self._run([encodings[i] for i in group], group, dense, tokens)
        return Encoded(dense, tokens, np.array([self._unknown_share(e.ids) for e in encodings], np.float32))

    def _dense_on(self, graph: str, texts: list[str]) -> np.ndarray:
        """Dense vectors of `texts` from one graph, whatever their lengths (to measure and compare graphs)."""
        encodings = self._tokenizer.encode_batch(texts)
        dense = np.zeros((len(texts), self.dim), np.float32)
        self._run(encodings, list(range(len(texts))), dense, [None] * len(texts), graph)
        return dense

    def _unknown_share(self, ids: list[int]) -> float:
        """Share of the text's word pieces that are [UNK]: WordPiece falls back to characters for unknown words,
        so [UNK] means a character outside the vocabulary (most Chinese, for this English model)."""
        pieces = np.asarray(ids, np.int64)
        pieces = pieces[~self._special[pieces]]
        return float((pieces == self._unk).mean()) if len(pieces) else 0.0

    def _run(self, encodings, rows: list[int], dense: np.ndarray, tokens: list, graph: str | None = None) -> None:
        width = max(len(e.ids) for e in encodings)
        graph = graph or (self.graphs.query if width <= QUERY_TOKENS else self.graphs.passage)
        ids = np.zeros((len(encodings), width), np.int64)
        mask = np.zeros((len(encodings), width), np.int64)
        for i, e in enumerate(encodings):
            ids[i, :len(e.ids)] = e.ids
            mask[i, :len(e.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        inputs = self._inputs[graph]
        hidden = self._sessions[graph].run(None, {k: v for k, v in feed.items() if k in inputs})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = l2_normalise((hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0))
        states = l2_normalise(hidden)
        keep = (mask == 1) & ~self._skip[ids]
        for i, row in enumerate(rows):
            dense[row] = pooled[i]
            picked = states[i][keep[i]]
            tokens[row] = (picked if len(picked) else pooled[i:i + 1]).astype(np.float16)  # punctuation-only text


def _length_groups(lengths: list[int], max_group: int = 64, slack: float = 1.25) -> list[list[int]]:
    """Indices grouped so that within a group the longest is at most `slack` x the shortest (+ 4 tokens)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups: list[list[int]] = []
    for i in order:
        if groups and len(groups[-1]) < max_group and lengths[i] <= lengths[groups[-1][0]] * slack + 4:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # The pool's threads spin between the operators of a run (a query is ~100 short operators: waking a sleeping
    # thread for each cost ~1 ms of a 4 ms query and ~3 ms of its p99), and stop when the run returns: spinning
    # on after it would take the cores that the search threads (BM25, HNSW, MaxSim) need next
    # (bench/results/query_encoding.md: thread pool).
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(str(path), sess_options=options, providers=_providers())


def _providers() -> list[str]:
    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def _is_punctuation(token: str) -> bool:
    token = token.removeprefix("##")
    return bool(token) and all(unicodedata.category(c).startswith("P") or unicodedata.category(c).startswith("S")
                                for c in token)
