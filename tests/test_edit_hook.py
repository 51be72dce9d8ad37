"""Issue 42, recall by path at the moment of the edit: `cortex recall --path`, MCP `cortex_search` with `path`,
and the PreToolUse hook on the edit tools (Codex's apply_patch, Gemini's AfterTool), served and not.

Real parts: git repositories, memories written by the `cortex` command (`remember --file`, `forget`,
`index-code`), the hook as a fresh `cortex hook pre-tool-use` process with the assistant's JSON on stdin, a real
`cortex serve`, the real MCP server over stdio.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cortex import serve
from tests.helpers import cortex, cortex_command, cortex_json, git, hook, remember, wait_for


def _remember(project: Path, text: str, kind: str, *files: str) -> str:
    """Saved as `cortex remember TEXT --type KIND --file …` saves it, in process (what is tested is the reading)."""
    return remember(project, text, type=kind, files=list(files)).id


def _edit(project: Path, file: str, session: str = "s1", tool: str = "Edit", **extra: Any) -> dict[str, Any]:
    """Claude Code's PreToolUse for an edit of `file` (absolute, as Claude Code sends it)."""
    key = "notebook_path" if tool == "NotebookEdit" else "file_path"
    return {"session_id": session, "transcript_path": f"/tmp/{session}.jsonl", "cwd": str(project),
            "hook_event_name": "PreToolUse", "permission_mode": "default", "tool_name": tool,
            "tool_input": {key: str(project / file), "old_string": "a", "new_string": "b"},
            "tool_use_id": "toolu_01", **extra}


def _context(result: subprocess.CompletedProcess[str], event: str = "PreToolUse") -> str:
    """The additionalContext a hook printed (it printed exactly one JSON object and exited 0)."""
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    return str(answer["hookSpecificOutput"]["additionalContext"])


def _silent(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


@pytest.fixture
def billing(project: Path) -> dict[str, str]:
    """A project with billing/invoice.py and memories bound to it, its folder, another file; and the bound
    memories that are not current (archived, superseded, proposed)."""
    (project / "billing").mkdir()
    (project / "billing" / "invoice.py").write_text("def total(lines):\n    return sum(lines)\n", encoding="utf-8")
    (project / "billing" / "tax.py").write_text("RATE = 0.2\n", encoding="utf-8")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "billing")
    ids = {
        "file": _remember(project, "Invoice totals round each line to cents before summing, never the total: the "
                          "auditors reconcile line by line.", "decision", "billing/invoice.py"),
        "folder": _remember(project, "Everything under billing is reviewed by the finance team before merge.",
                            "gotcha", "billing/"),
        "many": _remember(project, "Money amounts are integer cents in every module that touches them.", "pattern",
                          "billing/invoice.py", "billing/tax.py", "app.py"),
        "other": _remember(project, "The README is generated from docs; edit docs instead.", "gotcha", "README.md"),
        "old": _remember(project, "Invoice totals are rounded once, on the total.", "decision", "billing/invoice.py"),
        "archived": _remember(project, "Invoices were printed with ReportLab once.", "context", "billing/invoice.py"),
    }
    cortex("forget", ids["old"], "--replaced-by", ids["file"], cwd=project)
    cortex("forget", ids["archived"], cwd=project)
    ids["proposed"] = remember(project, "Maybe invoices should be PDFs.", type="plan", files=["billing/invoice.py"],
                               status="proposed").id
    return ids


def test_recall_path_ranks_the_bound_memories_most_specific_first_and_only_current_ones(project, billing):
    """`recall --path`: the memory naming only this file, then the one naming it among others, then the code's
    outline (`index-code`), then the folder's; never the superseded, archived or proposed ones; from a
    subfolder the path is relative to it."""
    cortex("index-code", "billing/invoice.py", cwd=project)
    rows = cortex_json("recall", "--path", "billing/invoice.py", cwd=project)
    assert [row["why"] for row in rows] == ["names this file", "names this file", "describes its code",
                                            "names its folder"]
    assert [row["id"] for row in rows][:2] == [billing["file"], billing["many"]]
    assert rows[2]["type"] == "code_description" and rows[3]["id"] == billing["folder"]
    assert not {billing["old"], billing["archived"], billing["proposed"]} & {row["id"] for row in rows}
    assert cortex_json("recall", "--path", "invoice.py", cwd=project / "billing") == rows
    text = cortex("recall", "--path", "billing/invoice.py", "--limit", "1", cwd=project)
    assert billing["file"] in text.stdout and billing["folder"] not in text.stdout
    assert "3 more memories bound to billing/invoice.py left out" in text.stderr


