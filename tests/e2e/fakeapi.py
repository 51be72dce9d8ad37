"""A fake Anthropic Messages API on 127.0.0.1, for driving the real `claude` CLI offline.

Standard library only. Each instance binds a fresh loopback port, answers the
main agent's requests (those that carry `tools`) from a script, logs every
request body, and stops by itself after `max_requests` requests or `idle`
seconds without one, so a test that forgets it leaves nothing running.

Script entries, one per main-agent request in order (later requests, and
requests without tools such as compaction, get plain text):

    {"text": "..."}                                   a text reply
    {"tool_use": {"name": "Write", "input": {...}}}   a tool call
    {"content": [{"type": "text", ...}, {"type": "tool_use", ...}]}   several blocks
    {"error": 500}                                    an API error with that HTTP status

Run it alone: `python tests/e2e/fakeapi.py SCRIPT.json` prints the port and
serves until idle.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULT_REPLY = "fake-reply: done"


class FakeAPI:
    """`with FakeAPI(script) as api:` then point ANTHROPIC_BASE_URL at `api.url`; `api.requests` is the log."""

    def __init__(self, script: list[Any] | None = None, log: Path | None = None,
                 max_requests: int = 40, idle: float = 30.0) -> None:
        self.script = list(script or [])
        self.log = log
        self.max_requests = max_requests
        self.idle = idle
        self.requests: list[dict[str, Any]] = []  # every POST: {"path", "body"}
        self._main = 0
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    # -- lifecycle

    def start(self) -> FakeAPI:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        threading.Thread(target=self._watchdog, daemon=True).start()
        return self

    def stop(self) -> None:
        if not self._stopped.is_set():
            self._stopped.set()
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _watchdog(self) -> None:
        while not self._stopped.wait(0.25):
            with self._lock:
                done = len(self.requests) >= self.max_requests or time.monotonic() - self._last > self.idle
            if done:
                self.stop()

    # -- what the model receives

    @property
    def main_requests(self) -> list[dict[str, Any]]:
        """The bodies of the main agent's turn requests (they carry tools)."""
        return [r["body"] for r in self.requests if r["path"].startswith("/v1/messages") and r["body"].get("tools")]

    # -- replies

    def _record(self, path: str, body: dict[str, Any]) -> None:
        with self._lock:
            self._last = time.monotonic()
            self.requests.append({"path": path, "body": body})
            if self.log is not None:
                with open(self.log, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"t": time.time(), "path": path, "body": body}) + "\n")

    def _entry(self, body: dict[str, Any]) -> dict[str, Any]:
        """The script entry for this request (taken once per main-agent request)."""
        if not body.get("tools"):
            return {"text": DEFAULT_REPLY}
        with self._lock:
            index, self._main = self._main, self._main + 1
        return self.script[index] if index < len(self.script) else {"text": DEFAULT_REPLY}

    def _failure(self, body: dict[str, Any]) -> int:
        """The HTTP status to fail this request with (0: answer it); consumes the entry only when failing."""
        with self._lock:
            index = self._main
        if body.get("tools") and index < len(self.script) and "error" in self.script[index]:
            return int(self._entry(body)["error"])
        return 0

    def _reply(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        entry = self._entry(body)
        if "content" in entry:
            blocks = [dict(block) for block in entry["content"]]
        elif "tool_use" in entry:
            blocks = [{"type": "tool_use", **entry["tool_use"]}]
        else:
            blocks = [{"type": "text", "text": entry["text"]}]
        for block in blocks:
            if block["type"] == "tool_use":
                block.setdefault("id", "toolu_" + uuid.uuid4().hex[:20])
        stop = "tool_use" if any(block["type"] == "tool_use" for block in blocks) else "end_turn"
        return blocks, stop


def _handler(api: FakeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _json(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            api._record(self.path, {})
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not here"}})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            if not isinstance(body, dict):
                body = {}
            api._record(self.path, body)
            if "count_tokens" in self.path:
                return self._json(200, {"input_tokens": 10})
            if not self.path.startswith("/v1/messages"):
                return self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not here"}})
            failure = api._failure(body)
            if failure:
                return self._json(failure, {"type": "error", "error": {"type": "api_error", "message": "fake failure"}})
            blocks, stop = api._reply(body)
            model = body.get("model", "claude-fake")
            message_id = "msg_" + uuid.uuid4().hex[:20]
            usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                     "cache_read_input_tokens": 0}
            if not body.get("stream"):
                return self._json(200, {"id": message_id, "type": "message", "role": "assistant", "model": model,
                                        "content": blocks, "stop_reason": stop, "stop_sequence": None,
                                        "usage": usage})
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()

            def event(name: str, data: dict[str, Any]) -> None:
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

            event("message_start", {"type": "message_start", "message": {
                "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}})
            for i, block in enumerate(blocks):
                if block["type"] == "text":
                    event("content_block_start", {"type": "content_block_start", "index": i,
                                                  "content_block": {"type": "text", "text": ""}})
                    event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                  "delta": {"type": "text_delta", "text": block["text"]}})
                else:
                    event("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                        "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})
                    event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                        "type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
                event("content_block_stop", {"type": "content_block_stop", "index": i})
            event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                    "usage": {"output_tokens": 5}})
            event("message_stop", {"type": "message_stop"})
            self.close_connection = True

    return Handler


if __name__ == "__main__":
    import sys

    given = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")) if len(sys.argv) > 1 else []
    fake = FakeAPI(given, log=Path("fakeapi.jsonl"))
    print(f"fakeapi listening on {fake.url}", flush=True)
    fake.start()
    fake._stopped.wait()
