"""Generation: the engine seam (`protocol.py`: `TextEngine` and the types it speaks in), the set of engines the
answer path picks from and restarts (`engine_set.py`), the vLLM engine (`vllm_engine.py`) and the configured engines
built as vLLM engines (`vllm_setup.py`), prompts and warm-up (the router between roles is `appliance.router`)."""
from .engine_set import EngineSet, Pick
from .prompts import (PROMPT_VERSION, REWRITE_PROMPT_VERSION, TASKS, Passage, Prompt, build_prompt, fit_tokens,
                      recent_history, rewrite_prompt, warm_up_prompts)
from .protocol import Delta, EngineDown, EngineLimits, EngineStatus, TextEngine
from .vllm_setup import EngineConfigError, build_vllm_engines

__all__ = ["Delta", "EngineConfigError", "EngineDown", "EngineLimits", "EngineSet", "EngineStatus", "PROMPT_VERSION",
           "Passage", "Pick", "Prompt", "REWRITE_PROMPT_VERSION", "TASKS", "TextEngine",
           "build_prompt", "build_vllm_engines", "fit_tokens", "recent_history", "rewrite_prompt", "warm_up_prompts"]
