"""The answer path: a question in, typed events out (`answer.py`: route -> prompt -> stream over an `EngineSet`,
`Sources`, `Token`, `Done` or `Failed`); what becomes of an answer once complete (`checks.py`: citations validated,
the grounding check, the unsupported-answer policy, the answers made without an engine); the exact and semantic
caches and single flight around it (`cached.py`); the standalone-question stage in front of it for follow-ups
(`standalone.py`). It sits above the stages it drives (retrieve, generate, grounding, cache) and beside the
library, which it never imports.
"""
from .answer import (Answerer, AskRequest, Done, Event, Failed, Route, Source, Sources, Token, Usage, answer_citations,
                     citation, cited_sources)
from .cached import CachedAnswerer
from .checks import grounding_from_json, grounding_json
from .standalone import FollowUpAnswers, StandaloneQuestions

__all__ = ["Answerer", "AskRequest", "CachedAnswerer", "Done", "Event", "Failed", "FollowUpAnswers", "Route",
           "Source", "Sources", "StandaloneQuestions", "Token", "Usage", "answer_citations", "citation",
           "cited_sources", "grounding_from_json", "grounding_json"]
