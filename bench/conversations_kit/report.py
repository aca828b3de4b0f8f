"""The Markdown report and the checks of the conversations benchmark, from the measured numbers only."""
from __future__ import annotations

import machine

from .modes import ANSWER_BUDGET_MIN, AUTO_REWRITE, CHEAP_MODES, EXAMPLES, RETRIEVAL_MODES


def _f(x, digits=4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _ratio(a, b) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def _ms(x) -> str:
    return "-" if x is None else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _methods(m: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(m.items(), key=lambda kv: -kv[1])) or "-"


def markdown(r: dict) -> str:
    m = r["meta"]
    lines = machine.report_header("Conversations benchmark: the standalone-question stage", r, "bench-conversations",
                                  "a few conversations and rows")
    lines += [
        f"- Settings: defaults (`load_settings`) with APPLIANCE_MODELS_DIR=models, APPLIANCE_DEMO_CORPUS=false, "
        f"APPLIANCE_LOG_LEVEL=warning; APPLIANCE_GENERATE_ENABLED=true only where an engine is needed (rewrite "
        f"modes, answers), else false; steps 1 and 2 with APPLIANCE_CONVERSATION_STANDALONE=auto (so that their mode "
        f"\"auto\" is that strategy; step 3 keeps the default, {m['defaults']['standalone']}; its third run sets "
        f"APPLIANCE_SMALL_FREQUENCY_PENALTY and APPLIANCE_LARGE_FREQUENCY_PENALTY to the other value), "
        f"APPLIANCE_CONVERSATION_FOLLOWUP=rewrite for \"{AUTO_REWRITE}\", APPLIANCE_LARGE_ENABLED=false where only "
        "the rewrite engine is used. Rewrite "
        f"engine: small ({m['rewrite']['model']}), at most {m['rewrite']['max_tokens']} tokens, timeout "
        f"{m['rewrite']['timeout_s']} s (past it: expand); encoder {m['encoder']}.",
        "- Peers are the other modes of the same run: raw = the last message as it is (PrivateGPT's behaviour), "
        "history = every earlier message + the question (concatenation), rewrite = an LLM condenses the conversation "
        "into a standalone question (LlamaIndex-style condense question), with our engine and prompt.", "",
    ]
    if "retrieval" in r:
        lines += _retrieval_section(r)
    if "rewrites" in r:
        lines += _rewrites_section(r)
    if "answers" in r:
        lines += _answers_section(r)
    lines += _choice_section(r)
    return "\n".join(lines) + "\n"


def _retrieval_section(r: dict) -> list[str]:
    ret, m = r["retrieval"], r["meta"]
    lines = ["## 1. Follow-up retrieval on doc2dial", "",
             f"How: `evaluate_conversations(settings, folder, modes)`: the corpus ({m['doc2dial_documents']} "
             "documents) ingested once per call into a fresh data folder; every judged user turn resolved by the "
             "stage in the mode, then hybrid search (k = 30, deduplicated to documents); a turn's relevant document "
             "is the one its dialogue is about. Stage ms: `Standalone.ms` of each follow-up (the whole stage: "
             "detection, expansion or rewrite; raw is 0 by construction). Ratios: mode / raw on follow-ups.", "",
             f"### 1a. Every conversation ({m['doc2dial_conversations']}), the modes without an engine", "",
             f"`{m['doc2dial_folder']}`; call 1 ({', '.join(CHEAP_MODES)}; generation off): "
             f"{ret['call_1_wall_s']} s.", ""]
    lines += _retrieval_table(ret["all_runs"])
    lines += [f"### 1b. The first {m['llm_conversations']} conversations, every mode (the same turns)", "",
              f"`{m['llm_folder']}`; call 2 (modes {', '.join(RETRIEVAL_MODES)}; the small engine on, large off): "
              f"{ret['call_2_wall_s']} s; call 3 (auto with followup = rewrite, fresh ingest and engine): "
              f"{ret['call_3_wall_s']} s.", ""]
    lines += _retrieval_table(ret["runs"])
    lines += ["as_is: auto found no dependence on the history and searched the question as it is; "
              "expand_fallback: the rewrite was not had in time (or was unusable) and the expansion went instead. "
              "LLM-resolved: the stage time of the follow-ups sent to the rewrite engine only (rewrite and "
              "expand_fallback).", ""]
    return lines + _examples([(x["label"], x.get("examples", [])) for x in ret["runs"] if x["mode"] != "raw"])


def _retrieval_table(runs: list[dict]) -> list[str]:
    raw = next(x for x in runs if x["mode"] == "raw")
    first = runs[0]
    lines = [f"{first['turns'] - first['followups']} first turns, {first['followups']} follow-ups.", "",
             "| mode | follow-ups R@10 | nDCG@10 | MRR@10 | first turns R@10 | nDCG@10 | MRR@10 | stage p50 ms | "
             "p99 ms | LLM-resolved p50 / p99 ms | R@10 vs raw | nDCG@10 vs raw | MRR@10 vs raw | "
             "how follow-ups were resolved |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in runs:
        f, t = x["followup"], x["first_turn"]
        methods = {k: v for k, v in x["methods"].items() if k != "first_turn"}
        lines.append(f"| {x['label']} | {_f(f['recall@10'])} | {_f(f['ndcg@10'])} | {_f(f['mrr@10'])} | "
                     f"{_f(t['recall@10'])} | {_f(t['ndcg@10'])} | {_f(t['mrr@10'])} | {_ms(x['rewrite_p50_ms'])} | "
                     f"{_ms(x['rewrite_p99_ms'])} | {_pair(x)} | "
                     f"{_ratio(f['recall@10'], raw['followup']['recall@10'])} | "
                     f"{_ratio(f['ndcg@10'], raw['followup']['ndcg@10'])} | "
                     f"{_ratio(f['mrr@10'], raw['followup']['mrr@10'])} | {_methods(methods)} |")
    return lines + [""]


def _pair(x: dict) -> str:
    return "-" if x.get("llm_p50_ms") is None else f"{_ms(x['llm_p50_ms'])} / {_ms(x['llm_p99_ms'])}"


def _examples(groups: list[tuple[str, list[dict]]]) -> list[str]:
    groups = [(label, ex) for label, ex in groups if ex]
    if not groups:
        return []
    lines = [f"First {EXAMPLES} follow-ups each mode changed, as searched:", "", "| mode | asked | how | searched |",
             "|---|---|---|---|"]
    for label, examples in groups:
        for e in examples:
            lines.append(f"| {label} | {_cell(e['question'])} | {e['method']} | {_cell(e['standalone'])} |")
    return lines + [""]


def _cell(text: str, limit: int = 220) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _rewrites_section(r: dict) -> list[str]:
    rows = r["rewrites"]
    lines = ["## 2. Standalone questions against human rewrites", "",
             "How: `evaluate_rewrites(settings, path, mode, limit)`: for each row, the stage resolves the raw "
             "question with the earlier questions as history (CANARD: each followed by its QuAC answer); score = "
             "token F1 (lower-cased \\w+ tokens) against the human rewrite, mean over rows (first turns included: "
             "they go as they are in every mode). raw F1 = the raw question against the rewrite. ms: the whole "
             "`resolve` call per row, first turns included (they return at once). Fresh services per row of the table; "
             "auto = the auto strategy (followup = expand).", "",
             "| set | rows | mode | F1 | F1 vs raw | p50 ms | p99 ms | how rows were resolved |",
             "|---|---|---|---|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {x['dataset']} | {x['pairs']} | {x['mode']} | {_f(x['f1'])} | "
                     f"{_ratio(x['f1'], x['raw_f1'])} | "
                     f"{_ms(x['p50_ms'])} | {_ms(x['p99_ms'])} | {_methods(x['methods'])} |")
    return lines + [""] + _examples([(f"{x['dataset']} {x['mode']}", x.get("examples", [])) for x in rows
                                     if x["mode"] == "rewrite"])


def _answers_section(r: dict) -> list[str]:
    runs = r["answers"]
    lines = ["## 3. Answers with and without the conversation in the prompt", "",
             f"How: `evaluate_answers(settings, doc2dial, history_in_prompt, limit={runs[0]['conversations']}, "
             "max_tokens=96)`: every turn with a gold answer and a judged document of the first "
             f"{runs[0]['conversations']} conversations answered through the real engines (default settings: "
             f"{_default_label(r['meta'])} for retrieval, router, caches off), the recent turns in the "
             "prompt (history_turns = 6) or none (history_turns = 0); a run took "
             f"{runs[0]['wall_s'] / 60:.1f} min here. F1 / exact match: tokens of the answer (citations "
             "stripped for EM) against the agent's reply; citing: the answer cites at least one passage; citation "
             "accuracy: a cited passage comes from the turn's document; top source: the first source does; loops: "
             "stopped as repetition (generate/repetition.py); not covered: refused by the relevance floor "
             f"(generate.min_relevance). The first two runs have the default frequency_penalty "
             f"({runs[0].get('frequency_penalty', 0):g}), the third sets it to "
             f"{runs[-1].get('frequency_penalty', 0):g} on both engines.", "",
             "| history in prompt | frequency penalty | answers | F1 | exact match | follow-up F1 | citing | "
             "citation accuracy | top source | loops | not covered | degraded | answers/min | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in runs:
        lines.append(f"| {'on' if x['history_in_prompt'] else 'off'} | {x.get('frequency_penalty', 0):g} | "
                     f"{x['answers']} | {_f(x['f1'])} | "
                     f"{_f(x['exact_match'])} | {_f(x['followup_f1'])} | {_f(x['share_citing'])} | "
                     f"{_f(x['citation_accuracy'])} | {_f(x['top_source_accuracy'])} | {_f(x['loops'])} | "
                     f"{_f(x.get('not_covered'))} | {_f(x['degraded'])} | {x['answers_per_min']} | {x['wall_s']} |")
    if len(runs) >= 2 and runs[1]["f1"]:
        on, off = runs[:2]
        lines += ["", f"On / off: F1 {_ratio(on['f1'], off['f1'])}, follow-up F1 "
                  f"{_ratio(on['followup_f1'], off['followup_f1'])}, citation accuracy "
                  f"{_ratio(on['citation_accuracy'], off['citation_accuracy'])}."]
    return lines + [""]


def choice(r: dict) -> dict | None:
    """The best mode on follow-up nDCG@10 (ties: recall@10, then lower p50), with its margins."""
    runs = r.get("retrieval", {}).get("runs")
    if not runs:
        return None
    ranked = sorted(runs, key=lambda x: (-x["followup"]["ndcg@10"], -x["followup"]["recall@10"],
                                         x["rewrite_p50_ms"]))
    best, second = ranked[0], ranked[1]
    by = {x["label"]: x for x in runs}
    return {"best": best["label"], "second": second["label"], "ranked": [x["label"] for x in ranked],
            "best_ndcg": best["followup"]["ndcg@10"], "second_ndcg": second["followup"]["ndcg@10"],
            "raw_ndcg": by["raw"]["followup"]["ndcg@10"], "best_recall": best["followup"]["recall@10"],
            "raw_recall": by["raw"]["followup"]["recall@10"], "p50": best["rewrite_p50_ms"],
            "p99": best["rewrite_p99_ms"]}


def _choice_section(r: dict) -> list[str]:
    c = choice(r)
    lines = ["## Choice", ""]
    if c is None:
        return lines + ["Step 1 was not run: no choice.", ""]
    by = {x["label"]: x for x in r["retrieval"]["runs"]}
    lines.append(f"- Best on follow-up retrieval (nDCG@10): **{c['best']}**, {c['best_ndcg']:.4f} against raw "
                 f"{c['raw_ndcg']:.4f} ({c['best_ndcg'] - c['raw_ndcg']:+.4f}, "
                 f"{_ratio(c['best_ndcg'], c['raw_ndcg'])}); "
                 f"recall@10 {c['best_recall']:.4f} against {c['raw_recall']:.4f} "
                 f"({_ratio(c['best_recall'], c['raw_recall'])}). Next: {c['second']}, {c['second_ndcg']:.4f} "
                 f"({c['best_ndcg'] - c['second_ndcg']:+.4f}). Stage latency of {c['best']} per follow-up: p50 "
                 f"{_ms(c['p50'])} ms, p99 {_ms(c['p99'])} ms.")
    lines.append("- Order on follow-up nDCG@10: " + " > ".join(
        f"{label} {by[label]['followup']['ndcg@10']:.4f}" for label in c["ranked"]) + ".")
    label = _default_label(r["meta"])
    default = by.get(label)
    if default is not None:
        lines.append(f"- The default ({label}): follow-up nDCG@10 "
                     f"{default['followup']['ndcg@10']:.4f} ({_ratio(default['followup']['ndcg@10'], c['raw_ndcg'])} "
                     f"raw), p50 {_ms(default['rewrite_p50_ms'])} ms, p99 {_ms(default['rewrite_p99_ms'])} ms.")
    for x in ("rewrite", AUTO_REWRITE):
        if x in by:
            m = by[x]["methods"]
            fell = m.get("expand_fallback", 0)
            tried = fell + m.get("rewrite", 0)
            if tried:
                lines.append(f"- {x}: {tried} follow-ups sent to the rewrite engine, {fell} fell back to the "
                             f"expansion ({fell / tried:.0%}); their stage time p50 {_ms(by[x]['llm_p50_ms'])} ms, "
                             f"p99 {_ms(by[x]['llm_p99_ms'])} ms (timeout {r['meta']['rewrite']['timeout_s']} s); "
                             f"follow-up nDCG@10 {by[x]['followup']['ndcg@10']:.4f} "
                             f"({_ratio(by[x]['followup']['ndcg@10'], c['raw_ndcg'])} raw).")
    d = r["meta"]["defaults"]
    lines.append(f"- Defaults this run had: conversation.standalone = {d['standalone']}, followup = "
                 f"{d['followup']}, rewrite_timeout_s = {d['rewrite_timeout_s']:g}, history_turns = "
                 f"{d['history_turns']}, history_tokens = {d['history_tokens']}.")
    lines += ["", "Checks (set by this benchmark, not by an issue):", ""]
    for t in r["targets"]:
        state = {True: "MET", False: "NOT MET", None: "NO VERDICT"}[t["met"]]
        lines.append(f"- {state}: {t['what']}: {t['measured']}")
    return lines + [""]


def _default_label(meta: dict) -> str:
    """The label of the run that did what the default settings do."""
    d = meta["defaults"]
    return f"auto (followup={d['followup']})" if d["standalone"] == "auto" else d["standalone"]


def judge(r: dict) -> list[dict]:
    verdicts = []
    runs = r.get("retrieval", {}).get("runs")
    if runs:
        by = {x["label"]: x for x in runs}
        raw = by["raw"]["followup"]["ndcg@10"]
        for label in (x["label"] for x in runs if x["mode"] != "raw"):
            value = by[label]["followup"]["ndcg@10"]
            verdicts.append({"what": f"{label} beats raw on follow-up nDCG@10",
                             "measured": f"{value:.4f} vs {raw:.4f}", "met": value > raw})
        label = _default_label(r["meta"])
        bounded = [x for x in runs if x["mode"] != "history" and x["label"] != label]
        if label in by and bounded:
            best = max(bounded, key=lambda x: x["followup"]["ndcg@10"])
            mine = by[label]["followup"]["ndcg@10"]
            verdicts.append({"what": f"the default ({label}) retrieves follow-ups best of the modes whose query "
                                     "stays bounded (all but history, which grows with the conversation)",
                             "measured": f"{mine:.4f} vs {best['label']} {best['followup']['ndcg@10']:.4f}",
                             "met": mine >= best["followup"]["ndcg@10"]})
        # within one call (one ingest): call 3 builds its own index, whose HNSW graph may differ in the last digit
        for name, call in (("call 1", r["retrieval"].get("all_runs", [])),
                           ("call 2", [x for x in runs if x["label"] != AUTO_REWRITE])):
            firsts = {x["first_turn"]["ndcg@10"] for x in call}
            verdicts.append({"what": f"first turns are not touched by the mode ({name}: the same first-turn "
                                     "nDCG@10 in every mode)",
                             "measured": ", ".join(f"{v:.4f}" for v in sorted(firsts)), "met": len(firsts) == 1})
        timeout_ms = r["meta"]["rewrite"]["timeout_s"] * 1000
        for label in ("rewrite", AUTO_REWRITE):
            if label in by:
                p99 = by[label]["llm_p99_ms"] or 0.0
                verdicts.append({"what": f"{label}: p99 of the LLM-resolved follow-ups within the rewrite "
                                         f"timeout ({timeout_ms:.0f} ms) plus 10%", "measured": f"{p99:.0f} ms",
                                 "met": p99 <= timeout_ms * 1.1})
    for run in r.get("answers", []):
        verdicts.append({"what": f"answers (history {'on' if run['history_in_prompt'] else 'off'}, frequency "
                                 f"penalty {run.get('frequency_penalty', 0):g}): a run within "
                                 f"about {ANSWER_BUDGET_MIN:g} min", "measured": f"{run['wall_s'] / 60:.1f} min",
                         "met": run["wall_s"] <= ANSWER_BUDGET_MIN * 60 * 1.1})
    if not verdicts:
        verdicts.append({"what": "nothing run", "measured": "-", "met": None})
    return verdicts
