"""The Markdown report and the goals of the answer-quality benchmark, from the measured numbers only."""
from __future__ import annotations

import machine

SYSTEM_NOTES = {
    "product": "the defaults: relevance floor, router, cited prompt, grounding check (`generate.unsupported` as "
               "default), loop stop",
    "extractive": "`generate.answer_mode = extractive`: no engine, the best sentences of the best passages, cited",
    "smollm2": "both engines on SmolLM2 (the old default model); everything else default",
    "qwen0.5b": "the engine on Qwen2.5-Coder-0.5B-Instruct (models/extra: the candidate for a small engine), both "
                "cores; everything else default",
    "plain": "the default model behind LlamaIndex's default text-QA prompt through the chat template, the same "
             "passages, no floor, no check acting, no citations asked (answers_kit/plain.py)",
}
SET_NOTES = {"squad2": "SQuAD 2.0 dev (English, 3:1 answerable : unanswerable)",
             "cmrc": "CMRC 2018 dev (Chinese, all answerable)", "doc2dial": "doc2dial (English conversations)"}


def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _ms(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def judge(r: dict) -> dict:
    """The issue's goals, on the product's runs; None where the set was not run."""
    runs = r.get("runs", {}).get("product", {})
    squad, cmrc, dialog = runs.get("squad2"), runs.get("cmrc"), runs.get("doc2dial")
    cited = [x["citation_accuracy"] for x in runs.values() if x and x.get("citation_accuracy") is not None]
    loops = [x["loops"] for x in runs.values() if x]

    def goal(text: str, measured, met) -> dict:
        return {"goal": text, "measured": measured, "met": met}
    abstain = None if squad is None or squad["abstain_recall"] is None else (
        squad["abstain_recall"] >= 0.6 and (squad["abstain_precision"] or 0) >= 0.7)
    return {
        "squad_answerable_f1": goal("SQuAD answerable F1 >= 0.55", squad and squad["answerable_f1"],
                                    None if squad is None else squad["answerable_f1"] >= 0.55),
        "squad_abstain": goal("SQuAD abstain recall >= 0.6 at precision >= 0.7",
                              squad and [squad["abstain_recall"], squad["abstain_precision"]], abstain),
        "cmrc_f1": goal("CMRC F1 >= 0.45", cmrc and cmrc["f1"], None if cmrc is None else cmrc["f1"] >= 0.45),
        "doc2dial_followup_f1": goal("doc2dial follow-up F1 >= 0.25", dialog and dialog["followup_f1"],
                                     None if dialog is None or dialog["followup_f1"] is None
                                     else dialog["followup_f1"] >= 0.25),
        "citation_accuracy": goal("citation accuracy >= 0.8 (lowest set)", min(cited) if cited else None,
                                  min(cited) >= 0.8 if cited else None),
        "loops": goal("loops <= 1 % (highest set)", max(loops) if loops else None,
                      max(loops) <= 0.01 if loops else None),
    }


def markdown(r: dict) -> str:
    m, d = r["meta"], r["meta"]["defaults"]
    args = m["args"]
    lines = machine.report_header("Answer quality: the product against its peers on the same passages", r,
                                  "bench-answers", "4 questions and 1 conversation a set")
    lines += [f"- Defaults: models small {d['model_small']}, large {d['model_large']}; {d['passages']} passages, "
              f"{d['context_tokens']} passage tokens, min_relevance {d['min_relevance']}, decline_above "
              f"{d.get('decline_above', 1.0):g}, unsupported = "
              f"{d['unsupported']}, answers up to {d['max_tokens']} tokens, wait budget "
              f"{d.get('wait_budget_s', 30.0):g} s; caches off (every answer computed).",
              f"- Sample: {args['limit']} questions per question set, {args['conversations']} doc2dial conversations, "
              f"spread evenly over each file; {args['concurrency']} asked at once (answers/min is at that "
              "concurrency). Nothing was tuned on these questions.", "", "Systems:", ""]
    lines += [f"- `{s}`: {SYSTEM_NOTES[s]}" for s in r["runs"]] + [""]
    lines += _goals(r) + _tables(r) + _halves(r) + _definitions() + _examples(r)
    return "\n".join(lines) + "\n"


def _goals(r: dict) -> list[str]:
    lines = ["## Goals (product)", "", "| goal | measured | met |", "|---|---|---|"]
    for t in r["targets"].values():
        measured = t["measured"]
        shown = ("-" if measured is None else " / ".join(_f(x) for x in measured) if isinstance(measured, list)
                 else _f(measured))
        lines.append(f"| {t['goal']} | {shown} | {'-' if t['met'] is None else 'yes' if t['met'] else 'no'} |")
    return lines + [""]


def _tables(r: dict) -> list[str]:
    lines = []
    sets = dict.fromkeys(name for sets in r["runs"].values() for name in sets)
    for name in sets:
        lines += [f"## {SET_NOTES.get(name, name)}", "",
                  "| system | answers | F1 | EM | answerable F1 | contains gold | follow-up F1 | abstain P / R | "
                  "citation acc. (citing) | supported | flagged wrong / right | loops | degraded | answers/min | "
                  "TTFT p50 / p99 ms | measured |", "|" + "---|" * 16]
        for system, runs in r["runs"].items():
            x = runs.get(name)
            if not x:
                lines.append(f"| {system} | not measured |" + " |" * 14)
                continue
            lines.append(
                f"| {system} | {x['answers']} | {_f(x['f1'])} | {_f(x['exact_match'])} | {_f(x['answerable_f1'])} | "
                f"{_f(x['contains_gold'])} | {_f(x['followup_f1'])} | {_f(x['abstain_precision'])} / "
                f"{_f(x['abstain_recall'])} | {_f(x['citation_accuracy'])} ({_f(x['share_citing'], 2)}) | "
                f"{_f(x['supported_share'])} | {_f(x['flagged_wrong'])} ({x['checked_wrong']}) / "
                f"{_f(x['flagged_right'])} ({x['checked_right']}) | {_f(x['loops'])} | {_f(x['degraded'])} | "
                f"{x['answers_per_min']} | {_ms(x['ttft_p50_ms'])} / {_ms(x['ttft_p99_ms'])} | "
                f"{x['run']['date']}, {x['run']['commit']}{'+' if x['run']['uncommitted_changes'] else ''} |")
        lines.append("")
    return lines


def _halves(r: dict) -> list[str]:
    lines = ["## Held-out halves", "", "The questions (conversations) at even and odd positions of each file, "
             "scored apart: nothing was tuned on either, so they should agree within the noise of the sample.", "",
             "| system | set | half | answers | F1 | answerable F1 | contains gold | follow-up F1 | abstain P / R | "
             "citation acc. |", "|" + "---|" * 10]
    for system, runs in r["runs"].items():
        for name, x in runs.items():
            for half, h in (x or {}).get("halves", {}).items():
                lines.append(f"| {system} | {name} | {half} | {h['answers']} | {_f(h['f1'])} | "
                             f"{_f(h['answerable_f1'])} | {_f(h['contains_gold'])} | {_f(h['followup_f1'])} | "
                             f"{_f(h['abstain_precision'])} / {_f(h['abstain_recall'])} | "
                             f"{_f(h['citation_accuracy'])} |")
    return lines + [""]


def _definitions() -> list[str]:
    return ["## How each figure is computed", "",
            "- F1 / EM: the answer with its citation marks removed against every gold answer, the best kept. English: "
            "the official SQuAD scorer's normalisation (lower case, ASCII punctuation and a/an/the removed) and token "
            "F1; Chinese: CMRC 2018's scorer (punctuation and whitespace removed, single CJK characters and runs of "
            "other letters/digits, F1 from the longest common contiguous run). An abstention on an answerable "
            "question scores 0; on an unanswerable one 1 (and 0 for any answer), SQuAD 2.0's convention: `F1` "
            "covers all questions, `answerable F1` only the answerable ones. A generated sentence against a short "
            "span scores low even when right: `contains gold` (the normalised gold answer inside the answer) is "
            "the secondary figure, not a replacement.",
            "- Abstained: refused before generating (relevance floor) or the answer says the documents do not cover "
            "the question (`grounding.says_not_covered`). Precision: abstentions on unanswerable questions / all "
            "abstentions; recall: / all unanswerable questions.",
            "- Citation accuracy: among answered answerable questions whose answer cites a passage (the share in "
            "brackets), those where a cited passage contains a gold answer or is the judged paragraph (qrels).",
            "- Supported: answers (abstentions aside) the grounding check labels supported. `plain`'s answers are "
            "checked after the fact, only to measure them.",
            "- Flagged wrong / right: among answered answerable questions the check looked at, the share labelled "
            "partly or unsupported, on wrong answers (F1 < 0.5 and no gold answer inside) and on right ones "
            "(F1 >= 0.5 or a gold answer inside); the counts in brackets.",
            "- Loops: answers stopped as repetition (`plain`: a repeated tail found afterwards). Degraded: answered "
            "retrieval-only because no engine could take the question in time. TTFT: from the question's arrival "
            "at the answer path to its first token (refusals and extractive answers: to the whole answer).", ""]


def _examples(r: dict) -> list[str]:
    lines = ["## Examples (the first answers of each run)", ""]
    for system, runs in r["runs"].items():
        for name, x in runs.items():
            for e in (x or {}).get("examples", [])[:2]:
                answer = " ".join(e["answer"].split())
                lines.append(f"- {system} / {name}: Q: {e['question']} | A: {answer[:240]}"
                             f"{'...' if len(answer) > 240 else ''} | gold: {e['gold'][:3] or '(unanswerable)'} | "
                             f"F1 {e['f1']}, {e['grounding']}, {e['finish_reason']}")
    return lines + [""]
