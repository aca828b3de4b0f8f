"""The sections of the search path: encoders, the index, chunking, parsing files, retrieval."""
from __future__ import annotations

from dataclasses import dataclass

from .rules import setting


@dataclass(slots=True, frozen=True)
class EncoderSettings:
    """The encoder is a partition's: its language (`auto`: decided from its first documents) picks one of these.
    MiniLM ("minilm": English, token vectors for late interaction) maps most Chinese to [UNK]; the multilingual
    USE ("use": dense only) represents both (CMRC nDCG@10 0.716 with MiniLM for everything, 0.985 with the Chinese
    partition on USE; bench/results/languages.md)."""
    en: str = setting("minilm", choices=("minilm", "use"), why="English partitions")
    zh: str = setting("use", choices=("minilm", "use"), why="Chinese partitions")
    multi: str = setting(
        "use", choices=("minilm", "use"),
        why="partitions holding both languages (or text with no letters to tell by)")
    model: str = setting(
        "", choices=("", "minilm", "use"),
        why="set: this one encoder for every partition, whatever its language (the old single-encoder box)")
    threads: int = setting(2, above=0, why="threads each encoder's ONNX session computes with")
    graph: str = setting(
        "auto", choices=("auto", "int8", "fp32"),
        why="MiniLM's ONNX graph: \"auto\" times int8 and fp32 at load and runs queries and passages each on the "
            "faster (int8 is not faster on every CPU; bench/results/query_encoding.md); \"int8\" or \"fp32\" pins one.")
    batch_window_ms: float = setting(5.0, minimum=0, why="how long a query waits for others to share its encoder batch")
    max_batch: int = setting(32, above=0, why="queries encoded in one batch")
    queue_size: int = setting(1024, above=0, why="queries waiting for a batch; past it a query waits for room")
    max_length: int = setting(256, above=0, why="word pieces an encoder reads of a text; longer texts are truncated")
    ingest_batch: int = setting(32, above=0, why="chunks encoded in one batch at ingest")

    def for_language(self, language: str) -> str:
        """The encoder of a partition (or a question) in `language` ("en", "zh" or "multi")."""
        return self.model or {"en": self.en, "zh": self.zh}.get(language, self.multi)

    def names(self) -> tuple[str, ...]:
        """Every encoder a box with these settings loads, English's first."""
        return tuple(dict.fromkeys(self.for_language(language) for language in ("en", "zh", "multi")))


@dataclass(slots=True, frozen=True)
class IndexSettings:
    dtype: str = setting("f16", choices=("f16", "f32", "bf16", "i8"), why="how the HNSW index stores vectors")
    metric: str = setting("cos", choices=("cos", "ip", "l2sq"), why="the HNSW index's distance")
    connectivity: int = setting(16, above=0, why="HNSW neighbours per node (more: better recall, larger index)")
    expansion_add: int = setting(128, above=0, why="HNSW candidates looked at while adding a vector")
    expansion_search: int = setting(64, above=0, why="HNSW candidates looked at while searching")
    max_token_shards: int = setting(
        8, above=0,
        why="token-vector shards per version; each holds 2 open files while mapped")
    token_codec: str = setting(
        "residual", choices=("residual", "int8"),
        why="How token vectors are stored (appliance/index/tokens.py): \"residual\" (a centroid + `token_bits` per "
            "dimension, ~7x smaller than int8 at 1 bit, centroids trained per partition once it holds "
            "`codebook_min_tokens`) or \"int8\". A partition already coded as residuals stays so.")
    token_bits: int = setting(1, choices=(1, 2, 4, 8), why="bits per dimension of a residual-coded token vector")
    codebook_centroids: int = setting(
        1024, above=0, maximum=65_536, notes={65_536: "a token's centroid is stored in 2 bytes"},
        why="4096 ranked SciFact the same (bench/results/token_vectors.md), at 4x the cost")
    codebook_min_tokens: int = setting(
        131_072, above=0,
        why="~700 chunks of English; below it a partition keeps int8 (<= 50 MB). A codebook trained on a "
            "trickle-filled partition's first 50,000 tokens ranked SciFact 0.722, on its first 100,000 0.730 (int8: "
            "0.732).")
    codebook_sample: int = setting(
        131_072, above=0,
        why="tokens the k-means trains on (its cost: sample x centroids x dim per pass)")
    bm25_incremental: bool = setting(
        True,
        why="A version's BM25 from the previous version's term statistics plus the new rows (only they are "
            "tokenized); off: every version tokenizes every text of the partition again (what it did before).")
    warm_max_mib: int = setting(
        8192, minimum=0, notes={0: "no index files read at warm-up"},
        why="Warm-up reads the partitions' index files into the page cache, at most this much (and at most half the "
            "memory available at boot), so the first queries after a boot take no major page faults. 0: off.")
    reindex_per_tenant: int = setting(
        4, above=0,
        why="Re-indexes asked over HTTP wait in a queue, tenants taking turns: a tenant may have this many queued "
            "or running, and the box this many queued (one runs at a time).")
    reindex_queued: int = setting(64, above=0, why="and the box this many queued (see reindex_per_tenant)")


