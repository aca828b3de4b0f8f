"""The model router: whether a question goes to the small or the large LLM.

Everything that is the router lives here: the question features it computes (`features.py`: four hand features,
the code and maths cues), its weights file (`weights.py`: models/build/router-*/router.npz), the decision
(`decision.py`: rules, then a logistic regression over [query embedding, features]) and its training at model-build
time (`training.py`). It imports only `text`, so the model build (`models`), the answer path (`generate`'s callers,
`answers`, `wiring`) and the evaluation (`evaluate.router`) all import it from below. It knows no encoder: callers
pass the embedding of `text.normalise_question(question)` (training: an encoder with `name` and `encode`).
"""
from .decision import RouteDecision, Router
from .features import FEATURES, QuestionFeatures, question_features
from .training import (DEFAULT_L2, DEFAULT_L2_FEATURES, build_router, encode_questions, load_questions,
                       train_router)
from .weights import RouterWeights

__all__ = ["DEFAULT_L2", "DEFAULT_L2_FEATURES", "FEATURES", "QuestionFeatures", "RouteDecision", "Router",
           "RouterWeights", "build_router", "encode_questions", "load_questions", "question_features", "train_router"]
