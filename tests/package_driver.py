"""A client of an installed appliance, run by tests/system/test_package.py inside the server's network namespace (where
the test process itself cannot connect). Prints one JSON object with what it saw.

    python package_driver.py wait URL SECONDS
    python package_driver.py ingest URL FILE...        upload (wait=true), then list the partition
    python package_driver.py ask URL QUESTION          through the OpenAI client; sources, cache, /metrics
    python package_driver.py inventory URL QUESTION    documents, the cache entries, and the question asked again
    python package_driver.py keyed URL KEY             the documents listed with the key, and the status without it
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx

PARTITION = "manuals"


def wait(url: str, seconds: float) -> dict:
    deadline, last = time.monotonic() + seconds, None
    while time.monotonic() < deadline:
        try:
            last = httpx.get(url + "/readyz", timeout=5).json()
            if last.get("status") in ("ready", "failed"):
                return last
        except httpx.HTTPError as exc:
            last = {"status": "unreachable", "error": repr(exc)}
        time.sleep(1)
    return last or {"status": "timeout"}


def ingest(url: str, files: list[str]) -> dict:
    parts = [("file", (Path(f).name, Path(f).read_bytes(), "application/octet-stream")) for f in files]
    fields = {"tenant": "default", "partition": PARTITION, "wait": "true"}
    reply = httpx.post(url + "/v1/files", data=fields, files=parts, timeout=600)
    return {"status": reply.status_code, "body": reply.json(), **documents(url)}


def documents(url: str) -> dict:
    listed = httpx.get(url + "/v1/documents", params={"tenant": "default", "partition": PARTITION}, timeout=60).json()
    return {"documents": sorted(d["id"] for d in listed.get("documents", []))}


def ask(url: str, question: str) -> dict:
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    reply = client.chat.completions.create(model="auto", max_tokens=48,
                                           messages=[{"role": "user", "content": question}])
    extra = reply.model_extra or {}
    metrics = httpx.get(url + "/metrics", timeout=30)
    return {"answer": reply.choices[0].message.content, "sources": extra.get("sources", []),
            "cache": extra.get("cache"), "metrics_status": metrics.status_code,
            "metrics_lines": [line for line in metrics.text.splitlines() if line.startswith("appliance_")][:400]}


def inventory(url: str, question: str) -> dict:
    entries = httpx.get(url + "/v1/cache/entries", params={"tenant": "default"}, timeout=60).json()
    return {**documents(url), "cache_entries": len(entries.get("entries", [])), "again": ask(url, question)}


def keyed(url: str, key: str) -> dict:
    """With keys on, the key's tenant is the one the key names (no tenant parameter)."""
    params = {"partition": PARTITION}
    listed = httpx.get(url + "/v1/documents", params=params, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    without = httpx.get(url + "/v1/documents", params=params, timeout=60)
    return {"status": listed.status_code, "documents": sorted(d["id"] for d in listed.json().get("documents", [])),
            "without_key": without.status_code}


def main() -> None:
    command, url, *rest = sys.argv[1:]
    if command == "wait":
        result = wait(url, float(rest[0]))
    elif command == "ingest":
        result = ingest(url, rest)
    elif command == "ask":
        result = ask(url, rest[0])
    elif command == "keyed":
        result = keyed(url, rest[0])
    else:
        result = inventory(url, rest[0])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
