"""Debian's Firefox ESR for the console tests, driven over WebDriver BiDi (the protocol Firefox speaks itself on its
remote-debugging port), so no geckodriver and no browser download are needed. Just enough of the protocol to
open a page, run script in it, and hear its console and its requests."""
from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time

from browser import system_browser
from support import free_port


def firefox_path() -> str:
    return system_browser(("firefox-esr", "firefox"), "firefox-esr")


class Firefox:
    def __init__(self, timeout_s: float = 60):
        from websockets.sync.client import connect

        self.profile = tempfile.mkdtemp(prefix="firefox-")
        port = free_port()
        self.proc = subprocess.Popen([firefox_path(), "--headless", "--no-remote", "--profile", self.profile,
                                      "--remote-debugging-port", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.events: list[dict] = []
        self._next_id = 0
        self._exit = contextlib.ExitStack()  # websockets wants its connection opened as a context
        deadline = time.time() + timeout_s
        while True:
            try:
                self.ws = self._exit.enter_context(connect(f"ws://127.0.0.1:{port}/session", open_timeout=5,
                                                           max_size=2**24))
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError("Firefox did not open its WebDriver BiDi port") from None
                time.sleep(0.3)
        self.call("session.new", {"capabilities": {}})
        self.call("session.subscribe", {"events": ["log.entryAdded", "network.beforeRequestSent"]})
        self.context = self.call("browsingContext.getTree", {})["contexts"][0]["context"]

    def call(self, method: str, params: dict, timeout_s: float = 60) -> dict:
        self._next_id += 1
        self.ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        deadline = time.time() + timeout_s
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.time())))
            if message.get("type") == "event":
                self.events.append(message)
            elif message.get("id") == self._next_id:
                if message.get("type") == "error":
                    raise RuntimeError(f"{method}: {message.get('error')}: {message.get('message')}")
                return message["result"]

    def navigate(self, url: str) -> None:
        self.call("browsingContext.navigate", {"context": self.context, "url": url, "wait": "complete"})

    def evaluate(self, expression: str):
        """The value of a JavaScript expression (awaited if it is a promise), as BiDi serialises it."""
        result = self.call("script.evaluate", {"expression": expression, "target": {"context": self.context},
                                               "awaitPromise": True})
        if result.get("type") == "exception":
            raise RuntimeError(f"script error: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30) -> None:
        deadline = time.time() + timeout_s
        while not self.evaluate(f"Boolean({expression})"):
            if time.time() > deadline:
                raise TimeoutError(f"not true in {timeout_s} s: {expression}")
            time.sleep(0.2)

    def errors(self) -> list[str]:
        return [e["params"].get("text", "") for e in self.events
                if e["method"] == "log.entryAdded" and e["params"].get("level") == "error"]

    def requests(self) -> list[str]:
        """What the page asked for (Firefox's own background requests belong to no page and are left out)."""
        return [e["params"]["request"]["url"] for e in self.events
                if e["method"] == "network.beforeRequestSent" and e["params"].get("context") == self.context]

    def close(self) -> None:
        try:
            self._exit.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)
