"""`cortex init --claude` writes files a teammate can commit and use: no machine path, and hooks that skip
quietly on a clone without cortex while a real cortex failure still shows."""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO_ROOT, cortex, remember

PAYLOADS = Path(__file__).resolve().parent / "data" / "hook-payloads"  # copies of the shared real payloads
EVENTS = {"SessionStart": "session-start", "UserPromptSubmit": "prompt", "Stop": "stop", "PreCompact": "pre-compact",
          "SessionEnd": "session-end", "PreToolUse": "pre-tool-use", "SubagentStart": "subagent-start",
          "SubagentStop": "subagent-stop"}
MARK = "<!-- cortex:injected -->"
VENV_BIN = Path(sys.executable).parent


def _path_without_cortex() -> str:
    """This PATH minus every folder holding a `cortex` (the venv's bin among them)."""
    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and Path(d).resolve() != VENV_BIN.resolve() and not (Path(d) / "cortex").exists())


def _path_with_cortex() -> str:
    return f"{VENV_BIN}{os.pathsep}{_path_without_cortex()}"


def _run(command: str, project: Path, payload: dict[str, Any], path: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A hook command as Claude Code runs it: `sh -c`, in the project, the hook JSON on stdin."""
    return subprocess.run(["sh", "-c", command], cwd=project, input=json.dumps(payload), capture_output=True, text=True,
                          env=dict(os.environ, PATH=path, **env), timeout=120)


def _real_payload(file: str, **fields: Any) -> dict[str, Any]:
    """The first real payload of a logged file, pointed at this test's project and transcript."""
    path = sorted(PAYLOADS.rglob(file))[0]
    return json.loads(path.read_text(encoding="utf-8"))[0] | fields


def _commands(project: Path) -> dict[str, list[str]]:
    """event → the commands of every handler in .claude/settings.json."""
    data = json.loads((project / ".claude" / "settings.json").read_text(encoding="utf-8"))
    return {event: [h["command"] for g in groups for h in g["hooks"]] for event, groups in data["hooks"].items()}


def _cortex_command(project: Path, event: str) -> str:
    [command] = [c for c in _commands(project)[event] if "cortex hook" in c]
    return command


def _transcript(path: Path, text: str) -> Path:
    path.write_text(json.dumps({"type": "assistant", "uuid": "a1", "message": {
        "id": "m1", "role": "assistant", "content": [{"type": "text", "text": text}]}}) + "\n", encoding="utf-8")
    return path


def _titles(project: Path) -> list[str]:
    from cortex.store import Store

    return [m.title for m in Store.locate(project).list()]


def test_the_committed_files_name_no_path_of_this_machine(project):
    out = cortex("init", "--claude", cwd=project, env={"PATH": _path_without_cortex()}).stdout  # the worst case
    assert "`cortex` is not on PATH" in out  # said here, not written into the files
    homes = {os.environ["HOME"], pwd.getpwuid(os.getuid()).pw_dir, str(Path.home())}
    for name in (".claude/settings.json", ".mcp.json"):
        text = (project / name).read_text(encoding="utf-8")
        for machine in (sys.executable, sys.prefix, str(VENV_BIN), str(REPO_ROOT), str(project), *homes):
            assert machine not in text, (name, machine)
        absolute = set(re.findall(r"""(?:^|[\s"'=])(/[^\s"']*)""", text)) - {"/dev/null"}
        assert not absolute and "~" not in text, (name, absolute)
    assert json.loads((project / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]["cortex"] == {
        "type": "stdio", "command": "cortex", "args": ["mcp"]}
    assert set(_commands(project)) == set(EVENTS)


def test_each_hook_command_runs_cortex_when_it_is_installed(project, tmp_path):
    cortex("init", "--claude", cwd=project)
    path = _path_with_cortex()
    gotcha = remember(project, "sqlite3.OperationalError: database is locked during the nightly reconcile; "
                               "the reconcile held one long write transaction", type="gotcha").id
    prompt = _real_payload("user_prompt_submit.json", cwd=str(project), transcript_path=str(tmp_path / "none.jsonl"),
                           prompt="the nightly reconcile fails with database is locked, why?")
    result = _run(_cortex_command(project, "UserPromptSubmit"), project, prompt, path)
    assert result.returncode == 0, result.stderr  # asked before SessionStart starts `cortex serve`
    assert f"`{gotcha}`" in json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]

    pinned = remember(project, "Card numbers never reach the logs: the request logger drops bodies", type="pattern",
                      pinned=True).id
    start = _real_payload("session_start.json", cwd=str(project), transcript_path=str(tmp_path / "none.jsonl"))
    result = _run(_cortex_command(project, "SessionStart"), project, start, path)
    assert result.returncode == 0, result.stderr
    context = json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]
    assert context.startswith(MARK) and f"`{pinned}`" in context
    assert result.stdout == cortex("hook", "session-start", cwd=project, input=json.dumps(start)).stdout

    for event, file, title in (("Stop", "stop.json", "Invoices are numbered per tenant, never globally"),
                               ("PreCompact", "pre_compact.json", "The staging database is reset every Monday at 6")):
        transcript = _transcript(tmp_path / f"{event}.jsonl", f"[MEMORY: context: {title}]")
        payload = _real_payload(file, cwd=str(project), transcript_path=str(transcript),
                                session_id=f"s-{event}", last_assistant_message=f"[MEMORY: context: {title}]")
        result = _run(_cortex_command(project, event), project, payload, path)
        assert (result.returncode, result.stdout) == (0, ""), result.stderr
        assert title in _titles(project)

    title = "The SessionEnd hook command captures in the background"
    transcript = _transcript(tmp_path / "end.jsonl", f"[MEMORY: context: {title}]")
    payload = {"session_id": "s-end", "transcript_path": str(transcript), "cwd": str(project),
               "hook_event_name": "SessionEnd", "reason": "prompt_input_exit"}
    result = _run(_cortex_command(project, "SessionEnd"), project, payload, path)
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    deadline = time.time() + 60
    while time.time() < deadline and title not in _titles(project):
        time.sleep(0.1)
    assert title in _titles(project)


