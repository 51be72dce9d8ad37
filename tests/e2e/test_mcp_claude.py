"""`cortex mcp` as the real Claude Code and the real MCP Inspector run it.

- Claude Code starts the server from the project's `.mcp.json` (written by
  `cortex init --claude`) and from the plugin's `.mcp.json`; the fake model
  calls `cortex_search` and `cortex_remember` (granted with --allowedTools);
  the results are right and the new memory is a file.
- The Inspector CLI (`mcp-inspector --cli`): tools/list, resources/list and
  a tools/call of every cortex tool; a bad call answers `isError: true`.
  (Inspector 2.12.0 then exits 5 and says `tool_is_error` on stderr; 0.15.0
  exited 0 either way. The field is what is checked.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import pytest

from cortex.memory import parse
from tests.e2e.harness import INSPECTOR, Sandbox, require

DECISION = "We use SQLite, not Postgres, for the local cache: no server to run"
NEW = "The exchange-rate feed publishes at 16:00 CET; fetch after 16:05"
TOOLS = {"cortex_search", "cortex_search_decisions", "cortex_get_memory", "cortex_get_plan", "cortex_get_recent",
         "cortex_get_status", "cortex_get_briefing", "cortex_remember", "cortex_forget", "cortex_restore", "cortex_feedback",
         "cortex_inbox", "cortex_link", "cortex_suspects"}


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in request.get("messages", []) if isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    return content if isinstance(content, str) else "\n".join(c.get("text", "") for c in content or [])


@pytest.mark.parametrize("install", ["settings", "plugin"])
def test_claude_code_calls_cortex_tools(install: str, sandbox: Callable[[str], Sandbox]) -> None:
    box = sandbox(f"mcp-{install}")
    box.cortex("init", "--claude") if install == "settings" else box.cortex("init")
    if install == "settings":
        server = json.loads((box.project / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]["cortex"]
        assert server["args"][-1] == "mcp"
    decision_id = json.loads(box.cortex("remember", DECISION, "--type", "decision", "--json").stdout)["id"]
    prefix = "mcp__cortex__" if install == "settings" else "mcp__plugin_cortex_cortex__"
    script = [
        {"tool_use": {"name": prefix + "cortex_search", "input": {"query": "which database for the cache?"}}},
        {"tool_use": {"name": prefix + "cortex_remember",
                      "input": {"text": NEW, "type": "gotcha", "priority": 7, "tags": ["rates"]}}},
        {"text": "Found it and saved the feed time."},
    ]
    run = box.claude("what do we use for the cache, and note the feed time", script=script,
                     plugin=install == "plugin", args=("--allowedTools", prefix.rstrip("_")))
    assert run.rc == 0, run.stderr
    name = "cortex" if install == "settings" else "plugin:cortex:cortex"
    servers = {s["name"]: s["status"] for s in run.init["mcp_servers"]}
    assert servers.get(name) == "connected", servers
    assert {prefix + t for t in TOOLS} <= set(run.init["tools"])
    requests = run.api.main_requests
    assert len(requests) == 3
    search = tool_results(requests[1])[-1]
    assert not search.get("is_error"), search
    assert decision_id in result_text(search)
    saved = tool_results(requests[2])[-1]
    assert not saved.get("is_error"), saved
    saved_data = json.loads(result_text(saved))
    memory = box.project / ".cortex" / "memories" / "gotcha"
    files = list(memory.glob(f"*-{saved_data['id']}.md"))
    assert len(files) == 1
    made = parse(files[0].read_text(encoding="utf-8"), files[0])
    assert made.title.startswith("The exchange-rate feed publishes at 16:00 CET") and made.priority == 7
    assert made.tags == ["rates"]
    assert ("Stop", 0) in [(line.get("hook_name"), line.get("exit_code")) for line in run.hook_events()]
    # The Stop hook and SessionEnd's detached capture read the same session: the gotcha saved through MCP is
    # not captured a second time from the transcript.
    deadline = time.monotonic() + 15
    while sum(" stop: " in line for line in box.log_lines()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # the Stop hook's line, then the one of SessionEnd's detached capture
    assert sum(" stop: " in line for line in box.log_lines()) >= 2, box.log_lines()
    twins = [p for p in (box.project / ".cortex" / "memories").rglob("*.md")
             if "exchange-rate feed publishes at 16:00" in p.read_text(encoding="utf-8")]
    assert twins == files, twins


# ---------------------------------------------------------------- the MCP Inspector CLI


def inspector(box: Sandbox, *args: str, rc: int = 0) -> dict[str, Any]:
    """The Inspector's JSON answer; its stderr error object (as "stderr") when it has no answer on stdout."""
    command = [str(require(INSPECTOR)), "--cli", sys.executable, "-m", "cortex", "mcp", *args]
    done = subprocess.run(command, cwd=box.project, capture_output=True, text=True, env=box.env(), timeout=120)
    assert done.returncode == rc, (args, done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    if not done.stdout.strip():
        return {"stderr": json.loads(done.stderr.strip().splitlines()[-1])}
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def served(sandbox: Callable[[str], Sandbox]) -> tuple[Sandbox, str, str]:
    box = sandbox("inspector")
    box.cortex("init")
    decision = json.loads(box.cortex("remember", DECISION, "--type", "decision", "--json").stdout)["id"]
    doomed = json.loads(box.cortex("remember", "Temporary note about the old importer", "--json").stdout)["id"]
    return box, decision, doomed


def test_inspector_lists_tools_and_resources(served: tuple[Sandbox, str, str]) -> None:
    box, _decision, _doomed = served
    with ThreadPoolExecutor(max_workers=2) as pool:
        tools, resources = pool.map(lambda method: inspector(box, "--method", method), ["tools/list", "resources/list"])
    names = {tool["name"] for tool in tools["tools"]}
    assert names == TOOLS
    assert all(tool.get("inputSchema", {}).get("type") == "object" for tool in tools["tools"])
    uris = {resource["uri"] for resource in resources["resources"]}
    assert {"cortex://status", "cortex://decisions", "cortex://plan"} <= uris


def test_inspector_calls_every_tool(served: tuple[Sandbox, str, str]) -> None:
    box, decision, doomed = served
    calls: dict[str, list[str]] = {
        "cortex_search": ["query=which database for the cache?"],
        "cortex_search_decisions": ["query=cache storage"],
        "cortex_get_memory": [f"id={decision}"],
        "cortex_get_plan": [],
        "cortex_get_recent": ["limit=5"],
        "cortex_get_status": [],
        "cortex_get_briefing": [],
        "cortex_remember": [f"text={NEW}", "type=gotcha"],
        "cortex_forget": [f"id={doomed}"],
        "cortex_restore": [f"id={decision}"],  # an active memory: returned unchanged
        "cortex_feedback": [f"id={decision}", "rating=up"],
        "cortex_inbox": [],  # nothing proposed here: an empty list
        "cortex_link": [f"id={decision}", f"other={doomed}", "rel=relates_to"],
        "cortex_suspects": [],  # nothing here contradicts: an empty queue
    }
    assert set(calls) == TOOLS

    def call(item: tuple[str, list[str]]) -> tuple[str, dict[str, Any]]:
        tool, arguments = item
        extra = [part for argument in arguments for part in ("--tool-arg", argument)]
        return tool, inspector(box, "--method", "tools/call", "--tool-name", tool, *extra)

    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = dict(pool.map(call, calls.items()))
    for tool, answer in answers.items():
        assert answer.get("isError") is False, (tool, answer)
    text = {tool: "\n".join(c.get("text", "") for c in answer["content"]) for tool, answer in answers.items()}
    assert decision in text["cortex_search"] and decision in text["cortex_search_decisions"]
    assert DECISION in text["cortex_get_memory"]
    assert DECISION in text["cortex_get_briefing"]
    titles = {parse(p.read_text(encoding="utf-8"), p).title: parse(p.read_text(encoding="utf-8"), p)
              for p in box.memories()}
    assert any(title.startswith("The exchange-rate feed") for title in titles)
    assert next(m for m in titles.values() if m.id == doomed).status == "archived"
    assert json.loads(text["cortex_suspects"]) == {"pairs": []}
    assert "hot" in text["cortex_feedback"] or "cold" in text["cortex_feedback"]  # the rating came back with its tier


def test_inspector_bad_calls(served: tuple[Sandbox, str, str]) -> None:
    box, _decision, _doomed = served
    calls = [(["--tool-name", "cortex_get_memory", "--tool-arg", "id=abcdef123456"], 5),  # no such memory
             (["--tool-name", "cortex_nope"], 5),  # no such tool
             (["--tool-name", "cortex_get_memory", "--tool-arg", "id=zz"], 1)]  # arguments the schema refuses
    with ThreadPoolExecutor(max_workers=3) as pool:
        missing, unknown, invalid = pool.map(lambda c: inspector(box, "--method", "tools/call", *c[0], rc=c[1]), calls)
    assert missing["isError"] is True and "no memory with id 'abcdef123456'" in missing["content"][0]["text"]
    assert unknown["stderr"]["error"]["code"] == "tool_not_found"
    assert "id:" in invalid["stderr"]["error"]["message"]
