"""Generation: the engine seam and its vLLM engines, prompts and warm-up (the router between roles is
`appliance.router`)."""
from .engines import Delta, EngineDown, EngineLimits, EngineSet, EngineStatus, Pick, TextEngine
from .prompts import (PROMPT_VERSION, REWRITE_PROMPT_VERSION, TASKS, Passage, Prompt, build_prompt, fit_tokens,
                      recent_history, rewrite_prompt, warm_up_prompts)
from .vllm_engines import EngineConfigError, build_vllm_engines

__all__ = ["Delta", "EngineConfigError", "EngineDown", "EngineLimits", "EngineSet", "EngineStatus", "PROMPT_VERSION",
           "Passage", "Pick", "Prompt", "REWRITE_PROMPT_VERSION", "TASKS", "TextEngine",
           "build_prompt", "build_vllm_engines", "fit_tokens", "recent_history", "rewrite_prompt", "warm_up_prompts"]
