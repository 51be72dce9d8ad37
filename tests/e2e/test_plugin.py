"""The plugin as the real Claude Code sees it: `claude plugin validate --strict`, and its slash commands in a session."""

from __future__ import annotations

import json
import subprocess
from typing import Callable

from cortex.memory import parse
from tests.e2e.harness import CLAUDE, PLUGIN_DIR, Sandbox, request_text, require, system_messages
from tests.helpers import REPO_ROOT

DECISION = "We use SQLite, not Postgres, for the local cache: no server to run"
GOTCHA = "The staging database resets every night at 02:00 UTC"


def validate(target: str, box: Sandbox) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(require(CLAUDE)), "plugin", "validate", "--strict", "--json", target],
                          capture_output=True, text=True, env=box.env(), timeout=60)


def test_plugin_and_marketplace_validate_strict(sandbox: Callable[[str], Sandbox]) -> None:
    box = sandbox("validate")
    plugin = validate(str(PLUGIN_DIR), box)
    assert plugin.returncode == 0, plugin.stdout + plugin.stderr
    report = json.loads(plugin.stdout)
    assert report["success"] and report["manifest"]["errors"] == [] and report["manifest"]["warnings"] == []
    hooks = report["provides"]["hooks"]
    assert {h["event"] for h in hooks} == {"SessionStart", "UserPromptSubmit", "Stop", "PreCompact", "SessionEnd",
                                           "PreToolUse", "SubagentStart", "SubagentStop"}
    assert all(h["command"].startswith('"${CLAUDE_PLUGIN_ROOT}"/') for h in hooks), hooks
    assert set(report["provides"]["commands"]) >= {"cortex:remember", "cortex:recall", "cortex:forget", "cortex:inspect"}
    marketplace = validate(str(REPO_ROOT), box)
    assert marketplace.returncode == 0, marketplace.stdout + marketplace.stderr


def test_slash_commands_reach_cortex(sandbox: Callable[[str], Sandbox]) -> None:
    box = sandbox("slash")
    box.cortex("init")
    decision_id = json.loads(box.cortex("remember", DECISION, "--type", "decision", "--json").stdout)["id"]
    script = [
        {"text": "Here is what cortex knows."},
        {"tool_use": {"name": "Bash", "input": {"command": f"cortex remember --type gotcha --json - <<'EOF'\n{GOTCHA}\nEOF",
                                                "description": "Save the memory"}}},
        {"text": "Saved."},
        {"tool_use": {"name": "Bash", "input": {"command": 'cortex recall --json "which database for the cache"',
                                                "description": "Search memory"}}},
        {"text": f"SQLite (`{decision_id}`)."},
        {"tool_use": {"name": "Bash", "input": {"command": f"cortex forget {decision_id}", "description": "Archive"}}},
        {"text": "Archived."},
    ]
    run = box.claude(None, script=script, plugin=True, stdin_turns=[
        "/cortex:inspect", f"/cortex:remember {GOTCHA}", "/cortex:recall which database for the cache",
        f"/cortex:forget {decision_id}"])
    assert run.rc == 0, run.stderr
    assert len(run.results) == 4 and not any(r.get("is_error") for r in run.results)
    plugin = next(p for p in run.init["plugins"] if p["name"] == "cortex")
    assert plugin["path"] == str(PLUGIN_DIR)
    assert {"cortex:inspect", "cortex:remember", "cortex:recall", "cortex:forget"} <= set(run.init["slash_commands"])
    requests = run.api.main_requests
    # /cortex:inspect: the command's !`cortex status` and !`cortex briefing` output is what the model reads.
    inspect = request_text(requests[0])
    assert "memories: 1" in inspect and DECISION in inspect and "<command-name>/cortex:inspect</command-name>" in inspect
    # /cortex:remember: the model's `cortex remember` ran under the command's allowed-tools, and wrote the file.
    saved = json.loads(_tool_result(requests[2]))
    assert saved["title"] == GOTCHA and saved["type"] == "gotcha"
    # /cortex:recall: `cortex recall --json` answered with the decision.
    hits = json.loads(_tool_result(requests[4]))
    assert hits[0]["id"] == decision_id
    # /cortex:forget: archived, the file kept.
    assert "archived" in _tool_result(requests[6]).lower(), _tool_result(requests[6])
    memories = {m.id: m for m in (parse(p.read_text(encoding="utf-8"), p) for p in box.memories())}
    assert memories[decision_id].status == "archived"
    assert memories[saved["id"]].title == GOTCHA
    # Slash commands are not prompts: no prompt-time recall was added to them.
    assert not any("UserPromptSubmit hook additional context" in t for r in requests for t in system_messages(r))


def _tool_result(request: dict) -> str:
    last = request["messages"][-1]
    block = next(b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    assert not block.get("is_error"), block
    content = block["content"]
    return content if isinstance(content, str) else "\n".join(c.get("text", "") for c in content)
