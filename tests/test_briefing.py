"""The briefing and the SessionStart hook: budget, tiers, reality check, branch scope, cache, contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cortex.text import estimate_tokens
from tests.helpers import checkout_new_branch, commit_all, cortex, cortex_json, remember

MARK = "<!-- cortex:injected -->"  # what injected context opens with (capture skips text carrying it)


def _remember(project: Path, text: str, **fields: object) -> str:
    return remember(project, text, **fields).id  # in process: the hooks and commands that read it are tested


def _session_start(project: Path, source: str = "startup") -> dict:
    payload = {"session_id": "s", "transcript_path": "/dev/null", "cwd": str(project), "hook_event_name": "SessionStart",
               "source": source}
    result = cortex("hook", "session-start", cwd=project, input=json.dumps(payload))
    assert result.returncode == 0
    return json.loads(result.stdout)


def test_session_start_injects_a_marked_briefing_within_budget(project):
    pinned = _remember(project, "Never log request bodies: they hold card data", type="pattern", pinned=True, priority=9)
    for n in range(60):  # unlinked: linking 60 near-twins costs seconds and the budget is what is checked
        _remember(project, f"Decision number {n}: use library {n} for task {n} because it is small", type="decision",
                  link=False)
    out = _session_start(project)["hookSpecificOutput"]
    assert out["hookEventName"] == "SessionStart"
    text = out["additionalContext"]
    assert text.startswith(MARK) and f"`{pinned}`" in text
    assert estimate_tokens(text) <= 500 and len(text) <= 10_000
    assert "branch `main`" in text and "initial commit" in text


def test_reality_check_and_branch_scope(project):
    (project / "billing.py").write_text("pass\n", encoding="utf-8")
    (project / "gone.py").write_text("pass\n", encoding="utf-8")
    commit_all(project, "code")
    fresh = _remember(project, "Billing totals are computed in cents", type="gotcha", files=["billing.py"])
    gone = _remember(project, "gone.py parses the legacy feed", type="context", files=["gone.py"])
    commit_all(project, "memories")
    (project / "billing.py").write_text("TOTAL_IN_CENTS = True\n", encoding="utf-8")  # rewritten by a later commit
    commit_all(project, "billing in cents")
    _remember(project, "Main-branch progress: migrated the billing job", type="progress")
    checkout_new_branch(project, "feature/search")
    feature = _remember(project, "Search index built; ranking next", type="progress")
    (project / "gone.py").unlink()
    text = cortex("briefing", "--fresh", cwd=project).stdout
    assert f"`{fresh}` (may be stale: billing.py changed (1 of 1 lines) since" in text
    assert gone not in text
    assert feature in text and "Main-branch progress" not in text


def test_cached_briefing_is_the_same_bytes_and_invalidated_by_a_change(project):
    _remember(project, "Deploys run from the release branch only", type="decision")
    first = _session_start(project)["hookSpecificOutput"]["additionalContext"]
    assert (project / ".cortex" / "state" / "briefing.json").is_file()
    assert _session_start(project, "resume")["hookSpecificOutput"]["additionalContext"] == first
    newer = _remember(project, "Feature flags are read once at startup", type="gotcha")
    assert newer in _session_start(project, "compact")["hookSpecificOutput"]["additionalContext"]
    commit_all(project, "memories")
    assert "memories" in _session_start(project)["hookSpecificOutput"]["additionalContext"]  # new HEAD, new header


def test_briefing_is_deterministic_and_json(project):
    for n in range(5):
        _remember(project, f"Pattern {n}: keep handlers small and pure", type="pattern")
    a = cortex_json("briefing", "--fresh", cwd=project)
    b = cortex_json("briefing", "--fresh", cwd=project)
    assert a == b and a["tokens"] == estimate_tokens(a["text"]) and len(a["ids"]) == 5


def test_hook_quiet_outside_a_store_and_when_nested(tmp_path, project):
    payload = json.dumps({"session_id": "s", "cwd": str(tmp_path), "hook_event_name": "SessionStart", "source": "startup"})
    assert cortex("hook", "session-start", cwd=tmp_path, input=payload).stdout == ""
    nested = cortex("hook", "session-start", cwd=project, input=json.dumps({"cwd": str(project)}), env={"CORTEX_NESTED": "1"})
    assert nested.returncode == 0 and nested.stdout == ""
    garbage = cortex("hook", "session-start", cwd=project, input="[[[")
    assert garbage.returncode == 0 and garbage.stdout == ""


def _prompt(project: Path, text: str) -> str:
    payload = {"session_id": "s", "transcript_path": "/dev/null", "cwd": str(project),
               "hook_event_name": "UserPromptSubmit", "prompt": text}
    result = cortex("hook", "prompt", cwd=project, input=json.dumps(payload))
    assert result.returncode == 0
    return result.stdout


def test_prompt_hook_adds_relevant_memories_and_nothing_otherwise(project):
    gotcha = _remember(project, "sqlite3.OperationalError: database is locked during the nightly reconcile; "
                                "the reconcile held one long write transaction", type="gotcha")
    _remember(project, "Write transactions are short and start with BEGIN IMMEDIATE", type="pattern")
    out = json.loads(_prompt(project, "the nightly reconcile fails with database is locked, why?"))
    context = out["hookSpecificOutput"]["additionalContext"]
    assert out["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert context.startswith(MARK) and f"`{gotcha}`" in context and estimate_tokens(context) <= 300
    assert _prompt(project, "write a haiku about autumn leaves") == ""  # "write" in another sense
    assert _prompt(project, "/compact") == ""


def test_prompt_hook_skips_what_the_briefing_already_showed(project):
    pinned = _remember(project, "The database is locked error means a long write transaction", type="gotcha", pinned=True)
    _session_start(project)  # the briefing (with the pinned memory) is what this session saw
    out = _prompt(project, "why is the database locked?")
    assert pinned not in out


@pytest.mark.long
def test_prompt_hook_with_real_payloads_is_quiet_or_valid_json(project):
    payloads_dir = Path(__file__).resolve().parent / "data" / "hook-payloads"  # copies of the shared real payloads
    payloads = [p for f in sorted(payloads_dir.rglob("user_prompt_submit.json"))
                for p in json.loads(f.read_text(encoding="utf-8"))]
    assert len(payloads) == 15
    _remember(project, "The failing test suite needs the database fixture", type="gotcha")
    for payload in payloads:
        result = cortex("hook", "prompt", cwd=project, input=json.dumps(dict(payload, cwd=str(project))))
        assert result.returncode == 0
        assert result.stdout == "" or json.loads(result.stdout)["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"


def test_init_agents_keeps_a_marked_section_current_and_the_rest_untouched(project, tmp_path):
    from cortex.agents import BEGIN, END

    decision = _remember(project, "Payments retry with exponential backoff, never more than 5 times", type="decision")
    (project / "AGENTS.md").write_text("# Agents\n\nRun `make test` before pushing.\n", encoding="utf-8")
    out = cortex("init", "--agents", cwd=project)
    assert out.returncode == 0 and "AGENTS.md" in out.stdout
    text = (project / "AGENTS.md").read_text(encoding="utf-8")
    assert text.startswith("# Agents\n\nRun `make test` before pushing.\n\n" + BEGIN)
    assert f"`{decision}`" in text and text.rstrip().endswith(END)
    assert "Recent commits" not in text  # the committed form does not churn with every commit
    assert cortex("init", "--agents", cwd=project).stdout.strip().endswith("already up to date")
    # a person adds text after the section; a write refreshes only the section, at once
    (project / "AGENTS.md").write_text(text + "\n## Release\nTag from main.\n", encoding="utf-8")
    later = cortex("remember", "Webhooks are verified with the provider's signing secret name, never logged",
                   "--type", "gotcha", cwd=project).stdout.strip()
    refreshed = (project / "AGENTS.md").read_text(encoding="utf-8")
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("", encoding="utf-8")
    payload = {"session_id": "s", "transcript_path": str(transcript), "cwd": str(project), "hook_event_name": "Stop",
               "stop_hook_active": False}
    assert cortex("hook", "stop", cwd=project, input=json.dumps(payload)).returncode == 0
    assert (project / "AGENTS.md").read_text(encoding="utf-8") == refreshed  # a Stop that wrote nothing: untouched
    assert f"`{later}`" in refreshed and f"`{decision}`" in refreshed
    assert refreshed.startswith("# Agents\n") and refreshed.endswith("## Release\nTag from main.\n")
    assert refreshed.count(BEGIN) == 1
    assert cortex("uninstall", "--agents", cwd=project).returncode == 0
    assert (project / "AGENTS.md").read_text(encoding="utf-8") == "# Agents\n\nRun `make test` before pushing.\n\n## Release\nTag from main.\n"


def test_agents_section_without_end_marker_is_a_clear_error(project):
    from cortex.agents import BEGIN

    (project / "AGENTS.md").write_text(f"# Agents\n{BEGIN}\nhalf a section\n", encoding="utf-8")
    out = cortex("init", "--agents", cwd=project, check=False)
    assert out.returncode == 1 and "AGENTS.md" in out.stderr and "cortex:end" in out.stderr
    assert (project / "AGENTS.md").read_text(encoding="utf-8") == f"# Agents\n{BEGIN}\nhalf a section\n"


def test_global_memories_have_their_own_section_pinned_first_and_never_reach_agents_md(project, isolated_env):
    """Issue 40: a person's global memories (their preferences across projects) reach the session's briefing,
    labelled, pinned first, within a share of the budget; the committed AGENTS.md never holds them; a new global
    memory is in the next session start's briefing (the cached one is keyed on the global store too)."""
    from cortex.briefing import GLOBAL

    cortex("init", "--global", cwd=project)
    cortex("init", "--agents", cwd=project)
    pinned = cortex("remember", "Always answer me in British English", "--global", "--pin", "--type", "pattern",
                    cwd=project).stdout.strip()
    _remember(project, "Payments retry with exponential backoff, never more than 5 times", type="decision")
    first = _session_start(project)["hookSpecificOutput"]["additionalContext"]
    assert f"## {GLOBAL}" in first and f"`{pinned}`" in first
    assert first.index(f"## {GLOBAL}") < first.index(f"`{pinned}`")  # under its label
    later = cortex("remember", "I review pull requests in the morning only", "--global", "--type", "context",
                   cwd=project).stdout.strip()
    again = _session_start(project)["hookSpecificOutput"]["additionalContext"]
    assert f"`{later}`" in again and again.index(f"`{pinned}`") < again.index(f"`{later}`")
    agents = (project / "AGENTS.md").read_text(encoding="utf-8")
    assert pinned not in agents and later not in agents and GLOBAL not in agents
