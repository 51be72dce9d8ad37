"""Codex CLI, Gemini CLI and Cursor: `cortex init --codex/--gemini/--cursor`, their hook payloads, their transcripts.

Real parts: the `cortex` command as a subprocess with the hook payloads these
assistants really sent (tests/data/codex, tests/data/gemini: written by the
pinned CLIs offline; tests/data/cursor: published by Cursor users, see its
SOURCES.md), their real transcripts, a real git repository and the real MCP
server. The CLIs themselves run in tests/e2e/test_codex.py and test_gemini.py;
Cursor's agent cannot be installed here, so its cells of the README's support
table rest on the tests below.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from cortex.capture import events
from cortex.memory import parse
from cortex.transcripts import normalise
from tests.helpers import cortex, cortex_command, hook, remember, wait_for

DATA = Path(__file__).parent / "data"
MARK = "<!-- cortex:injected -->"


def payload(assistant: str, variant: str, **changes: Any) -> dict[str, Any]:
    """A real hook payload of tests/data/<assistant>/hook-payloads.jsonl, with `changes` applied."""
    for raw in (DATA / assistant / "hook-payloads.jsonl").read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        if line.get("variant", line.get("hook_event_name")) == variant:
            return {**line.get("stdin", line), **changes}
    raise KeyError(variant)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def memories(project: Path) -> dict[str, Any]:
    folder = project / ".cortex" / "memories"
    return {m.title: m for m in (parse(p.read_text(encoding="utf-8"), p) for p in folder.glob("*/*.md"))}


def no_machine_paths(*files: Path) -> None:
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert str(path.parent.parent) not in text and sys.executable not in text, path
        assert "/tmp/" not in text and "/dev/shm/" not in text, path  # no temp folder (tests/conftest.py puts theirs in RAM)


# ---------------------------------------------------------------- cortex init / uninstall


def test_init_codex_merges_runs_twice_the_same_and_uninstall_restores(repo):
    hooks = repo / ".codex" / "hooks.json"
    config = repo / ".codex" / "config.toml"
    hooks.parent.mkdir()
    theirs = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "./notify.sh", "timeout": 5}]}],
                        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}]}}
    hooks.write_text(json.dumps(theirs, indent=1) + "\n", encoding="utf-8")
    config.write_text('# my settings\nmodel = "o3"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n', encoding="utf-8")
    (repo / "AGENTS.md").write_text("# Agents\n\nRun `make test` before a commit.\n", encoding="utf-8")
    before = {p: p.read_bytes() for p in (hooks, config, repo / "AGENTS.md")}
    out = cortex("init", "--codex", cwd=repo).stdout
    assert "added the SessionStart hook" in out and "trust" in out  # says hooks stay off until trusted
    data = json.loads(hooks.read_text(encoding="utf-8"))
    assert data["hooks"]["PreToolUse"][0] == theirs["hooks"]["PreToolUse"][0]  # theirs kept; cortex's beside it
    assert data["hooks"]["PreToolUse"][1]["matcher"] == "apply_patch|Edit|Write"
    stop = [h for g in data["hooks"]["Stop"] for h in g["hooks"]]
    assert stop[0]["command"] == "./notify.sh" and stop[1]["command"].endswith("exec cortex hook stop")
    wanted = {"SessionStart": "session-start", "UserPromptSubmit": "prompt", "Stop": "stop",
              "PreCompact": "pre-compact", "SessionEnd": "session-end", "PreToolUse": "pre-tool-use"}
    for event, name in wanted.items():
        handler = [h for g in data["hooks"][event] for h in g["hooks"] if "cortex hook" in h["command"]]
        assert len(handler) == 1 and handler[0]["command"].endswith(f"cortex hook {name}")
        assert isinstance(handler[0]["timeout"], int) and handler[0]["timeout"] <= 60  # seconds, for Codex
    parsed = tomllib.loads(config.read_text(encoding="utf-8"))
    assert parsed["model"] == "o3" and parsed["mcp_servers"]["docs"] == {"command": "docs-mcp"}
    assert parsed["mcp_servers"]["cortex"]["command"] == "cortex" and parsed["mcp_servers"]["cortex"]["args"] == ["mcp"]
    assert parsed["mcp_servers"]["cortex"]["default_tools_approval_mode"] == "approve"
    agents = (repo / "AGENTS.md").read_text(encoding="utf-8")
    assert agents.startswith("# Agents\n\nRun `make test`") and "[MEMORY: decision:" in agents
    no_machine_paths(hooks, config)
    written = {p: p.read_bytes() for p in before}
    assert "already installed" in cortex("init", "--codex", cwd=repo).stdout
    assert {p: p.read_bytes() for p in before} == written
    cortex("uninstall", "--codex", cwd=repo)
    assert json.loads(hooks.read_text(encoding="utf-8")) == theirs
    assert config.read_bytes() == before[config] and (repo / "AGENTS.md").read_bytes() == before[repo / "AGENTS.md"]


def test_init_gemini_merges_runs_twice_the_same_and_uninstall_restores(repo):
    settings = repo / ".gemini" / "settings.json"
    settings.parent.mkdir()
    theirs = {"ui": {"theme": "GitHub"}, "mcpServers": {"docs": {"command": "docs-mcp"}},
              "hooks": {"BeforeTool": [{"matcher": "run_shell_command", "hooks": [
                  {"type": "command", "name": "guard", "command": "./guard.sh", "timeout": 5000}]}]}}
    settings.write_text(json.dumps(theirs), encoding="utf-8")
    out = cortex("init", "--gemini", cwd=repo).stdout
    assert "added the BeforeAgent hook" in out and "GEMINI.md" in out
    data = json.loads(settings.read_text(encoding="utf-8"))
    assert data["ui"] == theirs["ui"] and data["mcpServers"]["docs"] == theirs["mcpServers"]["docs"]
    assert data["hooks"]["BeforeTool"] == theirs["hooks"]["BeforeTool"]
    assert data["mcpServers"]["cortex"] == {"command": "cortex", "args": ["mcp"]}
    for event, name in {"SessionStart": "session-start", "BeforeAgent": "prompt", "AfterAgent": "stop",
                        "SessionEnd": "session-end"}.items():
        [handler] = [h for g in data["hooks"][event] for h in g["hooks"]]
        assert handler["command"].endswith(f"cortex hook {name}") and handler["timeout"] >= 1000  # milliseconds
    assert "PreCompress" not in data["hooks"]  # fires before every model call; AfterAgent captures each turn
    assert "[MEMORY: decision:" in (repo / "GEMINI.md").read_text(encoding="utf-8")
    no_machine_paths(settings)
    written = settings.read_bytes()
    assert "already installed" in cortex("init", "--gemini", cwd=repo).stdout
    assert settings.read_bytes() == written
    cortex("uninstall", "--gemini", cwd=repo)
    assert json.loads(settings.read_text(encoding="utf-8")) == theirs
    assert not (repo / "GEMINI.md").exists()


def test_init_cursor_merges_into_a_real_hooks_file_and_uninstall_restores(repo):
    hooks = repo / ".cursor" / "hooks.json"
    hooks.parent.mkdir()
    shutil.copy(DATA / "cursor" / "hooks-lorehq-lore.json", hooks)
    theirs = json.loads(hooks.read_text(encoding="utf-8"))
    cortex("init", "--cursor", cwd=repo)
    data = json.loads(hooks.read_text(encoding="utf-8"))
    assert data["version"] == 1
    start = [h["command"] for h in data["hooks"]["sessionStart"]]
    assert start[0] == "node .cursor/hooks/session-init.js" and start[1].endswith("exec cortex hook session-start")
    for event in ("beforeReadFile", "afterFileEdit", "afterShellExecution"):
        assert data["hooks"][event] == theirs["hooks"][event]
    for event, name in {"stop": "stop", "preCompact": "pre-compact", "sessionEnd": "session-end"}.items():
        assert [h["command"].rsplit(" ", 1)[-1] for h in data["hooks"][event]] == [name]
    assert "beforeSubmitPrompt" not in data["hooks"]  # it cannot add context
    server = json.loads((repo / ".cursor" / "mcp.json").read_text(encoding="utf-8"))["mcpServers"]["cortex"]
    assert server["command"] == "cortex" and server["args"] == ["mcp"]
    rules = (repo / ".cursor" / "rules" / "cortex-memory.mdc").read_text(encoding="utf-8")
    assert rules.startswith("---\n") and "alwaysApply: true" in rules and "[MEMORY: decision:" in rules
    no_machine_paths(hooks, repo / ".cursor" / "mcp.json")
    written = hooks.read_bytes()
    assert "already installed" in cortex("init", "--cursor", cwd=repo).stdout
    assert hooks.read_bytes() == written
    cortex("uninstall", "--cursor", cwd=repo)
    assert json.loads(hooks.read_text(encoding="utf-8")) == theirs
    assert not (repo / ".cursor" / "mcp.json").exists() and not (repo / ".cursor" / "rules" / "cortex-memory.mdc").exists()


@pytest.mark.parametrize("flag, path, content", [
    ("--codex", ".codex/config.toml", "model = \n"),
    ("--gemini", ".gemini/settings.json", "{not json"),
    ("--cursor", ".cursor/mcp.json", '{"mcpServers": []}'),
])
def test_a_broken_file_stops_the_install_naming_it_and_writes_nothing(repo, flag, path, content):
    (repo / path).parent.mkdir()
    (repo / path).write_text(content, encoding="utf-8")
    result = cortex("init", flag, cwd=repo, check=False)
    assert result.returncode != 0
    assert path.split("/")[-1] in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert (repo / path).read_text(encoding="utf-8") == content
    assert sorted(p.name for p in (repo / path).parent.iterdir()) == [Path(path).name]
    assert not (repo / "AGENTS.md").exists() and not (repo / "GEMINI.md").exists()


def test_uninstall_after_init_leaves_the_repository_as_it_was(repo):
    before = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if ".git" not in p.parts)
    cortex("init", "--codex", "--gemini", "--cursor", cwd=repo)
    cortex("uninstall", "--codex", "--gemini", "--cursor", cwd=repo)
    after = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*")
                   if ".git" not in p.parts and ".cortex" not in p.parts)
    assert after == before
    assert "no Codex CLI integration" in cortex("uninstall", "--codex", cwd=repo).stdout


def test_a_rules_section_without_its_end_stops_the_install_before_the_settings(repo):
    from cortex.assistants import RULES_BEGIN

    (repo / "GEMINI.md").write_text(f"# Ours\n\n{RULES_BEGIN}\nhalf a section\n", encoding="utf-8")
    result = cortex("init", "--gemini", cwd=repo, check=False)
    assert result.returncode != 0 and "GEMINI.md" in result.stderr and "cortex:rules:end" in result.stderr
    assert not (repo / ".gemini").exists()


def test_an_installed_hook_on_a_machine_without_cortex_skips_with_one_line(repo):
    cortex("init", "--codex", "--gemini", "--cursor", cwd=repo)
    commands = [
        json.loads((repo / ".codex" / "hooks.json").read_text())["hooks"]["Stop"][0]["hooks"][0]["command"],
        json.loads((repo / ".gemini" / "settings.json").read_text())["hooks"]["AfterAgent"][0]["hooks"][0]["command"],
        json.loads((repo / ".cursor" / "hooks.json").read_text())["hooks"]["stop"][0]["command"],
    ]
    for command, config in zip(commands, (".codex/hooks.json", ".gemini/settings.json", ".cursor/hooks.json")):
        done = subprocess.run(["sh", "-c", command], cwd=repo, input="{}", capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(repo)})
        assert done.returncode == 0 and done.stdout == ""
        assert "cortex: not installed" in done.stderr and config in done.stderr


# ---------------------------------------------------------------- real hook payloads, real `cortex hook`


def test_codex_session_start_and_prompt_payloads_get_the_briefing_and_recall(project):
    remember(project, "Every API response carries an X-Request-Id header for tracing", type="pattern", pinned=True)
    remember(project, "Invoices are numbered per shop, without gaps, by the billing service", type="decision")
    # The prompt first: recall leaves out what the session's briefing already carried.
    prompt = payload("codex", "UserPromptSubmit", cwd=str(project), prompt="how are invoices numbered per shop?")
    done = hook("prompt", project, prompt)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)["hookSpecificOutput"]
    assert answer["hookEventName"] == "UserPromptSubmit" and "Invoices are numbered per shop" in answer["additionalContext"]
    start = hook("session-start", project, payload("codex", "SessionStart/startup", cwd=str(project)))
    assert start.returncode == 0, start.stderr
    answer = json.loads(start.stdout)["hookSpecificOutput"]
    assert answer["hookEventName"] == "SessionStart" and "X-Request-Id" in answer["additionalContext"]


def test_gemini_before_agent_recalls_for_the_prompt_not_the_briefing_in_front_of_it(project):
    remember(project, "Invoices are numbered per shop, without gaps, by the billing service", type="decision")
    remember(project, "Kubernetes pods of the ingest cluster restart nightly at two", type="context")
    real = payload("gemini", "BeforeAgent")
    assert real["prompt"].startswith("<hook_context>") and real["prompt"].endswith("run a shell command")
    prompt = real | {"cwd": str(project), "prompt": "<hook_context>cortex briefing: Kubernetes pods of the ingest "
                                                           "cluster restart nightly</hook_context>\n\nhow are invoices numbered?"}
    done = hook("prompt", project, prompt)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)["hookSpecificOutput"]
    assert answer["hookEventName"] == "BeforeAgent"
    assert "Invoices are numbered per shop" in answer["additionalContext"]
    assert "Kubernetes" not in answer["additionalContext"]


def test_gemini_after_agent_captures_the_reply_from_prompt_response(project, tmp_path):
    chat = tmp_path / "session-2026-11-23T23-49-10776852.jsonl"
    shutil.copy(DATA / "gemini" / "session-shell-and-mcp-tool.jsonl", chat)
    reply = "Ran it.\n\n[MEMORY: gotcha: The probe MCP server stores only the last item it was given]"
    done = hook("stop", project, payload("gemini", "AfterAgent/stop_hook_active=False", cwd=str(project),
                                         transcript_path=str(chat), prompt_response=reply))
    assert done.returncode == 0 and done.stdout == ""
    gotcha = memories(project).get("The probe MCP server stores only the last item it was given")
    assert gotcha is not None and gotcha.source["session"] == "10776852-eb61-4572-96c7-6715c54b5ebc"


def test_cursor_session_start_answers_additional_context_for_its_workspace(project, tmp_path):
    remember(project, "Every API response carries an X-Request-Id header for tracing", type="pattern", pinned=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    start = payload("cursor", "sessionStart", workspace_roots=[str(project)])
    assert "cwd" not in start
    for _ in range(2):  # the full hook, then the fast path from the briefing cache: the same shape
        done = hook("session-start", elsewhere, start)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert list(answer) == ["additional_context"] and "X-Request-Id" in answer["additional_context"]
        assert answer["additional_context"].startswith(MARK)


def _cursor_transcript(home: Path, project: Path, conversation: str, nested: bool = False) -> Path:
    """The real Cursor transcript, where Cursor's CLI keeps it for `project` (the IDE: one folder deeper)."""
    slug = "".join(c if c.isalnum() else "-" for c in str(project).lstrip("/"))
    folder = home / ".cursor" / "projects" / slug / "agent-transcripts"
    path = folder / conversation / f"{conversation}.jsonl" if nested else folder / f"{conversation}.jsonl"
    path.parent.mkdir(parents=True)
    shutil.copy(DATA / "cursor" / "transcript-tdexixi-code-with-ai-contest.jsonl", path)
    return path


