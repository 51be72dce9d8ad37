"""`cortex init --claude`: merged into .claude/settings.json without losing anything, idempotent, removable."""

from __future__ import annotations

import json

from tests.helpers import cortex

EXISTING = {
    "permissions": {"allow": ["Bash(npm test)"]},
    "model": "sonnet",
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "./scripts/notify.sh", "timeout": 5}]}],
        "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "ruff format"}]}],
    },
}


def test_init_claude_keeps_other_hooks_and_keys_and_runs_twice_the_same(project):
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(EXISTING), encoding="utf-8")
    out = cortex("init", "--claude", cwd=project).stdout
    assert "added the Stop hook" in out
    data = json.loads(settings.read_text(encoding="utf-8"))
    assert data["permissions"] == EXISTING["permissions"] and data["model"] == "sonnet"
    assert data["hooks"]["PostToolUse"] == EXISTING["hooks"]["PostToolUse"]
    stop_commands = [h["command"] for g in data["hooks"]["Stop"] for h in g["hooks"]]
    assert stop_commands[0] == "./scripts/notify.sh" and stop_commands[1].endswith("cortex hook stop")
    assert [h["command"] for g in data["hooks"]["SessionStart"] for h in g["hooks"]][0].endswith("hook session-start")
    rules = (project / ".claude" / "rules" / "cortex-memory.md").read_text(encoding="utf-8")
    assert "[MEMORY: decision:" in rules
    before = settings.read_bytes()
    assert "already installed" in cortex("init", "--claude", cwd=project).stdout
    assert settings.read_bytes() == before
    cortex("uninstall", "--claude", cwd=project)
    assert json.loads(settings.read_text(encoding="utf-8")) == EXISTING
    assert not (project / ".claude" / "rules" / "cortex-memory.md").exists()


def test_the_installed_stop_hook_command_captures(project, tmp_path):
    cortex("init", "--claude", cwd=project)
    data = json.loads((project / ".claude" / "settings.json").read_text(encoding="utf-8"))
    command = data["hooks"]["Stop"][0]["hooks"][0]["command"]
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "assistant", "uuid": "a", "message": {"id": "m", "role": "assistant", "content": [
        {"type": "text", "text": "[MEMORY: decision: Tokens live in the session cookie, not localStorage]"}]}}) + "\n",
        encoding="utf-8")
    import os
    import subprocess
    import sys

    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    payload = json.dumps({"session_id": "s", "transcript_path": str(transcript), "cwd": str(project)})
    result = subprocess.run(command, shell=True, cwd=project, input=payload, capture_output=True, text=True, env=env)
    assert result.returncode == 0 and result.stdout == ""
    titles = [json.loads(cortex("list", "--json", cwd=project).stdout)[0]["title"]]
    assert titles == ["Tokens live in the session cookie, not localStorage"]


def test_broken_settings_json_is_a_clear_error(project):
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{ nope", encoding="utf-8")
    result = cortex("init", "--claude", cwd=project, check=False)
    assert result.returncode == 1 and "settings.json: not valid JSON" in result.stderr
    assert settings.read_text(encoding="utf-8") == "{ nope"
