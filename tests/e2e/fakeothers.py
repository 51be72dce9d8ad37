"""Fake model APIs on 127.0.0.1 for the real Codex CLI (OpenAI Responses API) and Gemini CLI (Gemini API).

Standard library only, like tests/e2e/fakeapi.py (the Anthropic one): each
instance binds a fresh loopback port, answers the main agent's requests from a
script, logs every request body, and stops by itself after `max_requests`
requests or `idle` seconds without one. Every request gets an answer (a script
that ran out answers plain text), so neither CLI sits retrying.

Script entries, one per main-agent request in order:

    {"text": "..."}                                    a text reply
    {"shell": "echo hi"}                               a shell tool call (Codex exec_command, Gemini run_shell_command)
    {"mcp": ["cortex", "cortex_search", {...}]}        an MCP tool call (server, tool, arguments)
    {"error": 500}                                     an HTTP error

../shared/other-assistants-offline.md (§1.2, §2.2) describes the wire
protocols these speak.
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


class _FakeServer:
    def __init__(self, script: list[Any] | None = None, log: Path | None = None, max_requests: int = 40,
                 idle: float = 60.0) -> None:
        self.script = list(script or [])
        self.log = log
        self.max_requests = max_requests
        self.idle = idle
        self.requests: list[dict[str, Any]] = []
        self._main = 0
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stopped = threading.Event()

    def __enter__(self) -> _FakeServer:
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        threading.Thread(target=self._watchdog, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._stopped.is_set():
            self._stopped.set()
            self._server.shutdown()
            self._server.server_close()

    def _watchdog(self) -> None:
        while not self._stopped.wait(0.25):
            with self._lock:
                done = len(self.requests) >= self.max_requests or time.monotonic() - self._last > self.idle
            if done:
                self.__exit__()

    def record(self, path: str, body: dict[str, Any]) -> None:
        with self._lock:
            self._last = time.monotonic()
            self.requests.append({"path": path, "body": body})
            if self.log is not None:
                with open(self.log, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"t": time.time(), "path": path, "body": body}) + "\n")

    def next_entry(self, offered: set[str] | None = None) -> dict[str, Any]:
        """The next script entry, taken. An MCP call whose server's tools this request does not offer yet is
        not taken: Codex sends its first request while MCP servers are still starting, and a model only calls
        a tool it was given, so the fake waits a second with a shell call and asks again."""
        with self._lock:
            entry = self.script[self._main] if self._main < len(self.script) else {"text": DEFAULT_REPLY}
            if offered is not None and "mcp" in entry and f"mcp__{entry['mcp'][0]}" not in offered:
                return {"shell": "sleep 1"}
            self._main += 1
        return entry

    def answer(self, handler: BaseHTTPRequestHandler, path: str, body: dict[str, Any]) -> None:
        raise NotImplementedError


class FakeResponsesAPI(_FakeServer):
    """OpenAI's Responses API as Codex CLI 0.169.0 calls it: `POST /v1/responses`, answered as an SSE stream."""

    @property
    def main_requests(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["path"].endswith("/responses")]

    def answer(self, handler: BaseHTTPRequestHandler, path: str, body: dict[str, Any]) -> None:
        if not path.endswith("/responses"):
            return _json(handler, 404, {"error": {"message": "not here"}})
        last_user = _last_user_text(body)
        entry = {"text": "Summary: the session so far."} if "CONTEXT CHECKPOINT COMPACTION" in last_user \
            else self.next_entry({str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)})
        if "error" in entry:
            return _json(handler, int(entry["error"]), {"error": {"message": "fake failure"}})
        if "shell" in entry:
            item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:12], "call_id": "call_" + uuid.uuid4().hex[:12],
                    "name": "exec_command", "arguments": json.dumps({"cmd": entry["shell"]}), "status": "completed"}
        elif "mcp" in entry:
            server, tool, args = entry["mcp"]
            item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:12], "call_id": "call_" + uuid.uuid4().hex[:12],
                    "namespace": f"mcp__{server}", "name": tool, "arguments": json.dumps(args), "status": "completed"}
        else:
            item = {"type": "message", "role": "assistant", "id": "msg_" + uuid.uuid4().hex[:12], "status": "completed",
                    "content": [{"type": "output_text", "text": entry["text"], "annotations": []}]}
        response_id = "resp_" + uuid.uuid4().hex[:16]
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
        _sse_start(handler)
        _sse(handler, {"type": "response.created", "response": {"id": response_id}}, named=True)
        _sse(handler, {"type": "response.output_item.added", "output_index": 0, "item": item}, named=True)
        _sse(handler, {"type": "response.output_item.done", "output_index": 0, "item": item}, named=True)
        _sse(handler, {"type": "response.completed", "response": {"id": response_id, "usage": usage}}, named=True)
        handler.close_connection = True