@pytest.mark.parametrize("nested", [False, True])
def test_cursor_stop_finds_the_transcript_cursor_did_not_name_and_captures(project, isolated_env, nested):
    stop = payload("cursor", "stop", workspace_roots=[str(project)])
    assert stop["transcript_path"] is None
    _cursor_transcript(isolated_env, project, stop["conversation_id"], nested)
    done = hook("stop", project, stop)
    assert done.returncode == 0 and done.stdout == ""
    log = (project / ".cortex" / "state" / "cortex.log").read_text(encoding="utf-8")
    assert "stop: 6 records" in log, log
    found = list(memories(project).values())
    assert found and all(m.source["session"] == stop["conversation_id"] for m in found)
    # the reply's lasting part; the request restated is not kept (issue 40)
    assert any("python -m streamlit" in m.body and "请帮我修复" not in m.body for m in found), [m.body for m in found]


def test_cursor_session_end_captures_detached(project, isolated_env):
    end = payload("cursor", "sessionEnd", workspace_roots=[str(project)])
    _cursor_transcript(isolated_env, project, end["conversation_id"])
    done = hook("session-end", project, end)
    assert done.returncode == 0 and done.stdout == ""
    assert wait_for(lambda: bool(memories(project)), 60), (project / ".cortex" / "state").iterdir()