@dataclass(slots=True, frozen=True)
class ChunkSettings:
    max_words: int = setting(180, above=0, why="a chunk of text with spaces between words, in words")
    overlap_words: int = setting(30, minimum=0, why="words a chunk repeats of the one before it")
    max_chars_cjk: int = setting(300, above=0, why="a chunk of Chinese (or Japanese) text, in characters")
    overlap_chars_cjk: int = setting(50, minimum=0, why="characters such a chunk repeats of the one before it")
    max_chars: int = setting(
        2000, above=0,
        why="Any chunk, in characters: a run without spaces is one \"word\". ~2,000 characters of English is about "
            "what MiniLM's 256 word pieces see; a chunk is tokenised whole each time a prompt uses it.")


@dataclass(slots=True, frozen=True)
class ParseSettings:
    """Files (PDF, Office, HTML, Markdown, text) are parsed in worker processes bounded in time and memory, so a
    hostile file cannot hang or crash the server; what an Office file may unpack to is bounded (zip bombs)."""
    workers: int = setting(2, above=0, why="worker processes parsing files at once")
    timeout_s: float = setting(60.0, above=0, why="one file; the worker is killed and replaced past it")
    max_memory_mib: int = setting(
        2048, minimum=0, notes={0: "unlimited"},
        why="a worker's address space (RLIMIT_AS); 0 = unlimited")
    max_file_bytes: int = setting(64 * 1024 * 1024, above=0, why="one file, as uploaded")
    max_upload_bytes: int = setting(256 * 1024 * 1024, above=0, why="one POST /v1/files body, all its files together")
    max_files_per_request: int = setting(100, above=0, why="files in one POST /v1/files body")
    spool_max_bytes: int = setting(
        4 * 1024 * 1024 * 1024, above=0,
        why="uploads in progress, on disk (data_dir/spool), box-wide: 503")
    spool_tenant_share: float = setting(0.5, above=0, maximum=1, why="of spool_max_bytes, per tenant: 429")
    max_unpacked_bytes: int = setting(
        512 * 1024 * 1024, above=0,
        why="what an Office file's parts add up to once unpacked")
    max_parts: int = setting(10_000, above=0, why="parts in an Office file")
    max_pages: int = setting(5_000, above=0, why="pages (or slides) of one file")
    ocr_model: str = setting(
        "ppocr-v4",
        why='the built model (models_dir/build/<name>) that reads PDF pages without a text layer (scans); "" reads '
            "none (such a file is refused: no_text_layer)")
    max_ocr_pages: int = setting(
        10, above=0,
        why="pages of one file read by OCR (a file with more is refused: too_large); each takes seconds of one core "
            "(bench/results/ocr.md) within timeout_s: raise both for longer scans")


MAX_FUSION_WEIGHT = 10.0  # the most a list's weight in RRF may be, in the settings or a partition's own


@dataclass(slots=True, frozen=True)
class RetrieveSettings:
    default_k: int = setting(10, above=0, why="results of a search that does not say how many")
    max_k: int = setting(100, above=0, why="the most results a search may ask for")
    rrf_k: int = setting(60, above=0, why="RRF's k: a list's item at rank r adds weight / (rrf_k + r)")
    dense_weight: float = setting(
        0.5, minimum=0, maximum=MAX_FUSION_WEIGHT,
        why="Weight of the vector list in RRF (BM25's is 1). Measured with k=10: SciFact/MiniLM is flat (hybrid "
            "0.709 at 1.0, 0.711 at 0.5); CMRC/USE gains (0.936 -> 0.952), where the weaker vectors otherwise drag "
            "BM25 down.")
    dense_weight_zh: float = setting(
        0.01, minimum=0, maximum=MAX_FUSION_WEIGHT,
        why="The same for Chinese partitions, whose questions are mostly extractive: BM25 over jieba words alone "
            "scored CMRC nDCG@10 0.982, hybrid at 0.5 0.951; at 0.01 the vectors only fill in below BM25's list, "
            "and with the characters' late interaction every weight from 0.05 up scored lower "
            "(bench/results/languages.md). Chosen on the questions it is reported on: paraphrased Chinese questions "
            "may want more.")
    other_language_weight: float = setting(
        0.2, minimum=0, maximum=MAX_FUSION_WEIGHT,
        why="A search over partitions of several languages fuses each language's list by rank; the lists of "
            "partitions in another language than the question's get this weight (1 = equal), so its own language's "
            "documents come first and the others follow them.")
    overfetch: int = setting(10, above=0, why="each list fetches k times this before fusion")
    late_interaction: bool = setting(
        True,
        why="Measured on SciFact (bench/results/retrieval.md): MaxSim re-ranking of the best 30 fused candidates "
            "lifts nDCG@10 from 0.711 to 0.731; re-ranking 100 gained less (0.736 vs 0.743 at 30) for 3x the time.")
    late_candidates: int = setting(30, above=0, why="fused candidates re-ranked by MaxSim (see late_interaction)")
    late_weight_zh: float = setting(
        0.3, minimum=0, maximum=1, notes={0: "off", 1: "MaxSim order alone"},
        why="Chinese partitions (an encoder without token vectors): the best 30 re-ranked by RRF over their fused "
            "rank and their character MaxSim rank (encode/chars.py), MaxSim's weight this (0 = off). Chosen on the "
            "even CMRC questions (of 0.1, 0.2, 0.3, 0.5, 1): on the odd ones nDCG@10 0.9823 -> 0.9852, ~4 ms a "
            "question (bench/results/languages.md).")
    search_threads: int = setting(4, above=0, why="threads searching the indexes, off the event loop")