@pytest.mark.parametrize("event", EVENTS)
def test_without_cortex_each_hook_exits_0_with_one_line_on_stderr(project, tmp_path, event):
    cortex("init", "--claude", cwd=project)
    before = sorted(p.relative_to(project) for p in project.rglob("*") if ".git" not in p.parts)
    payload = {"session_id": "s", "transcript_path": str(tmp_path / "t.jsonl"), "cwd": str(project),
               "hook_event_name": event, "prompt": "why is the database locked?"}
    result = _run(_cortex_command(project, event), project, payload, _path_without_cortex())
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("cortex: not installed; skipping")
    assert EVENTS[event] in result.stderr
    assert sorted(p.relative_to(project) for p in project.rglob("*") if ".git" not in p.parts) == before


def test_a_broken_cortex_fails_loudly_instead_of_claiming_it_is_missing(project, tmp_path):
    cortex("init", "--claude", cwd=project)
    broken = tmp_path / "broken" / "cortex"  # a half-upgraded install: the command is there, the package fails
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('cortex package damaged')\n", encoding="utf-8")
    payload = {"session_id": "s", "transcript_path": str(tmp_path / "t.jsonl"), "cwd": str(project),
               "hook_event_name": "Stop"}
    result = _run(_cortex_command(project, "Stop"), project, payload, _path_with_cortex(),
                  PYTHONPATH=str(broken.parent))
    assert result.returncode not in (0, 127) and "cortex package damaged" in result.stderr
    assert "not installed" not in result.stderr


def test_reinit_over_settings_an_older_cortex_wrote_keeps_one_entry_per_event(project):
    older = {f'"{sys.executable}" -m cortex hook {name}' for name in EVENTS.values()}
    foreign = [{"type": "command", "command": "./scripts/notify.sh"},
               {"type": "command", "command": "my-cortex hook stop"}]  # not cortex's: kept by init and uninstall
    settings = {"model": "sonnet", "hooks": {
        event: [{"hooks": [{"type": "command", "command": f'"{sys.executable}" -m cortex hook {name}', "timeout": 7}]}]
        for event, name in EVENTS.items()}}
    settings["hooks"]["Stop"][0]["hooks"] = foreign + settings["hooks"]["Stop"][0]["hooks"]
    settings["hooks"]["Stop"].append({"hooks": [{"type": "command", "command": "cortex hook stop"}]})  # both shapes
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    mcp = {"mcpServers": {"cortex": {"type": "stdio", "command": sys.executable, "args": ["-m", "cortex", "mcp"]},
                          "db": {"command": "db-mcp", "args": []}}}
    (project / ".mcp.json").write_text(json.dumps(mcp), encoding="utf-8")

    out = cortex("init", "--claude", cwd=project).stdout
    assert "updated the Stop hook" in out and "updated the cortex MCP server" in out
    commands = _commands(project)
    for event, name in EVENTS.items():
        ours = [c for c in commands[event] if c.endswith(f"exec cortex hook {name}")]
        assert len(ours) == 1 and not older & set(commands[event]), (event, commands[event])
    assert commands["Stop"][:2] == [h["command"] for h in foreign]
    data = json.loads((project / ".claude" / "settings.json").read_text(encoding="utf-8"))
    assert data["model"] == "sonnet" and len(data["hooks"]["Stop"]) == 1  # the emptied second group is gone
    assert data["hooks"]["SessionStart"][0]["hooks"][0]["timeout"] == 7  # the entry is rewritten in place
    assert sys.executable not in (project / ".claude" / "settings.json").read_text(encoding="utf-8")
    servers = json.loads((project / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    assert servers == {"cortex": {"type": "stdio", "command": "cortex", "args": ["mcp"]}, "db": mcp["mcpServers"]["db"]}

    before = {name: (project / name).read_bytes() for name in (".claude/settings.json", ".mcp.json")}
    assert "already installed" in cortex("init", "--claude", cwd=project).stdout
    assert {name: (project / name).read_bytes() for name in before} == before

    cortex("uninstall", "--claude", cwd=project)
    left = json.loads((project / ".claude" / "settings.json").read_text(encoding="utf-8"))
    assert left == {"model": "sonnet", "hooks": {"Stop": [{"hooks": foreign}]}}
    assert json.loads((project / ".mcp.json").read_text(encoding="utf-8")) == {"mcpServers": {"db": mcp["mcpServers"]["db"]}}


def test_uninstall_removes_what_an_older_cortex_wrote(project):
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(json.dumps({"hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": f'"{sys.executable}" -m cortex hook stop'}]}],
        "SessionStart": [{"hooks": [{"type": "command", "command": "cortex hook session-start"}]}]}}), encoding="utf-8")
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"cortex": {
        "type": "stdio", "command": sys.executable, "args": ["-m", "cortex", "mcp"]}}}), encoding="utf-8")
    out = cortex("uninstall", "--claude", cwd=project).stdout
    assert "removed the Stop hook" in out and "removed the SessionStart hook" in out
    assert json.loads((project / ".claude" / "settings.json").read_text(encoding="utf-8")) == {}
    assert not (project / ".mcp.json").exists()
