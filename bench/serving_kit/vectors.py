"""The labelled pairs and their vectors: each distinct text encoded once per dataset and kept in bench/.cache."""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent.parent
CACHE = REPO / "bench" / ".cache"
DATA = REPO.parent / "shared" / "data"
DATASETS = {  # name -> (pairs file, encoder)
    "qqp_en": (DATA / "qqp_pairs_en" / "pairs.tsv", "minilm"),
    "afqmc_zh": (DATA / "afqmc_pairs_zh" / "pairs.tsv", "use"),
}


@dataclass
class Vectors:
    texts: list[str]
    dense: np.ndarray  # (n, dim) float32, L2-normalised
    tokens: list[np.ndarray] | None
    row: dict[str, int]
    encode_s: float | None  # None: read from bench/.cache

    def encode(self, texts: list[str]):
        """Drop-in for evaluate_pairs' `encode`: the stored vectors of these texts."""
        idx = [self.row[t] for t in texts]
        return self.dense[idx], (None if self.tokens is None else [self.tokens[i] for i in idx])


def load_dataset(name: str, models_dir: Path, log) -> tuple[list, Vectors, str]:
    from appliance.cache.evaluate import load_pairs

    path, encoder = DATASETS[name]
    pairs = load_pairs(path)
    texts = list(dict.fromkeys([p.a for p in pairs] + [p.b for p in pairs]))
    return pairs, _vectors(name, path, encoder, texts, models_dir, log), encoder


def _vectors(name: str, path: Path, encoder: str, texts: list[str], models_dir: Path, log) -> Vectors:
    from appliance.paths import model_folder

    folder = model_folder(models_dir, encoder)
    digest = hashlib.sha256(path.read_bytes())
    for f in sorted(folder.iterdir()):
        digest.update(f.name.encode() + str(f.stat().st_size).encode())
    file = CACHE / f"serving-vectors-{name}-{encoder}-{digest.hexdigest()[:12]}.npz"
    if file.exists():
        z = np.load(file)
        cached = json.loads(str(z["texts"]))
        if cached == texts:
            tokens = None
            if "tok" in z.files:
                tokens = np.split(z["tok"], z["offsets"][1:-1])
            log(f"{name}: {len(texts)} vectors ({encoder}) from {file.name}")
            return Vectors(texts, z["dense"], tokens, {t: i for i, t in enumerate(texts)}, None)
    from appliance.encode import load_encoder

    enc = load_encoder(encoder, folder)
    started = time.perf_counter()
    dense, tokens = [], []
    for i in range(0, len(texts), 64):
        out = enc.encode(texts[i:i + 64])
        dense.append(out.dense)
        tokens.extend(out.tokens or [])
    took = time.perf_counter() - started
    dense_all = np.vstack(dense).astype(np.float32)
    extra = {}
    if tokens:
        extra = {"tok": np.concatenate(tokens).astype(np.float16),
                 "offsets": np.cumsum([0] + [len(t) for t in tokens])}
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(file, dense=dense_all, texts=json.dumps(texts, ensure_ascii=False), **extra)
    log(f"{name}: encoded {len(texts)} texts with {encoder} in {took:.1f} s -> {file.name}")
    return Vectors(texts, dense_all, tokens or None, {t: i for i, t in enumerate(texts)}, round(took, 1))
