"""The Claude Code plugin in the repository: well-formed, hooks that fail open, commands that call real commands."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from cortex.cli import main
from tests.helpers import REPO_ROOT

PLUGIN = REPO_ROOT / "cortex" / "claude_plugin"


def test_marketplace_points_at_the_plugin_and_the_manifest_is_valid():
    market = json.loads((REPO_ROOT / ".claude-plugin" / "marketplace.json").read_text(encoding="utf-8"))
    [entry] = market["plugins"]
    assert (REPO_ROOT / entry["source"]).resolve() == PLUGIN.resolve()
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text(encoding="utf-8"))
    assert manifest["name"] == "cortex" and re.fullmatch(r"[a-z][a-z0-9-]*", manifest["name"])


def test_hook_commands_quote_the_plugin_root_and_name_real_events():
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text(encoding="utf-8"))["hooks"]
    events = {"SessionStart": "session-start", "UserPromptSubmit": "prompt", "Stop": "stop", "PreCompact": "pre-compact",
              "SessionEnd": "session-end", "PreToolUse": "pre-tool-use", "SubagentStart": "subagent-start",
              "SubagentStop": "subagent-stop"}
    assert set(hooks) == set(events)
    hook_command = main.commands["hook"]
    choices = set(hook_command.params[0].type.choices)
    for event, groups in hooks.items():
        command = groups[0]["hooks"][0]["command"]
        assert command.startswith('"${CLAUDE_PLUGIN_ROOT}"/scripts/cortex-hook ')
        assert command.split()[-1] == events[event] and events[event] in choices


def test_the_hook_script_fails_open_without_cortex_and_runs_it_with(tmp_path):
    script = PLUGIN / "scripts" / "cortex-hook"
    empty = subprocess.run([str(script), "stop"], input="{}", capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin"}, timeout=30)
    assert empty.returncode == 0 and empty.stdout == ""
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}", CORTEX_NESTED="1")
    ran = subprocess.run([str(script), "stop"], input="{}", capture_output=True, text=True, env=env, timeout=60)
    assert ran.returncode == 0 and ran.stdout == ""


def test_slash_commands_only_call_commands_that_exist():
    files = sorted((PLUGIN / "commands").glob("*.md"))
    assert {f.stem for f in files} == {"remember", "recall", "forget", "inspect", "index-code", "consolidate",
                                       "cortex-feedback"}
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert text.startswith("---\n") and "description:" in text.split("---", 2)[1]
        for name in re.findall(r"Bash\(cortex ([a-z-]+)", text) + re.findall(r"`cortex ([a-z-]+)", text):
            assert name in main.commands, f"{path.name} calls cortex {name}, which does not exist"


def test_the_plugin_declares_the_mcp_server_through_a_script_that_runs_cortex_mcp(tmp_path):
    servers = json.loads((PLUGIN / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    server = servers["cortex"]
    assert server["type"] == "stdio" and server["command"] == "sh"
    assert server["args"] == ["${CLAUDE_PLUGIN_ROOT}/scripts/cortex-mcp"]
    script = PLUGIN / "scripts" / "cortex-mcp"
    assert os.access(script, os.X_OK)
    missing = subprocess.run(["sh", str(script)], input="", capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin"}, timeout=30)
    assert missing.returncode == 1 and missing.stdout == "" and "cortex command is not on PATH" in missing.stderr
    # With cortex on PATH it is the MCP server: it answers an initialize request on stdout.
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}", CLAUDE_PROJECT_DIR=str(tmp_path))
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
    ran = subprocess.run(["sh", str(script)], input=request + "\n", capture_output=True, text=True, env=env, timeout=60)
    answer = json.loads(ran.stdout.splitlines()[0])
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "cortex"
