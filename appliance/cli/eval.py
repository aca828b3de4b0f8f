"""`appliance eval ...`: retrieval quality on a BEIR folder, router decisions, semantic cache hits on pairs."""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from ..config import MAX_FUSION_WEIGHT, Settings


def add_eval_commands(commands) -> None:
    evaluate = commands.add_parser("eval", help="measure quality").add_subparsers(dest="what", required=True)
    retrieval = evaluate.add_parser("retrieval", help="nDCG@10, recall@100, MRR@10, latency on a BEIR folder")
    retrieval.add_argument("--data", required=True, type=Path)
    retrieval.add_argument("--split", default="test")
    retrieval.add_argument("--mode", choices=["hybrid", "bm25", "dense"], default="hybrid")
    retrieval.add_argument("--late-interaction", choices=["on", "off", "config"], default="config")
    retrieval.add_argument("--dense-weights", type=_weights, default=(), metavar="W,W,...",
                           help="also score with the partition given each of these weights of its own (0 to 10): "
                           "what to set a partition's dense_weight to")
    retrieval.add_argument("--json", action="store_true")
    retrieval.set_defaults(run=_eval_retrieval)
    router = evaluate.add_parser("router", help="share of simple questions routed small, complex routed large")
    router.add_argument("--questions", required=True, type=Path, help="JSONL with text and difficulty per line")
    router.add_argument("--json", action="store_true")
    router.set_defaults(run=_eval_router)
    conversations = evaluate.add_parser("conversations", help="retrieval per turn (first turns and follow-ups) with "
                                        "the standalone-question stage; --rewrites: F1 against human rewrites")
    conversations.add_argument("--data", type=Path, help="folder: corpus.jsonl, conversations.jsonl, qrels/test.tsv")
    conversations.add_argument("--rewrites", type=Path, help="JSONL of {history, raw, rewrite} (CAsT, CANARD)")
    conversations.add_argument("--mode", choices=["raw", "history", "expand", "rewrite", "auto"], default="auto",
                               help="auto (default): what the settings make the server do")
    conversations.add_argument("--limit", type=int, help="only the first N rewrite pairs")
    conversations.add_argument("--json", action="store_true")
    conversations.set_defaults(run=_eval_conversations)
    answers = evaluate.add_parser("answers", help="answer a question set (SQuAD 2.0, CMRC 2018) or every turn of a "
                                  "conversation set (doc2dial) through the real engines: F1 and exact match against "
                                  "gold answers, abstention, citation accuracy, grounding labels, loops, throughput")
    answers.add_argument("--data", required=True, type=Path,
                         help="folder: corpus.jsonl, qrels/test.tsv and answers.jsonl + queries.jsonl (questions) "
                         "or conversations.jsonl")
    answers.add_argument("--history", choices=["on", "off"], default="on", help="recent turns in the prompt")
    answers.add_argument("--limit", type=int, help="N questions (conversations), sampled evenly over the file")
    answers.add_argument("--max-tokens", type=int, help="answer length (default: the product's)")
    answers.add_argument("--concurrency", type=int, default=8, help="questions asked at once (default 8)")
    answers.add_argument("--json", action="store_true")
    answers.set_defaults(run=_eval_answers)
    cache = evaluate.add_parser("cache", help="semantic cache right/wrong hits on labelled question pairs")
    cache.add_argument("--pairs", required=True, type=Path, help="TSV: text_a, text_b, label (header, no quoting)")
    cache.add_argument("--threshold", type=float, help="override cache.semantic_threshold")
    cache.add_argument("--late-threshold", type=float, help="override cache.semantic_late_threshold")
    cache.add_argument("--json", action="store_true")
    cache.set_defaults(run=_eval_cache)


def fusion_weight(text: str) -> float:
    """An argument that is a list's weight in RRF (a partition's dense weight)."""
    try:
        weight = float(text)
    except ValueError:
        weight = -1.0
    if not 0 <= weight <= MAX_FUSION_WEIGHT:
        raise argparse.ArgumentTypeError(f"{text!r}: a weight is a number from 0 to {MAX_FUSION_WEIGHT:g}")
    return weight


def _weights(text: str) -> tuple[float, ...]:
    return tuple(fusion_weight(w) for w in text.split(","))