def test_recall_path_says_nothing_relevant_for_an_unbound_file_and_refuses_one_outside(project, billing, tmp_path):
    nothing = cortex("recall", "--path", "app.py", cwd=project)  # only the memory naming three files
    assert billing["many"] in nothing.stdout
    empty = cortex("recall", "--path", "docs/guide.md", cwd=project)
    assert empty.returncode == 0 and empty.stdout == "nothing relevant\n"
    for outside in ("../elsewhere.py", str(tmp_path / "elsewhere.py"), "/etc/hosts"):
        refused = cortex("recall", "--path", outside, cwd=project, check=False)
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr.count("\n") == 1 and f"{outside}: outside the repository" in refused.stderr
    both = cortex("recall", "invoices", "--path", "app.py", cwd=project, check=False)
    assert both.returncode == 1 and "not both" in both.stderr
    unsupported = cortex("recall", "--path", "app.py", "--since", "2026-01-01", cwd=project, check=False)
    assert unsupported.returncode == 1 and "not --since" in unsupported.stderr
    gotchas = cortex_json("recall", "--path", "billing/invoice.py", "--type", "gotcha", cwd=project)
    assert [row["id"] for row in gotchas] == [billing["folder"]]


def test_the_edit_hook_adds_the_bound_memories_once_per_file_per_session(project, billing):
    """The first Edit of billing/invoice.py in a session gets its memories (current ones only) within 300 tokens;
    the second is silent; another session gets them again; a Write of billing/tax.py in the first session
    gets only what it was not shown already; what was shown is recorded as the session's injections."""
    first = _context(hook("pre-tool-use", project, _edit(project, "billing/invoice.py")))
    assert first.startswith("<!-- cortex:injected -->") and len(first) <= 4 * 300
    assert "billing/invoice.py" in first
    for key in ("file", "folder", "many"):
        assert billing[key] in first, key
    for key in ("old", "archived", "proposed", "other"):
        assert billing[key] not in first, key
    assert first.index(billing["file"]) < first.index(billing["many"]) < first.index(billing["folder"])
    reads = json.loads((project / ".cortex" / "state" / "access.json").read_text(encoding="utf-8"))
    assert reads[billing["file"]]["count"] >= 1 and billing["other"] not in reads  # shown: read
    _silent(hook("pre-tool-use", project, _edit(project, "billing/invoice.py", tool="MultiEdit")))
    again = _context(hook("pre-tool-use", project, _edit(project, "billing/invoice.py", session="s2")))
    assert again == first
    tax = hook("pre-tool-use", project, _edit(project, "billing/tax.py", tool="Write"))
    _silent(tax)  # its folder's memory and the one naming three files were shown with invoice.py
    state = json.loads((project / ".cortex" / "state" / "edits" / "s1.json").read_text(encoding="utf-8"))
    assert set(state["files"]) == {"billing/invoice.py"}
    injected = (project / ".cortex" / "state" / "injections" / "s1.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(injected[-1])["event"] == "PreToolUse"
    assert set(json.loads(injected[-1])["ids"]) == {billing["file"], billing["folder"], billing["many"]}


def test_the_edit_hook_is_silent_for_an_unrelated_file_another_tool_or_a_file_outside(project, billing, tmp_path):
    _silent(hook("pre-tool-use", project, _edit(project, "docs/new.md", tool="Write")))
    _silent(hook("pre-tool-use", project, _edit(project, "billing/invoice.py", tool="Read")))
    outside = _edit(project, "x") | {"tool_input": {"file_path": str(tmp_path / "elsewhere" / "billing" / "invoice.py")}}
    _silent(hook("pre-tool-use", project, outside))
    _silent(hook("pre-tool-use", project, "not json"))
    _silent(hook("pre-tool-use", project, _edit(project, "x") | {"tool_input": "billing/invoice.py"}))
    assert not (project / ".cortex" / "state" / "edits").exists()


def test_the_edit_hook_answers_the_same_served_and_not_served(project, billing):
    """Without a server the hook looks up in its own process; with `cortex serve` running the server answers
    (its `path` op gives the very context the hook printed), and the hook prints the same."""
    alone = _context(hook("pre-tool-use", project, _edit(project, "billing/invoice.py", session="alone")))
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "60"], cwd=project, stderr=subprocess.DEVNULL)
    root = str(project / ".cortex")
    try:
        assert wait_for(lambda: (serve.ask(root, {"op": "ping"}) or {}).get("ready"), 120)
        asked = serve.ask(root, {"op": "path", "paths": ["billing/invoice.py"], "exclude": [], "wait": 1.0}, 5.0)
        assert asked is not None and asked["shown"] == {"billing/invoice.py": [billing["file"], billing["many"],
                                                                               billing["folder"]]}
        served = _context(hook("pre-tool-use", project, _edit(project, "billing/invoice.py", session="served")))
        assert served == alone
        assert all(line in served for line in str(asked["context"]).splitlines()[1:])  # all but the mark
        # What the server is told is checked: a path list too long is refused, nothing run.
        refused = serve.ask(root, {"op": "path", "paths": ["a"] * 21}, 5.0)
        assert refused is not None and "paths" in str(refused.get("error"))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_hook_error_is_logged_and_the_tool_call_goes_on(project, billing):
    """The cache cannot be opened (a file where its folder should be): the hook prints nothing, exits 0, and
    says what went wrong in .cortex/state/cortex.log."""
    cache = project / ".cortex" / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    cache.write_text("not a folder\n", encoding="utf-8")
    _silent(hook("pre-tool-use", project, _edit(project, "billing/invoice.py")))
    log = (project / ".cortex" / "state" / "cortex.log").read_text(encoding="utf-8")
    assert "pre-tool-use:" in log and "Error" in log


