"""bench/results/soak.md: the run's trends per window, the totals, and the verdicts."""
from __future__ import annotations

from collections import Counter

NORMAL = ("search", "ask", "ingest", "upload")


def _sample_at(samples: list[dict], start: float, length: float) -> dict | None:
    inside = [s for s in samples if start <= s["t_s"] < start + length]
    return inside[-1] if inside else None


def _normal_errors(window: dict) -> int:
    return sum(n for kind in NORMAL for status, n in window["status"].get(kind, {}).items()
               if not status.startswith("2"))


def totals(results: dict) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for window in results["windows"]:
        for kind, counts in window["status"].items():
            out.setdefault(kind, Counter()).update(counts)
    return out


def judge(results: dict) -> list[str]:
    samples = results["samples"]
    verdicts = []
    if samples:
        first, last = samples[min(len(samples) - 1, 6)], samples[-1]  # after a minute of warming up
        grew = last["all_fds"] - first["all_fds"]
        verdicts.append(f"{'MET' if grew <= 64 else 'NOT MET'}: open files flat (all processes {first['all_fds']} "
                        f"after 1 min -> {last['all_fds']} at the end, max {max(s['all_fds'] for s in samples)})")
        rss = last["server_rss_mib"] - first["server_rss_mib"]
        verdicts.append(f"{'MET' if rss <= 512 else 'NOT MET'}: server RSS growth {rss:+.0f} MiB "
                        f"({first['server_rss_mib']} -> {last['server_rss_mib']} MiB)")
    errors = sum(_normal_errors(w) for w in results["windows"])
    verdicts.append(f"{'MET' if errors == 0 else 'NOT MET'}: the normal client got {errors} non-2xx answers")
    return verdicts


def markdown(results: dict) -> str:
    meta, params = results["meta"], results["params"]
    lines = ["# Soak: a normal app and a hostile tenant on one box", "",
             f"- Command: `{meta['command']}`", f"- Date: {meta['date']}; commit {meta['commit']}"
             f"{' plus uncommitted changes' if meta['uncommitted_changes'] else ''}; wall time {meta['wall_s']} s",
             f"- Machine: {meta['cpu_model']} ({', '.join(meta['cpu_simd'])}), {meta['cores']} cores, "
             f"{meta['memory_gib']} GiB; load at start {meta['load_average_at_start']}, at end "
             f"{meta['load_average_at_end']}",
             f"- Run: {params['minutes']} min, windows of {params['window_s']} s; server ready in "
             f"{results['server']['boot_s']} s (default models and settings, API keys for tenants `app` and "
             "`attacker`)", "",
             "Normal app (tenant `app`): a search every 0.5 s, an ask (16 tokens) every 10 s, one SciFact abstract "
             "ingested (waiting until searchable) every second, a small Markdown file uploaded every 5 s. Hostile "
             "tenant: 8 flooding search loops (10/s each), 16 connections trickling a 60,000-byte body a byte per "
             "0.5 s, a 2 MB body every 2 s, a 200,000-element array every 3 s, a text/plain ingest every 2 s, a "
             "200 KB chat message every 5 s, requests for the other tenant and its cache entries, a wrong key every "
             "second; and uploads (bench/soak_kit/uploads.py): a 2 MB multipart body repeating its delimiter with a "
             "wrong byte every second, an HTML and a text file that drove the parsers' regexes super-linear every "
             "2 s, 20 files of ~92 KB every 2 s, and 12 connections announcing a 256 MiB upload and trickling it.",
             "", "| t (s) | fds (server / all) | RSS MiB (server / all) | search n, p50, p99 ms | ask n, p50, p99 ms "
             "| upload n, p50, p99 ms | ingests | normal non-2xx | attacks: answers |",
             "|---|---|---|---|---|---|---|---|---|"]
    for w in results["windows"]:
        s = _sample_at(results["samples"], w["start_s"], params["window_s"]) or {}
        lat = w["latency_ms"]
        cell = lambda k: f"{lat[k]['n']}, {lat[k]['p50']}, {lat[k]['p99']}" if k in lat else ""  # noqa: E731
        attacks = Counter()
        for kind, counts in w["status"].items():
            if kind.startswith("attack:"):
                attacks.update(counts)
        lines.append(f"| {w['start_s']:.0f} | {s.get('server_fds', '')} / {s.get('all_fds', '')} | "
                     f"{s.get('server_rss_mib', '')} / {s.get('all_rss_mib', '')} | {cell('search')} | "
                     f"{cell('ask')} | {cell('upload')} | {sum(w['status'].get('ingest', {}).values())} | "
                     f"{_normal_errors(w)} | "
                     f"{', '.join(f'{k}: {v}' for k, v in sorted(attacks.items()))} |")
    lines += ["", "## Every request, by kind and answer", "", "| kind | answers |", "|---|---|"]
    for kind, counts in sorted(totals(results).items()):
        lines.append(f"| {kind} | {', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))} |")
    lines += ["", "## Verdicts", "", *(f"- {v}" for v in results["targets"]), ""]
    return "\n".join(lines)
