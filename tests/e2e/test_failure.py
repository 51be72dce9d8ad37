"""When things go wrong around a real Claude Code session, the session ends normally and cortex loses nothing.

- The API is unreachable, or fails in the middle of a turn: Claude Code fires
  StopFailure instead of Stop (cortex registers no StopFailure hook); the
  SessionEnd hook's detached capture still keeps what the turn did.
- cortex's own state is garbage (corrupt caches, cursor, briefing cache, a
  malformed memory file): every hook exits 0 and the turn is captured.
- A hook given garbage on stdin exits 0, prints nothing, and logs a line.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pytest

from cortex.memory import parse
from tests.e2e.harness import PLUGIN_DIR, Run, Sandbox

GOTCHA = "The payments sandbox rejects amounts under 50 cents"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_log(box: Sandbox, count: int, seconds: float = 10.0) -> list[str]:
    """The SessionEnd hook hands capture to a detached process: wait for its log line."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lines = box.log_lines()
        if len(lines) >= count:
            return lines
        time.sleep(0.1)
    return box.log_lines()


def assert_every_hook_exited_0(run: Run) -> None:
    outcomes = [(line.get("hook_name"), line.get("exit_code")) for line in run.hook_events()]
    assert outcomes and all(code == 0 for _name, code in outcomes), outcomes
    debug = run.debug_log.read_text(encoding="utf-8")
    ended = [line for line in debug.splitlines() if "SessionEnd:other [" in line and "completed with status 0" in line]
    assert any("cortex hook session-end]" in line or "cortex-hook session-end]" in line for line in ended), ended


def test_api_unreachable(sandbox: Callable[[str], Sandbox]) -> None:
    box = sandbox("unreachable")
    box.cortex("init", "--claude")
    run = box.claude("is anyone there?", base_url=f"http://127.0.0.1:{closed_port()}")
    assert run.rc == 1  # Claude Code's own exit status for a failed API call
    assert run.results[-1]["is_error"] and "API Error" in run.results[-1]["result"]
    names = [line.get("hook_name") for line in run.hook_events()]
    assert "Stop" not in names  # StopFailure fires instead
    assert_every_hook_exited_0(run)
    lines = wait_for_log(box, 1)
    assert any(" stop: " in line for line in lines), lines  # SessionEnd's detached capture logged its line
    assert box.memories() == []  # Claude Code's "API Error" line is not the model's words: nothing to remember


def test_api_fails_mid_turn(sandbox: Callable[[str], Sandbox]) -> None:
    box = sandbox("midturn")
    box.cortex("init", "--claude")
    script = [
        {"content": [{"type": "text", "text": f"Adding the limit.\n\n[MEMORY: gotcha: {GOTCHA}]"},
                     {"type": "tool_use", "name": "Write",
                      "input": {"file_path": str(box.project / "limits.py"), "content": "MINIMUM_CENTS = 50\n"}}]},
        {"error": 500},
    ]
    run = box.claude("add the payment limits", script=script, args=("--permission-mode", "acceptEdits"))
    assert run.rc == 1 and "API Error: 500" in run.results[-1]["result"]
    assert (box.project / "limits.py").exists()
    assert "Stop" not in [line.get("hook_name") for line in run.hook_events()]
    assert_every_hook_exited_0(run)
    wait_for_log(box, 1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not box.memories():
        time.sleep(0.1)
    found = [parse(p.read_text(encoding="utf-8"), p) for p in box.memories()]
    # The tag's memory is what the turn said; a reply of tags alone makes no "Done: <the request>" note (issue 40).
    assert [m.title for m in found if m.type == "gotcha"] == [GOTCHA]
    assert not any("API Error" in m.title + m.body for m in found)


def test_garbage_state_session_ends_normally(sandbox: Callable[[str], Sandbox]) -> None:
    box = sandbox("garbage-state")
    box.cortex("init", "--claude")
    box.cortex("remember", "Every money amount is an integer number of cents", "--type", "pattern")
    state, cache = box.project / ".cortex" / "state", box.project / ".cortex" / "cache"
    state.mkdir(exist_ok=True)
    (state / "briefing.json").write_text("{not json", encoding="utf-8")
    (state / "cursors").mkdir(exist_ok=True)
    (state / "cursors" / "0000000000000000.json").write_text("\x00\x01garbage", encoding="utf-8")
    for path in cache.rglob("*"):
        if path.is_file():
            path.write_bytes(b"\x00garbage\xff" * 10)
    malformed = box.project / ".cortex" / "memories" / "decision" / "broken-0123456789ab.md"
    malformed.parent.mkdir(parents=True, exist_ok=True)
    malformed.write_text("---\nid: [unclosed\ntype: decision\n---\nbody\n", encoding="utf-8")
    run = box.claude("note the sandbox limit", script=[{"text": f"Noted.\n\n[MEMORY: gotcha: {GOTCHA}]"}])
    assert run.rc == 0, run.stderr
    assert_every_hook_exited_0(run)
    titles = [parse(p.read_text(encoding="utf-8"), p).title for p in box.memories() if p != malformed]
    assert GOTCHA in titles
    assert malformed.read_text(encoding="utf-8") == "---\nid: [unclosed\ntype: decision\n---\nbody\n"


GARBAGE = ["\x00\xff not json at all", "[1, 2, 3]", '{"cwd": 5, "transcript_path": {"a": 1}, "prompt": []}',
           '{"hook_event_name": "Stop", "transcript_path": "TRANSCRIPT"}']
EVENTS = ["session-start", "prompt", "stop", "pre-compact", "session-end"]


@pytest.mark.parametrize("via", ["cortex", "plugin"])
def test_hooks_given_garbage(via: str, sandbox: Callable[[str], Sandbox]) -> None:
    box = sandbox(f"garbage-{via}")
    box.cortex("init")
    junk = box.root / "junk.jsonl"
    junk.write_bytes(b"\x00\x01\x02{\"type\": \"assistant\", \"message\": \n[[[\n\xff\xfe\n")
    env = box.env()

    def call(case: tuple[str, str]) -> tuple[str, str, subprocess.CompletedProcess[bytes]]:
        event, garbage = case
        data = garbage.replace("TRANSCRIPT", str(junk)).encode("utf-8", errors="surrogateescape")
        command = [str(PLUGIN_DIR / "scripts" / "cortex-hook"), event] if via == "plugin" else \
            [sys.executable, "-m", "cortex", "hook", event]
        done = subprocess.run(command, cwd=box.project, input=data, capture_output=True, env=env, timeout=60)
        return event, garbage, done

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(call, [(e, g) for e in EVENTS for g in GARBAGE]))
    for event, garbage, done in results:
        assert done.returncode == 0, (event, garbage, done.stderr)
        if not garbage.startswith("{"):
            assert done.stdout == b"", (event, garbage, done.stdout)
        elif done.stdout:  # an object with nonsense fields may still get the briefing, as valid hook JSON
            assert json.loads(done.stdout)["hookSpecificOutput"]["hookEventName"] in ("SessionStart", "UserPromptSubmit")
    lines = box.log_lines()
    for event in EVENTS:
        name = "stop" if event == "pre-compact" else event
        assert any(f" {name}: " in line for line in lines), (event, lines)
    assert box.memories() == []
