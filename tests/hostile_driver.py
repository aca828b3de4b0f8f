"""Run as a subprocess by test_hostile_clients.py: the hostile client, in a process of its own, as an attacker's
would be (in the test's process its work would compete with the server for one GIL).

Reads {"url", "seconds", "workers", "interval_s", "requests": [{"method", "path", "headers", "body", "chunked",
"tag"}]} as JSON on stdin (a body as a latin-1 string), prints GO, sends the requests round-robin from `workers`
threads for `seconds`, each thread starting one at most every `interval_s`, and prints one JSON line per reply:
{"tag", "status", "type", "json"} (long strings cut to 200), or {"tag", "status": 0, "error"} where the connection
failed.
"""
import itertools
import json
import sys
import threading
import time

import httpx


def _cut(value):
    if isinstance(value, str):
        return value[:200]
    if isinstance(value, list):
        return [_cut(v) for v in value[:20]]
    if isinstance(value, dict):
        return {k: _cut(v) for k, v in value.items()}
    return value


def _send(client: httpx.Client, spec: dict) -> dict:
    body = spec.get("body")
    content = body.encode("latin-1") if body is not None else None
    if content is not None and spec.get("chunked"):  # no Content-Length: the server must stop reading at its limit
        content = iter([content[i:i + 65536] for i in range(0, len(content), 65536)])
    reply = client.request(spec["method"], spec["path"], headers=spec.get("headers", {}), content=content)
    kind = reply.headers.get("content-type", "")
    parsed = _cut(reply.json()) if kind.startswith("application/json") else None
    return {"tag": spec.get("tag"), "status": reply.status_code, "type": kind, "json": parsed}


def main() -> None:
    plan = json.load(sys.stdin)
    order, lock, end = itertools.count(), threading.Lock(), time.perf_counter() + plan["seconds"]

    def worker() -> None:
        with httpx.Client(base_url=plan["url"], timeout=120) as client:
            while (n := next(order)) == 0 or time.perf_counter() < end:
                next_start = time.perf_counter() + plan["interval_s"]
                spec = plan["requests"][n % len(plan["requests"])]
                try:
                    line = json.dumps(_send(client, spec))
                except httpx.TransportError as exc:  # reported, not raised: the test names what broke
                    line = json.dumps({"tag": spec.get("tag"), "status": 0, "error": repr(exc)})
                with lock:
                    print(line, flush=True)
                time.sleep(max(0.0, next_start - time.perf_counter()))

    print("GO", flush=True)
    threads = [threading.Thread(target=worker) for _ in range(plan["workers"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
