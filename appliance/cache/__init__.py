"""Answer caches: exact (normalised question), embedding (question -> vectors), semantic (similar question,
second-checked), and single flight for concurrent identical misses."""
from .admin import CacheAdmin, CacheCounts
from .embedding import EmbeddingCache
from .exact import ExactCache
from .keys import answer_key
from .semantic import Lookup, SemanticCache, SemanticHit, SemanticParams
from .singleflight import SingleFlight
from .verify import late_score, near_miss

__all__ = ["CacheAdmin", "CacheCounts", "EmbeddingCache", "ExactCache", "Lookup", "SemanticCache", "SemanticHit", "SemanticParams",
           "SingleFlight", "answer_key", "late_score", "near_miss"]