def test_codex_patches_and_gemini_edits_get_the_same_memories(project, billing):
    """Codex's PreToolUse on apply_patch names the files in the patch; Gemini's AfterTool on `replace` is
    answered under its own event name."""
    patch = ("*** Begin Patch\n*** Update File: billing/invoice.py\n@@\n-    return sum(lines)\n+    return round(sum(lines))\n"
             "*** Add File: billing/credit.py\n+X = 1\n*** End Patch\n")
    codex = {"session_id": "c1", "turn_id": "t1", "transcript_path": None, "cwd": str(project),
             "hook_event_name": "PreToolUse", "model": "gpt-fake", "tool_name": "apply_patch",
             "tool_input": {"command": patch}, "tool_use_id": "call_1"}
    shown = _context(hook("pre-tool-use", project, codex))
    assert billing["file"] in shown and billing["folder"] in shown
    recorded = json.loads((project / ".cortex" / "state" / "edits" / "c1.json").read_text(encoding="utf-8"))
    assert set(recorded["files"]) == {"billing/invoice.py"}  # credit.py: only its folder's, shown already
    gemini = {"session_id": "g1", "transcript_path": "/tmp/g1.jsonl", "cwd": str(project),
              "hook_event_name": "AfterTool", "timestamp": "2026-11-23T23:49:09.759Z", "tool_name": "replace",
              "tool_input": {"file_path": str(project / "billing" / "invoice.py"), "old_string": "a", "new_string": "b"},
              "tool_response": {"llmContent": "ok", "returnDisplay": "ok"}}
    assert billing["file"] in _context(hook("pre-tool-use", project, gemini), event="AfterTool")


