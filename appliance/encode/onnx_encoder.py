"""all-MiniLM-L6-v2 (int8 ONNX) through ONNX Runtime, with its WordPiece tokenizer from `tokenizers`.

Dense vector: mean-pool of the last hidden states over real tokens, L2-normalised (the sentence-transformers
recipe). Token vectors: the normalised hidden states of content tokens (no [CLS]/[SEP]/padding/punctuation),
kept in f16 for the late-interaction stage.
"""
from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from .base import Encoded, l2_normalise


class OnnxEncoder:
    has_token_vectors = True

    def __init__(self, model_dir: Path, threads: int = 2, max_length: int = 256):
        model_dir = Path(model_dir)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle ORT threads otherwise spin for a while after each run, taking the cores that the search threads
        # (BM25, HNSW, MaxSim) need right after the query is encoded.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(
            str(model_dir / "model.onnx"), sess_options=options, providers=_providers()
        )
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        vocab = self._tokenizer.get_vocab()
        self._skip = np.zeros(len(vocab) + 1, dtype=bool)
        for token, idx in vocab.items():
            if token.startswith("[") and token.endswith("]") or _is_punctuation(token):
                self._skip[idx] = True
        meta = model_dir / "encoder.json"
        info = json.loads(meta.read_text()) if meta.exists() else {}
        self.name = info.get("name", "minilm")
        self.dim = int(self._session.get_outputs()[0].shape[-1] or 384)

    def encode(self, texts: list[str]) -> Encoded:
        if not texts:
            return Encoded(np.zeros((0, self.dim), np.float32), [])
        batch = self._tokenizer.encode_batch(texts)
        ids = np.asarray([e.ids for e in batch], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in batch], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
        weights = mask[..., None].astype(np.float32)
        dense = l2_normalise((hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0))
        states = l2_normalise(hidden)
        keep = (mask == 1) & ~self._skip[ids]
        tokens = []
        for row in range(len(texts)):
            picked = states[row][keep[row]]
            if len(picked) == 0:  # a text of only punctuation still needs one vector
                picked = dense[row:row + 1]
            tokens.append(picked.astype(np.float16))
        return Encoded(dense.astype(np.float32), tokens)


def _providers() -> list[str]:
    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def _is_punctuation(token: str) -> bool:
    token = token.removeprefix("##")
    return bool(token) and all(unicodedata.category(c).startswith("P") or unicodedata.category(c).startswith("S")
                                for c in token)