def test_a_cursor_conversation_id_cannot_point_outside_the_transcripts(project, isolated_env):
    stop = payload("cursor", "stop", workspace_roots=[str(project)], conversation_id="../../../../etc/passwd")
    done = hook("stop", project, stop)
    assert done.returncode == 0 and memories(project) == {}


def test_the_cursor_mcp_server_finds_the_workspace_from_another_folder(repo, isolated_env):
    from anyio.from_thread import start_blocking_portal

    from tests.test_mcp import connect, server_env

    cortex("init", "--cursor", cwd=repo)
    remember(repo, "Invoices are numbered per shop, without gaps", type="decision")
    server = json.loads((repo / ".cursor" / "mcp.json").read_text(encoding="utf-8"))["mcpServers"]["cortex"]
    # What Cursor does with the entry: ${workspaceFolder} expanded, the server started wherever Cursor is.
    env = server_env(isolated_env) | {k: v.replace("${workspaceFolder}", str(repo)) for k, v in server["env"].items()}
    env["PATH"] = f"{Path(cortex_command()[0]).parent}:{env['PATH']}"
    elsewhere = isolated_env / "elsewhere"
    elsewhere.mkdir()
    with start_blocking_portal() as portal:
        with connect(portal, server["command"], server["args"], elsewhere, env) as session:
            result = portal.call(session.call_tool, "cortex_search", {"query": "how are invoices numbered?"})
            assert "Invoices are numbered per shop" in result.content[0].text


