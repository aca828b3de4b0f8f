"""Parts of bench/generation.py: prompts, the naive transformers server, the vLLM runs, tiny models, the report."""
