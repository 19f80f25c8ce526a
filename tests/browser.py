"""A real headless Chromium, driven over the DevTools protocol: pages as a person's browser shows them.

:class:`Browser` starts Debian's ``chromium`` with a fresh profile and a DevTools port of its own,
opens one tab and speaks the protocol over a websocket (``websockets``' synchronous client):
navigate, evaluate JavaScript in the page, take a screenshot. When a server asks for HTTP
credentials (``401`` with ``WWW-Authenticate``) the tab answers with the ones given, as a person
would type them into the browser's dialog, and counts how often it was asked.

CI installs ``chromium`` (``.ci/run``); elsewhere a machine without it skips the tests that need it
(:func:`need_chromium`).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

from websockets.sync.client import ClientConnection, connect

from .waiting import polled

__all__ = ["Browser", "chromium", "need_chromium"]


def chromium() -> str | None:
    """The Chromium binary, if this machine has one."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def need_chromium() -> str:
    """The Chromium binary; without one the test is skipped (failed on CI, which installs it)."""
    import pytest

    binary = chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI: .ci/run installs it")
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    return binary


class Browser:
    """One headless Chromium with one tab; ``credentials`` answer any HTTP auth challenge."""

    def __init__(self, binary: str, credentials: tuple[str, str] | None = None, size: tuple[int, int] = (1280, 800)):
        self._profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
        self._process = subprocess.Popen(
            [
                binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                f"--user-data-dir={self._profile}", "--remote-debugging-port=0", f"--window-size={size[0]},{size[1]}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        self._devtools: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read_output, name="chromium-output", daemon=True).start()
        self._credentials = credentials
        self._ids = itertools.count(1)
        #: How often a server asked this tab for credentials.
        self.challenges = 0
        self._stack = ExitStack()
        self._session: str | None = None
        try:
            self._socket = self._stack.enter_context(connect(self._endpoint(), max_size=64 * 1024 * 1024))
            target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            self._call("Page.enable")
            self._call("Runtime.enable")
            if credentials is not None:
                self._call("Fetch.enable", {"handleAuthRequests": True, "patterns": [{"urlPattern": "*"}]})
        except BaseException:
            self.close()
            raise

    def _read_output(self) -> None:
        """Hand on the DevTools address chromium prints once it listens (``None`` if its output
        ends first), and read the rest of its output, so that it never waits on a full pipe."""
        assert self._process.stderr is not None
        with self._process.stderr as output:
            for line in output:
                if line.startswith(b"DevTools listening on ws://"):
                    self._devtools.put(line.decode().removeprefix("DevTools listening on ").strip())
        self._devtools.put(None)

    def _endpoint(self) -> str:
        try:
            endpoint = self._devtools.get(timeout=20)
        except queue.Empty:
            raise AssertionError("chromium did not start within 20 s") from None
        if endpoint is None:
            raise RuntimeError("chromium did not start")
        return endpoint

    # --- the protocol -------------------------------------------------------------------

    @property
    def socket(self) -> ClientConnection:
        return self._socket

    def _send(self, method: str, params: dict[str, Any] | None = None) -> int:
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if self._session is not None:
            message["sessionId"] = self._session
        self._socket.send(json.dumps(message))
        return ident

    def _call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 20) -> dict[str, Any]:
        ident = self._send(method, params)
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(deadline)
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    def _receive(self, deadline: float) -> dict[str, Any]:
        """The next message, after answering whatever the page's requests are paused for."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("chromium did not answer in time")
            message: dict[str, Any] = json.loads(self._socket.recv(timeout=remaining))
            method = message.get("method")
            if method == "Fetch.requestPaused":
                self._send("Fetch.continueRequest", {"requestId": message["params"]["requestId"]})
            elif method == "Fetch.authRequired" and self._credentials is not None:
                self.challenges += 1
                user, password = self._credentials
                answer = {"response": "ProvideCredentials", "username": user, "password": password}
                self._send(
                    "Fetch.continueWithAuth",
                    {"requestId": message["params"]["requestId"], "authChallengeResponse": answer},
                )
            else:
                return message

    # --- what a test does ----------------------------------------------------------------

    def open(self, url: str, timeout: float = 20) -> None:
        """Navigate the tab to ``url`` and wait for its load event."""
        self._call("Page.navigate", {"url": url})
        deadline = time.monotonic() + timeout
        while self._receive(deadline).get("method") != "Page.loadEventFired":
            pass

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 10) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        return polled(lambda: self.evaluate(expression), within=timeout, every=0.02, what=f"true: {expression}")

    def screenshot(self, path: Path) -> bytes:
        """A PNG of the whole page, written to ``path``."""
        metrics = self._call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = base64.b64decode(
            self._call("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True})["data"]
        )
        path.write_bytes(data)
        return data

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