class FakeGeminiAPI(_FakeServer):
    """The Gemini API as Gemini CLI 0.61.0 calls it: the router's `:generateContent` (answered with a complexity
    score) and the main agent's `:streamGenerateContent?alt=sse` (answered from the script)."""

    @property
    def main_requests(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if "streamGenerateContent" in r["path"] and r["body"].get("tools")]

    def answer(self, handler: BaseHTTPRequestHandler, path: str, body: dict[str, Any]) -> None:
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
        if ":generateContent" in path and not body.get("tools"):  # the router, or a side request (titles, …)
            text = json.dumps({"complexity_reasoning": "a fake", "complexity_score": 1}) \
                if "complexity" in json.dumps(body.get("generationConfig", {})) else DEFAULT_REPLY
            return _json(handler, 200, {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                                        "finishReason": "STOP", "index": 0}],
                                        "usageMetadata": usage, "modelVersion": "gemini-fake"})
        if "streamGenerateContent" not in path:
            return _json(handler, 404, {"error": {"code": 404, "message": "not here", "status": "NOT_FOUND"}})
        entry = self.next_entry() if body.get("tools") else {"text": DEFAULT_REPLY}
        if "error" in entry:
            return _json(handler, int(entry["error"]), {"error": {"code": int(entry["error"]), "message": "fake failure",
                                                                  "status": "INTERNAL"}})
        if "shell" in entry:
            part: dict[str, Any] = {"functionCall": {"name": "run_shell_command", "args": {"command": entry["shell"]},
                                                     "id": "call_" + uuid.uuid4().hex[:8]}}
        elif "mcp" in entry:
            server, tool, args = entry["mcp"]
            part = {"functionCall": {"name": f"mcp_{server}_{tool}", "args": args, "id": "call_" + uuid.uuid4().hex[:8]}}
        else:
            part = {"text": entry["text"]}
        chunk = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": usage, "modelVersion": "gemini-fake", "responseId": uuid.uuid4().hex[:12]}
        _sse_start(handler)
        handler.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        handler.wfile.flush()
        handler.close_connection = True


def _last_user_text(body: dict[str, Any]) -> str:
    for item in reversed(body.get("input") or []):
        if isinstance(item, dict) and item.get("role") == "user":
            return json.dumps(item.get("content"))
    return ""


def _json(handler: BaseHTTPRequestHandler, code: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    handler.send_response(code)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _sse_start(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("cache-control", "no-cache")
    handler.send_header("connection", "close")
    handler.end_headers()


def _sse(handler: BaseHTTPRequestHandler, data: dict[str, Any], named: bool = False) -> None:
    head = f"event: {data['type']}\n" if named else ""
    handler.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())
    handler.wfile.flush()


def _handler(api: _FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            api.record(self.path, {})
            _json(self, 404, {"error": {"message": "not here"}})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            body = body if isinstance(body, dict) else {}
            api.record(self.path, body)
            api.answer(self, self.path, body)

    return Handler
