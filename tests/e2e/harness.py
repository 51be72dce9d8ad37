"""Driving the real `claude` CLI (pinned in tests/e2e/package.json) against cortex, offline.

A `Sandbox` is one temporary HOME and one temporary git repository; its
`claude()` runs `claude -p` there against a fresh `FakeAPI`, with
`CLAUDE_CODE_MAX_RETRIES=0` and a timeout, and returns a `Run`: the exit
status, the stream-json lines, the transcript Claude Code wrote, and every
request the model received. Hooks call the cortex of the Python running the
tests (its bin folder is first on PATH).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fakeapi import FakeAPI
from tests.helpers import REPO_ROOT, make_repo

E2E_DIR = Path(__file__).resolve().parent
CLAUDE_VERSION = json.loads((E2E_DIR / "package.json").read_text(encoding="utf-8"))["dependencies"]["@anthropic-ai/claude-code"]
CLAUDE = E2E_DIR / "node_modules" / ".bin" / "claude"
INSPECTOR = E2E_DIR / "node_modules" / ".bin" / "mcp-inspector"
PLUGIN_DIR = REPO_ROOT / "cortex" / "claude_plugin"
RUN_TIMEOUT = 90


def require(binary: Path) -> Path:
    """The pinned binary, or a failure that says how to install it (a skip would hide a broken CI)."""
    if not binary.exists():
        pytest.fail(f"{binary} is missing: install the pinned tools with `npm ci --prefix tests/e2e` "
                    "(.ci/run does this)", pytrace=False)
    return binary


def claude_version() -> str:
    out = subprocess.run([str(require(CLAUDE)), "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.split()[0] if out.stdout else ""


@dataclass
class Run:
    """One finished `claude -p` run."""

    rc: int
    lines: list[dict[str, Any]]
    stderr: str
    api: FakeAPI
    home: Path
    debug_log: Path
    seconds: float
    session_id: str = ""
    transcript: Path | None = None

    @property
    def init(self) -> dict[str, Any]:
        return next(line for line in self.lines if line.get("type") == "system" and line.get("subtype") == "init")

    @property
    def results(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("type") == "result"]

    def records(self) -> list[dict[str, Any]]:
        """The transcript Claude Code wrote for this session."""
        if self.transcript is None or not self.transcript.exists():
            return []
        out = []
        for raw in self.transcript.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                pass
        return out

    def hook_runs(self, event: str | None = None) -> list[dict[str, Any]]:
        """Hook attachments Claude Code recorded (`hook_success`, `hook_non_blocking_error`, …), optionally for one event."""
        found = []
        for record in self.records():
            attachment = record.get("attachment")
            if record.get("type") == "attachment" and isinstance(attachment, dict) and \
                    str(attachment.get("type", "")).startswith("hook_") and "hookEvent" in attachment:
                if event is None or attachment.get("hookEvent") == event:
                    found.append(attachment)
        return found

    def hook_events(self) -> list[dict[str, Any]]:
        """stream-json `hook_response` lines (all events with --include-hook-events)."""
        return [line for line in self.lines if line.get("type") == "system" and line.get("subtype") == "hook_response"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for block in content:
            if isinstance(block, dict):
                if block.get("type") == "text":
                    out.append(str(block.get("text", "")))
                elif block.get("type") == "tool_result":
                    out.append(_text(block.get("content")))
        return "\n".join(out)
    return ""


def request_text(request: dict[str, Any]) -> str:
    """All text of one Messages API request: system prompt and every message, tool results included."""
    parts = []
    system = request.get("system")
    if isinstance(system, list):
        parts += [str(block.get("text", "")) for block in system if isinstance(block, dict)]
    elif isinstance(system, str):
        parts.append(system)
    parts += [_text(message.get("content")) for message in request.get("messages", [])]
    return "\n".join(parts)


def system_messages(request: dict[str, Any]) -> list[str]:
    """The `role: system` messages in `messages[]`: where Claude Code puts hook additionalContext."""
    return [_text(m.get("content")) for m in request.get("messages", []) if m.get("role") == "system"]


def _parse(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _converse(command: list[str], cwd: Path, env: dict[str, str], turns: list[str],
              timeout: float) -> tuple[int, str, str]:
    """Several prompts in one `claude -p --input-format stream-json` process, each sent once the previous
    turn's `result` line is out (as an SDK client does; sent all at once, a later prompt joins the running turn)."""
    import queue
    import threading

    child = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    err: list[str] = []
    stdout, stderr = child.stdout, child.stderr

    def pump() -> None:
        for raw in stdout:
            lines.put(raw)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    threading.Thread(target=lambda: err.append(stderr.read()), daemon=True).start()
    deadline = time.monotonic() + timeout
    out: list[str] = []
    try:
        for number, turn in enumerate(turns):
            child.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": turn}}) + "\n")
            child.stdin.flush()
            if number == len(turns) - 1:
                break
            while True:
                raw = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                if raw is None:
                    break
                out.append(raw)
                if '"result"' in raw and _parse(raw).get("type") == "result":
                    break
        child.stdin.close()
        while (raw := lines.get(timeout=max(0.1, deadline - time.monotonic()))) is not None:
            out.append(raw)
        rc = child.wait(timeout=max(0.1, deadline - time.monotonic()))
    except Exception as exc:
        child.kill()
        child.wait(timeout=10)
        raise AssertionError(f"claude did not finish {len(turns)} turns in {timeout} s: {exc!r}\n{''.join(out)[-3000:]}")
    time.sleep(0.05)
    return rc, "".join(out), "".join(err)