def _eval_retrieval(settings: Settings, args) -> None:
    from ..evaluate import evaluate_retrieval

    late = {"on": True, "off": False, "config": None}[args.late_interaction]
    progress = None if args.json else (lambda done, total: print(f"\ringested {done}/{total}", end="",
                                                                     file=sys.stderr, flush=True))
    report = asyncio.run(evaluate_retrieval(settings, args.data, args.split, args.mode, late, progress,
                                            args.dense_weights))
    if args.json:
        print(json.dumps(report))
    else:
        print(file=sys.stderr)
        for key, value in report.items():
            print(f"{key:>11}: {value}")


def _eval_conversations(settings: Settings, args) -> None:
    from ..evaluate.conversations import evaluate_conversations, evaluate_rewrites

    if (args.data is None) == (args.rewrites is None):
        sys.exit("appliance eval conversations: give --data DIR or --rewrites FILE")
    progress = None if args.json else (lambda done, total: print(f"\r{done}/{total}", end="", file=sys.stderr,
                                                                 flush=True))
    if args.rewrites is not None:
        report = asyncio.run(evaluate_rewrites(settings, args.rewrites, args.mode, args.limit, progress))
    else:
        report = asyncio.run(evaluate_conversations(settings, args.data, [args.mode], progress))[0]
    print(json.dumps(report) if args.json else "\n" + json.dumps(report, indent=1))


def _eval_answers(settings: Settings, args) -> None:
    from ..evaluate.answer_sets import set_kind
    from ..evaluate.answers import evaluate_answers

    try:
        set_kind(args.data)
    except FileNotFoundError as exc:
        sys.exit(f"appliance eval answers: {exc}")
    progress = None if args.json else (lambda done, total: print(f"\r{done}/{total}", end="", file=sys.stderr,
                                                                 flush=True))
    report = asyncio.run(evaluate_answers(settings, args.data, args.history == "on", args.limit, args.max_tokens,
                                          progress, max(1, args.concurrency)))
    print(json.dumps(report, ensure_ascii=False) if args.json else "\n" + json.dumps(report, indent=1,
                                                                                        ensure_ascii=False))


def _eval_router(settings: Settings, args) -> None:
    from ..evaluate.router import evaluate_router
    from ..router import load_questions
    from ..text import normalise_question
    from ..wiring import load_router

    router = load_router(settings)
    if router is None:
        sys.exit("no router model: run `appliance models build`")
    texts, labels, _ = load_questions(args.questions)
    embeddings = _encode_all(_open_encoder(settings, router.embedder), [normalise_question(t) for t in texts])[0]
    report = evaluate_router(router, texts, labels, embeddings, settings.router.bias,
                             settings.router.max_words_small)
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:>18}: {value}")


def _eval_cache(settings: Settings, args) -> None:
    from dataclasses import replace

    from ..cache import SemanticParams
    from ..cache.evaluate import evaluate_pairs, load_pairs
    from ..text import detect_language

    try:
        pairs = load_pairs(args.pairs)
    except (OSError, ValueError) as exc:
        sys.exit(str(exc))
    # what the cache would do with the questions served (cache.semantic = "on" for Chinese ones)
    params = replace(SemanticParams.of(settings.cache), chinese=True)
    if args.threshold is not None:  # the threshold of the pairs' language
        params = replace(params, threshold=args.threshold, threshold_zh=args.threshold)
    if args.late_threshold is not None:
        params = replace(params, late_threshold=args.late_threshold)
    # the server encodes a question by the encoder of its language: the pairs' language picks it here
    name = settings.encoder.for_language(detect_language(p.a for p in pairs))
    encoder = _open_encoder(settings, name)
    report = evaluate_pairs(pairs, lambda texts: _encode_all(encoder, texts), params)
    report["encoder"] = name
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:>15}: {value}")


def _open_encoder(settings: Settings, name: str):
    from ..encode import load_encoder
    from ..paths import model_folder

    return load_encoder(name, model_folder(settings.models_dir, name), settings.encoder.threads,
                        settings.encoder.max_length, settings.encoder.graph)


def _encode_all(encoder, texts: list[str], batch: int = 64):
    """(dense (n, dim), per-text token vectors or None, per-text unknown word-piece shares) for many texts, in
    batches: the same figures the server's semantic cache decides on."""
    import numpy as np

    dense, tokens, unknown = [], [], []
    for i in range(0, len(texts), batch):
        encoded = encoder.encode(texts[i:i + batch])
        dense.append(encoded.dense)
        tokens.extend(encoded.tokens or [])
        part = encoded.unknown if encoded.unknown is not None else np.zeros(len(encoded.dense), np.float32)
        unknown.append(part)
    return np.vstack(dense), (tokens or None), np.concatenate(unknown)
