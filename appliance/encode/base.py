"""What every encoder returns, and the interface the rest of the product relies on."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from .onnx_graphs import GraphChoice


@dataclass(slots=True)
class Encoded:
    dense: np.ndarray  # (n, dim) float32, L2-normalised
    tokens: list[np.ndarray] | None  # per text (tokens, dim) float16, L2-normalised; None if the model has none
    # Per text, the share of its word pieces the encoder could not represent ([UNK]); None: all of it. Texts made
    # mostly of unknown pieces get near-identical vectors, so a similarity between them means nothing.
    unknown: np.ndarray | None = None


class Encoder(Protocol):
    name: str
    dim: int
    has_token_vectors: bool
    graphs: GraphChoice | None  # ONNX encoders: the graph queries and passages run on (measured at load)

    def encode(self, texts: list[str]) -> Encoded:
        """Encode a batch (called from worker threads, a query and a bulk one at once: must be thread-safe and
        release the GIL in its heavy part)."""
        ...


def l2_normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, 1e-12)