def test_init_installs_the_edit_hook_and_upgrades_an_older_matcher(repo):
    """`cortex init --claude` puts Claude Code's edit tools in PreToolUse's matcher; a settings file an older
    version wrote (`Task|Agent`) is brought up to it in place, one group; Codex and Gemini get theirs."""
    cortex("init", "--claude", "--codex", "--gemini", cwd=repo)
    settings = repo / ".claude" / "settings.json"
    groups = json.loads(settings.read_text(encoding="utf-8"))["hooks"]["PreToolUse"]
    assert len(groups) == 1 and set(groups[0]["matcher"].split("|")) >= {"Edit", "Write", "MultiEdit",
                                                                           "NotebookEdit", "Task", "Agent"}
    data = json.loads(settings.read_text(encoding="utf-8"))
    data["hooks"]["PreToolUse"][0]["matcher"] = "Task|Agent"
    settings.write_text(json.dumps(data), encoding="utf-8")
    out = cortex("init", "--claude", cwd=repo).stdout
    assert "updated the PreToolUse hook" in out
    groups = json.loads(settings.read_text(encoding="utf-8"))["hooks"]["PreToolUse"]
    assert len(groups) == 1 and "Edit" in groups[0]["matcher"].split("|")
    assert "updated the PreToolUse hook" not in cortex("init", "--claude", cwd=repo).stdout
    codex = json.loads((repo / ".codex" / "hooks.json").read_text(encoding="utf-8"))["hooks"]["PreToolUse"]
    assert codex[0]["matcher"] == "apply_patch|Edit|Write" and "pre-tool-use" in codex[0]["hooks"][0]["command"]
    gemini = json.loads((repo / ".gemini" / "settings.json").read_text(encoding="utf-8"))["hooks"]["AfterTool"]
    assert gemini[0]["matcher"] == "^(replace|write_file)$"


# ---------------------------------------------------------------- MCP


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.test_mcp import example_client

    with example_client(tmp_path_factory.mktemp("mcp-path")) as client:
        yield client


def test_mcp_search_with_a_path_gives_the_memories_bound_to_the_file(mcp):
    """`cortex_search` with `path`: the decision naming tallyho/db/connect.py; the outline of tx.py's code (not
    the code itself); for celery_app.py not its superseded and archived memories; nothing for a file no memory
    names; a path outside
    the repository is an error naming it; the same rows as `cortex recall --path`."""
    found = mcp.call("cortex_search", path="tallyho/db/connect.py")
    assert found["path"] == "tallyho/db/connect.py" and found["results"][0]["id"] == "9b3e5695d219"
    assert found["results"][0]["why"] == "names this file"
    outline = mcp.call("cortex_search", path=str(mcp.project / "tallyho" / "db" / "tx.py"))
    whys = {row["id"]: row["why"] for row in outline["results"]}
    assert whys["407cf71b5a22"] == "describes its code" and "281cc644d441" not in whys  # the code: the file itself
    assert list(whys.values()) == sorted(whys.values(), key=["names this file", "describes its code"].index)
    assert mcp.call("cortex_search", path="tallyho/db/tx.py", types=["pattern"])["results"][0]["id"] == "bc92f3e7d46c"
    celery = {row["id"] for row in mcp.call("cortex_search", path="tallyho/worker/celery_app.py")["results"]}
    assert "1a11c3e4f523" in celery  # the progress note: the migration off it finished
    assert not {"f4a9463fdddd", "b7e0267ad073"} & celery  # the superseded decision, the archived gotcha
    gone = mcp.call("cortex_search", path="docs/never-written.md")
    assert gone["results"] == [] and gone["notes"] == ["nothing relevant"]
    outside = mcp.raw("cortex_search", path="/etc/hosts")
    assert outside.is_error and "/etc/hosts: outside the repository" in outside.content[0].text
    neither = mcp.raw("cortex_search")
    assert neither.is_error and "give a query, or a path" in neither.content[0].text
    assert cortex_json("recall", "--path", "tallyho/db/connect.py", cwd=mcp.project) == found["results"]
