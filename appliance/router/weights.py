"""The router's model file: logistic weights over [question embedding, hand features].

Written by the training at model-build time (`training.py`) and read by the runtime router (`decision.py`). The
format and the file's place (models/build/router-*/router.npz) are what a built installation holds.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .features import FEATURES

FORMAT = 1


@dataclass(slots=True, frozen=True)
class RouterWeights:
    embedder: str  # the encoder whose dense vectors the weights expect
    w_emb: np.ndarray  # (dim,)
    w_feat: np.ndarray  # (len(FEATURES),), over standardised features
    intercept: float
    feat_mean: np.ndarray  # the standardisation learned on the training questions
    feat_std: np.ndarray
    meta: dict = field(default_factory=dict)  # how it was trained (penalties, counts)

    @property
    def dim(self) -> int:
        return int(self.w_emb.shape[0])

    def save(self, path: Path) -> None:
        """Atomic: a reader sees the old file or the new one, never half of one."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, format=FORMAT, embedder=np.array(self.embedder), dim=self.dim,
                     w_emb=np.asarray(self.w_emb, dtype=np.float32), w_feat=self.w_feat, intercept=self.intercept,
                     feat_mean=self.feat_mean, feat_std=self.feat_std, features=np.array(FEATURES),
                     meta=np.array(json.dumps(self.meta)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path, embedder: str | None = None) -> RouterWeights:
        """With `embedder`, refuse weights trained for another one."""
        with np.load(Path(path), allow_pickle=False) as z:
            if int(z["format"]) != FORMAT or tuple(z["features"].tolist()) != FEATURES:
                raise ValueError(f"{path}: router file from another version: rebuild it (`appliance models build`)")
            if z["w_emb"].shape != (int(z["dim"]),) or z["w_feat"].shape != (len(FEATURES),):
                raise ValueError(f"{path}: corrupt router file")
            weights = cls(str(z["embedder"]), z["w_emb"], z["w_feat"], float(z["intercept"]), z["feat_mean"],
                          z["feat_std"], json.loads(str(z["meta"])))
        if embedder is not None and embedder != weights.embedder:
            raise ValueError(f"{path}: router trained for embedder {weights.embedder!r} ({weights.dim}-d), "
                             f"not {embedder!r}: rebuild it for this embedder")
        return weights
