"""Generation: two co-located vLLM engines (small, large), the router between them, prompts and warm-up."""
from .engine import Delta, Engine, EngineDown
from .pool import EngineConfigError, EnginePool, Pick, detect_device, resolve_model
from .prompts import PROMPT_VERSION, TASKS, Passage, Prompt, build_prompt, warm_up_prompts
from .router import RouteDecision, Router, normalise_question

__all__ = ["Delta", "Engine", "EngineConfigError", "EngineDown", "EnginePool", "PROMPT_VERSION", "Passage", "Pick",
           "Prompt", "RouteDecision", "Router", "TASKS", "build_prompt", "detect_device", "normalise_question",
           "resolve_model", "warm_up_prompts"]