# ---------------------------------------------------------------- transcripts


def test_a_codex_rollout_reads_as_prompt_tool_and_reply_without_hook_context():
    items = events(normalise(records(DATA / "codex" / "rollout-exec-shell-tool-hooks.jsonl")))
    assert [(e.kind, e.tool) for e in items] == [("human", ""), ("tool", "Bash"), ("text", "")]
    human, tool, text = items
    assert human.text == "run a shell command"
    assert tool.tool_input == {"command": "echo hi-from-codex > out.txt && cat README.md"}
    assert "Process exited with code 0" in tool.result and not tool.failed
    assert tool.cwd == "/home/dev/demo/cx/proj"
    assert text.text == "fake-reply: ran the command"
    mcp = events(normalise(records(DATA / "codex" / "rollout-exec-mcp-tool.jsonl")))
    assert [e.tool for e in mcp if e.kind == "tool"] == ["mcp__probe__remember"]
    assert "stored: buy eggs" in next(e for e in mcp if e.kind == "tool").result


def test_codex_patches_and_failed_commands_read_as_edits_and_failures():
    rollout = [
        {"type": "session_meta", "payload": {"id": "t1", "cwd": "/w/app"}},
        {"type": "response_item", "payload": {"type": "message", "id": "u1", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n<cwd>/w/app</cwd>\n</environment_context>"}]}},
        {"type": "response_item", "payload": {"type": "message", "id": "u2", "role": "user", "content": [
            {"type": "input_text", "text": "fix the parser"}]}},
        {"type": "response_item", "payload": {"type": "function_call", "id": "f1", "call_id": "c1", "name": "exec_command",
                                              "arguments": json.dumps({"cmd": "apply_patch <<'EOF'\n*** Begin Patch\n"
                                                                       "*** Update File: src/parse.py\n@@\n-a\n+b\n*** End Patch\nEOF"})}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1", "output": "Success."}},
        {"type": "response_item", "payload": {"type": "function_call", "id": "f2", "call_id": "c2", "name": "exec_command",
                                              "arguments": json.dumps({"cmd": "make lint"})}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c2",
                                              "output": "Process exited with code 2\nOutput:\nE501"}},
    ]
    items = events(normalise(rollout))
    assert [e.text for e in items if e.kind == "human"] == ["fix the parser"]
    assert [(e.tool, e.tool_input.get("file_path")) for e in items if e.tool == "Edit"] == [("Edit", "src/parse.py")]
    lint = next(e for e in items if e.tool == "Bash" and e.tool_input["command"] == "make lint")
    assert lint.failed and "E501" in lint.result


def test_a_gemini_chat_reads_each_message_once_without_hook_context():
    items = events(normalise(records(DATA / "gemini" / "session-shell-and-mcp-tool.jsonl")))
    assert [(e.kind, e.tool) for e in items] == [("human", ""), ("tool", "Bash"), ("tool", "mcp_probe_remember"),
                                                 ("text", "")]
    assert items[0].text == "run a shell command"  # the <hook_context> blocks in front of it left out
    assert "hi-from-gemini" in items[1].tool_input["command"] and "gproj" in items[1].result
    assert "hook_context" not in items[1].result and "untrusted_context" not in items[1].result
    assert items[2].result == "stored: buy milk"
    resumed = events(normalise(records(DATA / "gemini" / "session-resumed-original.jsonl")))
    assert [e.text for e in resumed if e.kind == "human"] == ["skip trust", "resume c65"]  # `$set` history not again


def test_a_cursor_transcript_reads_with_its_tools_as_claude_codes():
    items = events(normalise(records(DATA / "cursor" / "transcript-tdexixi-code-with-ai-contest.jsonl")))
    human = [e for e in items if e.kind == "human"]
    assert len(human) == 1 and human[0].text.endswith("terminals\\3.txt:10-12 请帮我修复")
    assert "<user_query>" not in human[0].text
    tools = [(e.tool, e.tool_input.get("file_path") or e.tool_input.get("path")) for e in items if e.kind == "tool"]
    assert tools == [("Read", "e:\\Projects\\code-with-ai-contest\\README.md"),
                     ("Grep", "e:\\Projects\\code-with-ai-contest"),
                     ("Grep", "e:\\Projects\\code-with-ai-contest\\app.py"),
                     ("Write", "e:\\Projects\\code-with-ai-contest\\run.bat"),
                     ("Edit", "e:\\Projects\\code-with-ai-contest\\README.md")]
    write = next(e for e in items if e.tool == "Write")
    assert write.tool_input["content"].startswith("@echo off")
    assert items[-1].kind == "text" and "python -m streamlit run app.py" in items[-1].text


def test_claude_code_records_pass_through_unchanged():
    claude = records(DATA / "transcripts" / "marot-spotter-short.jsonl")
    assert normalise(claude) is claude


def test_cortex_capture_reads_a_codex_rollout(project, tmp_path):
    rollout = tmp_path / "rollout.jsonl"
    lines = records(DATA / "codex" / "rollout-exec-shell-tool-hooks.jsonl")
    reply = next(r for r in lines if r["type"] == "response_item" and r["payload"].get("role") == "assistant")
    reply["payload"]["content"][0]["text"] = "Done.\n\n[MEMORY: pattern: Shell probes write their output to out.txt]"
    rollout.write_text("\n".join(json.dumps(r) for r in lines) + "\n", encoding="utf-8")
    cortex("capture", str(rollout), cwd=project)
    found = memories(project).get("Shell probes write their output to out.txt")
    assert found is not None and found.source["session"] == "01a20acc-5128-7691-9696-17a600e658ae"
