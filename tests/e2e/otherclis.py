"""Driving the real OpenAI Codex CLI and Google Gemini CLI (pinned in tests/e2e/package.json) offline.

The same idea as tests/e2e/harness.py for Claude Code: a `Sandbox` (temporary
HOME and git repository), a fresh fake model API on loopback per run
(tests/e2e/fakeothers.py), a timeout on every run, and a `CliRun` with the
exit status, the JSON lines the CLI printed, the transcript it wrote and every
request the model received. The traps ../shared/other-assistants-offline.md
lists are set off here: Codex runs with `--disable unbounded_connection_retries`
(else an unreachable API hangs it) and `--dangerously-bypass-hook-trust --trust`
(else its hooks are silently skipped); Gemini with `general.maxAttempts: 1`,
`retryFetchErrors: false`, session cleanup off, a trusted workspace and
`--approval-mode yolo` (else it offers no MCP tools headless); both with TMPDIR
inside the sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.fakeothers import FakeGeminiAPI, FakeResponsesAPI
from tests.e2e.harness import E2E_DIR, Sandbox, require

_PINNED = json.loads((E2E_DIR / "package.json").read_text(encoding="utf-8"))["dependencies"]
CODEX_VERSION = _PINNED["@openai/codex"]
GEMINI_VERSION = _PINNED["@google/gemini-cli"]
CODEX = E2E_DIR / "node_modules" / ".bin" / "codex"
GEMINI = E2E_DIR / "node_modules" / ".bin" / "gemini"
RUN_TIMEOUT = 60


def cli_version(binary: Path) -> str:
    out = subprocess.run([str(require(binary)), "--version"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HOME": os.environ.get("HOME", "/tmp"), "GEMINI_CLI_NO_RELAUNCH": "true"})
    words = out.stdout.split()
    return words[-1] if words else ""


@dataclass
class CliRun:
    """One finished `codex exec` or `gemini -p` run."""

    rc: int
    stdout: str
    stderr: str
    api: Any
    seconds: float
    lines: list[dict[str, Any]] = field(default_factory=list)
    session_id: str = ""
    transcript: Path | None = None

    def records(self) -> list[dict[str, Any]]:
        if self.transcript is None or not self.transcript.exists():
            return []
        out = []
        for raw in self.transcript.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                pass
        return out


def _env(box: Sandbox) -> dict[str, str]:
    env = {k: v for k, v in box.env().items() if not k.startswith(("CODEX", "OPENAI", "GEMINI", "GOOGLE"))}
    tmp = box.root / "tmp"
    tmp.mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmp)
    return env


def _run(command: list[str], box: Sandbox, env: dict[str, str], timeout: float) -> tuple[int, str, str, float]:
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=box.project, capture_output=True, text=True, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{command[0]} did not finish in {timeout} s: {command}\n{exc.stdout!r}\n{exc.stderr!r}")
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def _lines(stdout: str) -> list[dict[str, Any]]:
    out = []
    for raw in stdout.splitlines():
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


# ---------------------------------------------------------------- Codex CLI


def codex_config(box: Sandbox, url: str) -> None:
    """The user's ~/.codex/config.toml: the fake provider, and this project trusted (as `codex exec --trust` does)."""
    folder = box.home / ".codex"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(
        'model = "gpt-fake"\nmodel_provider = "fake"\n\n[model_providers.fake]\nname = "Fake"\n'
        f'base_url = "{url}/v1"\nwire_api = "responses"\nenv_key = "FAKE_OPENAI_KEY"\n'
        'request_max_retries = 0\nstream_max_retries = 0\n\n'
        # Its sandbox makes /tmp writable and guards a `.git` in every writable root by creating one: an empty
        # /tmp/.git turned every later "outside a repository" test into a project's.
        '[sandbox_workspace_write]\nexclude_slash_tmp = true\nexclude_tmpdir_env_var = true\n\n'
        f'[projects."{box.project}"]\ntrust_level = "trusted"\n', encoding="utf-8")


def codex(box: Sandbox, prompt: str, script: list[Any] | None = None, *, resume: str | None = None,
          args: tuple[str, ...] = (), timeout: float = RUN_TIMEOUT) -> CliRun:
    require(CODEX)
    box.runs += 1
    logs = box.root / "logs"
    logs.mkdir(exist_ok=True)
    with FakeResponsesAPI(script, log=logs / f"codex-api-{box.runs}.jsonl", idle=timeout) as api:
        codex_config(box, api.url)
        command = [str(CODEX), "exec"]
        if resume:
            command += ["resume", resume]
        command += ["--json", "--dangerously-bypass-hook-trust", "--disable", "unbounded_connection_retries",
                    "--skip-git-repo-check", *args, prompt]
        if not resume:
            command[2:2] = ["--trust", "--sandbox", "workspace-write"]
        env = _env(box) | {"FAKE_OPENAI_KEY": "sk-fake"}
        rc, stdout, stderr, seconds = _run(command, box, env, timeout)
    run = CliRun(rc, stdout, stderr, api, seconds, _lines(stdout))
    run.session_id = next((str(line["thread_id"]) for line in run.lines if line.get("type") == "thread.started"),
                          resume or "")
    if run.session_id:
        found = sorted((box.home / ".codex" / "sessions").glob(f"*/*/*/rollout-*-{run.session_id}.jsonl"))
        run.transcript = found[0] if found else None
    return run


# ---------------------------------------------------------------- Gemini CLI


def gemini_settings(box: Sandbox) -> None:
    folder = box.home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"maxAttempts": 1, "retryFetchErrors": False, "sessionRetention": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}, indent=1), encoding="utf-8")


def gemini(box: Sandbox, prompt: str, script: list[Any] | None = None, *, args: tuple[str, ...] = (),
           timeout: float = RUN_TIMEOUT) -> CliRun:
    require(GEMINI)
    box.runs += 1
    logs = box.root / "logs"
    logs.mkdir(exist_ok=True)
    gemini_settings(box)
    with FakeGeminiAPI(script, log=logs / f"gemini-api-{box.runs}.jsonl", idle=timeout) as api:
        command = [str(GEMINI), "-p", prompt, "--approval-mode", "yolo", "-o", "stream-json", *args]
        env = _env(box) | {"GEMINI_API_KEY": "fake-key", "GOOGLE_GEMINI_BASE_URL": api.url,
                           "GEMINI_CLI_TRUST_WORKSPACE": "true", "GEMINI_CLI_NO_RELAUNCH": "true"}
        rc, stdout, stderr, seconds = _run(command, box, env, timeout)
    run = CliRun(rc, stdout, stderr, api, seconds, _lines(stdout))
    run.session_id = next((str(line["session_id"]) for line in run.lines if line.get("session_id")), "")
    if run.session_id:
        found = sorted((box.home / ".gemini" / "tmp").glob(f"*/chats/session-*-{run.session_id[:8]}.jsonl"))
        run.transcript = found[0] if found else None
    return run


def request_text(body: dict[str, Any]) -> str:
    """Every string in a request body, joined: what the model would read (either API)."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk({k: v for k, v in body.items() if k != "tools"})
    return "\n".join(out)
