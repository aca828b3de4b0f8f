"""The check's vocabulary: labels and the frozen results handed to the answer path."""
from __future__ import annotations

from dataclasses import dataclass

SUPPORTED, PARTLY, UNSUPPORTED, NOT_CHECKED = "supported", "partly", "unsupported", "not_checked"
LABELS = (SUPPORTED, PARTLY, UNSUPPORTED, NOT_CHECKED)


@dataclass(slots=True, frozen=True)
class SentenceGrounding:
    text: str  # the answer sentence, citations stripped
    label: str  # supported | partly | unsupported
    passages: tuple[int, ...]  # 1-based numbers of the passages that support it, best first
    score: float  # 0..1: how much of its content terms the best passage covers

    def to_json(self) -> dict:
        return {"text": self.text, "label": self.label, "passages": list(self.passages), "score": self.score}


@dataclass(slots=True, frozen=True)
class Grounding:
    label: str  # the answer's: supported | partly | unsupported | not_checked
    passages: tuple[int, ...]  # passages supporting any sentence, in order of first use
    sentences: tuple[SentenceGrounding, ...]

    def to_json(self) -> dict:
        return {"label": self.label, "passages": list(self.passages),
                "sentences": [s.to_json() for s in self.sentences]}


@dataclass(slots=True, frozen=True)
class ExtractiveAnswer:
    text: str  # the chosen passage sentences, each followed by its [n]; "" when nothing matched
    passages: tuple[int, ...]  # the passages quoted, in order of use
