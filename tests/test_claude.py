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
    from cortex.store import Store

    titles = [m.title for m in Store.locate(project).list()]
    assert titles == ["Tokens live in the session cookie, not localStorage"]


def test_broken_settings_json_is_a_clear_error(project):
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{ nope", encoding="utf-8")
    result = cortex("init", "--claude", cwd=project, check=False)
    assert result.returncode == 1 and "settings.json: not valid JSON" in result.stderr
    assert settings.read_text(encoding="utf-8") == "{ nope"


MCP_EXISTING = {"mcpServers": {"db": {"type": "stdio", "command": "db-mcp", "args": ["--readonly"]}}, "note": "kept"}


def test_init_claude_declares_the_mcp_server_keeping_other_servers_and_uninstall_restores(project):
    config = project / ".mcp.json"
    config.write_text(json.dumps(MCP_EXISTING), encoding="utf-8")
    out = cortex("init", "--claude", cwd=project).stdout
    assert "added the cortex MCP server" in out
    data = json.loads(config.read_text(encoding="utf-8"))
    assert data["note"] == "kept" and data["mcpServers"]["db"] == MCP_EXISTING["mcpServers"]["db"]
    server = data["mcpServers"]["cortex"]
    assert server["type"] == "stdio" and server["args"][-1] == "mcp"
    assert server["command"] == "cortex" or server["args"] == ["-m", "cortex", "mcp"]
    before = config.read_bytes()
    assert "already installed" in cortex("init", "--claude", cwd=project).stdout
    assert config.read_bytes() == before
    assert "removed the cortex MCP server" in cortex("uninstall", "--claude", cwd=project).stdout
    assert json.loads(config.read_text(encoding="utf-8")) == MCP_EXISTING


def test_mcp_json_made_by_init_is_removed_by_uninstall_and_a_foreign_cortex_server_is_left(project):
    cortex("init", "--claude", cwd=project)
    assert (project / ".mcp.json").exists()
    cortex("uninstall", "--claude", cwd=project)
    assert not (project / ".mcp.json").exists()
    foreign = {"mcpServers": {"cortex": {"type": "http", "url": "https://example.com/cortex"}}}
    (project / ".mcp.json").write_text(json.dumps(foreign), encoding="utf-8")
    assert "left the other 'cortex' server" in cortex("init", "--claude", cwd=project).stdout
    cortex("uninstall", "--claude", cwd=project)
    assert json.loads((project / ".mcp.json").read_text(encoding="utf-8")) == foreign


def test_broken_mcp_json_is_a_clear_error(project):
    (project / ".mcp.json").write_text("{ nope", encoding="utf-8")
    result = cortex("init", "--claude", cwd=project, check=False)
    assert result.returncode == 1 and ".mcp.json: not valid JSON" in result.stderr
    assert not (project / ".claude" / "settings.json").exists()
    # valid JSON of a shape cortex cannot merge into: refused before anything is written too
    (project / ".mcp.json").write_text('{"mcpServers": null}', encoding="utf-8")
    result = cortex("init", "--claude", cwd=project, check=False)
    assert result.returncode == 1 and ".mcp.json: mcpServers is not a JSON object" in result.stderr
    assert not (project / ".claude" / "settings.json").exists()
    # a user's own server named cortex, run by a cortex-something command, is not ours to remove
    own = {"mcpServers": {"cortex": {"type": "stdio", "command": "cortex-notes", "args": ["serve", "mcp"]}}}
    (project / ".mcp.json").write_text(json.dumps(own), encoding="utf-8")
    cortex("init", "--claude", cwd=project)
    cortex("uninstall", "--claude", cwd=project)
    assert json.loads((project / ".mcp.json").read_text(encoding="utf-8")) == own