@dataclass
class Sandbox:
    """A temporary HOME and a git repository to run the real Claude Code in."""

    root: Path
    project: Path = field(init=False)
    home: Path = field(init=False)
    runs: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. CORTEX_SERVE_IDLE for a benchmark

    def __post_init__(self) -> None:
        self.home = self.root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.project = make_repo(self.root / "project")

    def env(self) -> dict[str, str]:
        """The process environment for cortex and claude: nothing inherited from a surrounding Claude Code or
        cortex session, this venv's bin first on PATH so hooks run the cortex under test."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CLAUDE", "ANTHROPIC", "CORTEX_", "GIT_", "MCP_")) and k not in ("HOME",)
               and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}  # the fake API is on loopback
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        bin_dir = str(Path(sys.executable).parent)
        env.update({
            "HOME": str(self.home),
            "CORTEX_HOME": str(self.home / ".cortex"),
            "CORTEX_SERVE_IDLE": "4",
            "PATH": bin_dir + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
            "GIT_AUTHOR_NAME": "Cortex Test", "GIT_AUTHOR_EMAIL": "test@example.com",
            "GIT_COMMITTER_NAME": "Cortex Test", "GIT_COMMITTER_EMAIL": "test@example.com",
        })
        env.update(self.extra_env)
        return env

    def cortex(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([sys.executable, "-m", "cortex", *args], cwd=self.project, input=input,
                                capture_output=True, text=True, env=self.env(), timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"cortex {' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result

    def claude(self, prompt: str | None = None, *, script: list[Any] | None = None,
               plugin: bool = False, args: tuple[str, ...] = (), stdin_turns: list[str] | None = None,
               base_url: str | None = None, timeout: float = RUN_TIMEOUT,
               env: dict[str, str] | None = None) -> Run:
        """One `claude -p` run in the project against a fresh fake API (or `base_url`)."""
        require(CLAUDE)
        self.runs += 1
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        debug = logs / f"debug-{self.runs}.log"
        api = FakeAPI(script, log=logs / f"api-{self.runs}.jsonl", max_requests=40, idle=timeout)
        command = [str(CLAUDE), "-p"]
        if prompt is not None:
            command.append(prompt)
        command += ["--output-format", "stream-json", "--verbose", "--include-hook-events",
                    "--debug-file", str(debug)]
        if stdin_turns is not None:
            command += ["--input-format", "stream-json"]
        if plugin:
            command += ["--plugin-dir", str(PLUGIN_DIR)]
        command += list(args)
        run_env = self.env()
        run_env.update({
            "ANTHROPIC_API_KEY": "sk-ant-fake",
            "ANTHROPIC_BASE_URL": base_url or api.url,
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
            # -p connects MCP servers in the background by default: a busy machine (two test workers) sees the
            # server still "pending" at init. Wait for it, as a session that needs its tools would.
            "MCP_CONNECTION_NONBLOCKING": "false",
            # How long it waits for a server to start: a loaded machine starts a Python server slowly.
            "MCP_TIMEOUT": "120000", "MCP_CONNECT_TIMEOUT_MS": "120000",
        })
        run_env.update(env or {})
        started = time.monotonic()
        with api:
            if stdin_turns is None:
                try:
                    done = subprocess.run(command, cwd=self.project, capture_output=True, text=True, env=run_env,
                                          timeout=timeout)
                except subprocess.TimeoutExpired as exc:
                    raise AssertionError(f"claude did not finish in {timeout} s: {command}\n{exc.stdout!r}\n{exc.stderr!r}")
                rc, stdout, stderr = done.returncode, done.stdout, done.stderr
            else:
                rc, stdout, stderr = _converse(command, self.project, run_env, stdin_turns, timeout)
        seconds = time.monotonic() - started
        lines = [line for line in map(_parse, stdout.splitlines()) if line]
        run = Run(rc, lines, stderr, api, self.home, debug, seconds)
        run.session_id = next((str(line["session_id"]) for line in lines if line.get("session_id")), "")
        if run.session_id:
            found = list((self.home / ".claude" / "projects").glob(f"*/{run.session_id}.jsonl"))
            run.transcript = found[0] if found else None
        return run

    def memories(self, kind: str | None = None) -> list[Path]:
        folder = self.project / ".cortex" / "memories"
        return sorted((folder / kind).glob("*.md") if kind else folder.glob("*/*.md"))

    def log_lines(self) -> list[str]:
        path = self.project / ".cortex" / "state" / "cortex.log"
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []
