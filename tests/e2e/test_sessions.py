"""Real Claude Code sessions against cortex, installed both ways: `cortex init --claude` and `--plugin-dir`.

One story per install, each step a real `claude -p` run against the fake
Messages API (tests/e2e/fakeapi.py):

1. capture: the model writes a file and states a decision with a `[MEMORY:]`
   tag; the Stop hook captures it from the transcript Claude Code wrote;
2. a second session: the briefing and the prompt-time recall reach the model
   (the fake server's request log is what the model would read);
3. compaction: a resumed session's `/compact` runs the PreCompact capture and
   the `compact` SessionStart puts the briefing back.

Plus several turns in one process (stream-json input) and the Stop cursor.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pygit2
import pytest

from cortex.memory import parse
from tests.e2e.harness import Run, Sandbox, request_text, system_messages
from tests.helpers import commit_all

MARK = "<!-- cortex:injected -->"
DECISION = "Use SQLite, not Postgres, for the local rate cache: no server to run"
REPLY = f"Added the cache module. We'll use SQLite instead of Postgres for the rate cache.\n\n[MEMORY: decision: {DECISION}]"
PINNED = "Every API response carries an X-Request-Id header for tracing"
RELATED = "SQLite rate cache files must live on a local disk: WAL mode breaks on NFS"
GONE_FILE = "The throttle module allows 100 requests per minute per tenant"
GONE_MEMORY = "Rates are cached in Redis for one hour"
BUDGET = 250  # briefing.budget_tokens in session 2: small enough that the low-priority gotcha is left to recall
QUOTA = "The rates API answers HTTP 200 with an error body when the quota is exhausted"
FILLERS = [
    ("pattern", "Invoices are rendered from Jinja templates in billing/templates"),
    ("context", "The payments team owns the webhook endpoints and reviews their changes"),
    ("gotcha", "Stripe test webhooks arrive out of order during the nightly replay"),
    ("architecture", "Ledger entries are append-only; corrections are new entries"),
    ("pattern", "Every money amount is an integer number of cents"),
    ("decision", "Logs are JSON lines shipped to the collector, never plain text"),
    ("context", "Release trains leave on Tuesdays after the billing freeze"),
    ("gotcha", "The CI runners have no IPv6, so the DNS tests mock the resolver"),
]


def memories_by_title(sandbox: Sandbox) -> dict[str, Any]:
    return {m.title: m for m in (parse(p.read_text(encoding="utf-8"), p) for p in sandbox.memories())}


def changed_outside_cortex(project: Path) -> dict[str, int]:
    """git status of every path outside `.cortex/` (flags as pygit2 reports them)."""
    return {path: flags for path, flags in pygit2.Repository(str(project)).status().items()
            if not path.startswith(".cortex/")}


def staged(project: Path) -> list[str]:
    index_flags = pygit2.GIT_STATUS_INDEX_NEW | pygit2.GIT_STATUS_INDEX_MODIFIED | pygit2.GIT_STATUS_INDEX_DELETED
    return sorted(path for path, flags in pygit2.Repository(str(project)).status().items() if flags & index_flags)


def hook_outcomes(run: Run) -> list[tuple[str, int | None]]:
    return [(str(line.get("hook_name")), line.get("exit_code")) for line in run.hook_events()]


# ---------------------------------------------------------------- the story, once per install


@dataclass
class Story:
    install: str
    sandbox: Sandbox
    capture: Run
    after_capture: dict[str, Any]  # snapshot taken right after the capture run
    second: Run | None = None
    compact: Run | None = None
    uncaptured: Run | None = None

    @property
    def plugin(self) -> bool:
        return self.install == "plugin"


@pytest.fixture(scope="module", params=["settings", "plugin"])
def story(request: pytest.FixtureRequest, sandbox: Callable[[str], Sandbox]) -> Story:
    """Session 1: the model writes cache.py and states a decision; Claude Code's Stop hook runs cortex."""
    install = request.param
    box = sandbox(f"story-{install}")
    box.cortex("init", "--claude") if install == "settings" else box.cortex("init")
    commit_all(box.project, "cortex installed")
    script: list[dict[str, Any]] = [
        {"tool_use": {"name": "Write", "input": {"file_path": str(box.project / "cache.py"),
                                                 "content": "import sqlite3\n\nDB = 'rates.sqlite'\n"}}},
        {"text": REPLY},
    ]
    run = box.claude("add a local cache for the exchange rates", script=script, plugin=install == "plugin",
                     args=("--permission-mode", "acceptEdits"))
    snapshot = {
        "memories": memories_by_title(box),
        "decisions": (box.project / ".cortex" / "decisions.md").read_text(encoding="utf-8")
        if (box.project / ".cortex" / "decisions.md").exists() else "",
        "outside": changed_outside_cortex(box.project),
        "staged": staged(box.project),
        "readme": (box.project / "README.md").read_text(encoding="utf-8"),
        "log": box.log_lines(),
    }
    return Story(install, box, run, snapshot)


def test_capture_in_a_real_session(story: Story) -> None:
    run, snap = story.capture, story.after_capture
    assert run.rc == 0, run.stderr
    assert run.results[-1]["result"] == REPLY
    assert (story.sandbox.project / "cache.py").exists()  # the fake model's Write really ran
    assert ("Stop", 0) in hook_outcomes(run)
    # The Stop hook captured from the transcript Claude Code wrote, in this session.
    decision = snap["memories"].get(DECISION)
    assert decision is not None, f"no decision captured; memories: {list(snap['memories'])}; log: {snap['log']}"
    assert decision.type == "decision"
    assert decision.source.get("session") == run.session_id
    assert decision.source.get("layer") == "self-report"
    assert not any(title.startswith("We'll use SQLite") for title in snap["memories"])  # said once, by the tag
    # A reply of the tag alone is the tag's memory: no "Done: <the request>" progress note (issue 40's precision).
    assert [m.title for m in snap["memories"].values()] == [DECISION], (list(snap["memories"]), snap["log"])
    assert DECISION in snap["decisions"]
    assert decision.path is not None and Path(decision.path).parent.name == "decision"


def test_capture_touches_nothing_outside_cortex(story: Story) -> None:
    snap = story.after_capture
    # The model's own Write is the only change outside .cortex/, and cortex did not stage it.
    assert snap["outside"] == {"cache.py": pygit2.GIT_STATUS_WT_NEW}
    assert snap["staged"] and all(path.startswith(".cortex/") for path in snap["staged"]), (snap["staged"], snap["log"])
    assert snap["readme"] == "# demo project\n"


@pytest.fixture(scope="module")
def second_session(story: Story) -> Story:
    """Session 2, separate: a pinned memory, a memory whose code was deleted, a memory file deleted, fillers."""
    box = story.sandbox
    from cortex.memory import Memory
    from cortex.store import Store

    config = box.project / ".cortex" / "config.yaml"
    text = config.read_text(encoding="utf-8")
    assert "budget_tokens: 500" in text
    config.write_text(text.replace("budget_tokens: 500", f"budget_tokens: {BUDGET}", 1), encoding="utf-8")
    store = Store(box.project / ".cortex", "project")
    for kind, title in FILLERS:
        store.create(Memory(id="", type=kind, title=title, body=title + ".\n", priority=5, confidence=0.7))
    box.cortex("remember", PINNED, "--type", "pattern", "--pin")
    box.cortex("remember", RELATED, "--type", "gotcha", "--priority", "1", "--confidence", "0.3")
    (box.project / "throttle.py").write_text("LIMIT = 100\n", encoding="utf-8")
    box.cortex("remember", GONE_FILE, "--type", "pattern", "--priority", "9", "--file", "throttle.py")
    (box.project / "throttle.py").unlink()
    gone = box.cortex("remember", GONE_MEMORY, "--type", "decision", "--json")
    import json

    Path(json.loads(gone.stdout)["path"]).unlink()
    story.second = box.claude("why did we pick SQLite for the rate cache?", script=[{"text": "Because of the decision."}],
                              plugin=story.plugin)
    return story


def test_briefing_and_recall_reach_the_model(second_session: Story) -> None:
    run = second_session.second
    assert run is not None and run.rc == 0, run and run.stderr
    assert len(run.api.main_requests) == 1
    request = run.api.main_requests[0]
    contexts = system_messages(request)
    briefing = next((t for t in contexts if "SessionStart hook additional context:" in t), "")
    recall = next((t for t in contexts if "UserPromptSubmit hook additional context:" in t), "")
    # The briefing: marked as cortex's, with the captured decision and the pinned memory, within budget.
    session_part = briefing.split("SessionStart hook additional context:", 1)[1]
    session_part = session_part.split("UserPromptSubmit hook additional context:", 1)[0]
    briefing_text = session_part.split("\n\n# Environment", 1)[0].strip()
    assert briefing_text.startswith(MARK), briefing_text[:200]
    assert DECISION.split(":")[0] in briefing_text
    assert PINNED in briefing_text
    from cortex.briefing import estimate_tokens

    assert estimate_tokens(briefing_text) <= BUDGET, briefing_text
    # The prompt-time recall in the same request: a related memory the briefing did not carry.
    recall_text = (recall or briefing).split("UserPromptSubmit hook additional context:", 1)[-1]
    assert MARK in recall_text and RELATED in recall_text, recall_text[:1500]
    assert RELATED not in briefing_text
    # Gone: the memory whose code was deleted, and the memory whose file was deleted.
    everything = request_text(request)
    assert GONE_FILE not in everything
    assert GONE_MEMORY not in everything
    assert "why did we pick SQLite for the rate cache?" in everything


def test_prompt_context_is_not_captured_back(second_session: Story) -> None:
    titles = memories_by_title(second_session.sandbox)
    assert not any(title.startswith(("cortex briefing", "Memories that may bear")) for title in titles)
    assert not any(MARK in m.body for m in titles.values())
    # Claude Code 2.1.330 copies whole requests into the transcript (`api-request-blob`), the rules file's example
    # tags included: they must not become memories.
    assert not any("The CI image has SQLite 3.31" in title or "We keep the cache in SQLite" in title for title in titles)


@pytest.fixture(scope="module")
def compacted(second_session: Story) -> Story:
    """A session whose turn no hook saw (hooks off), resumed with `/compact` and one more prompt."""
    box = second_session.sandbox
    first = box.claude("what does the rates API do when we run out of quota?",
                       script=[{"text": f"Noted.\n\n[MEMORY: gotcha priority=9: {QUOTA}]"}],
                       plugin=second_session.plugin, args=("--settings", '{"disableAllHooks": true}'))
    assert first.rc == 0 and QUOTA not in memories_by_title(box)
    second_session.uncaptured = first
    second_session.compact = box.claude(
        None, script=[{"text": "Summary: we discussed the rates API quota."}, {"text": "It returns 200."}],
        plugin=second_session.plugin, stdin_turns=["/compact keep memory notes", "and the quota again?"],
        args=("--resume", first.session_id))
    return second_session


def test_compaction_captures_and_briefs_again(compacted: Story) -> None:
    run, box = compacted.compact, compacted.sandbox
    assert run is not None and compacted.uncaptured is not None
    assert run.rc == 0, run.stderr
    debug = run.debug_log.read_text(encoding="utf-8")
    assert "PreCompact:manual" in debug and "completed with status 0" in debug
    quota = memories_by_title(box).get(QUOTA)
    assert quota is not None and quota.type == "gotcha"
    assert quota.source.get("session") == compacted.uncaptured.session_id
    # The compact SessionStart carried the briefing, already with what PreCompact captured.
    compact_start = [line for line in run.hook_events() if line.get("hook_name") == "SessionStart:compact"]
    assert compact_start and compact_start[0]["exit_code"] == 0
    assert MARK in compact_start[0]["output"] and QUOTA in compact_start[0]["output"]
    # And the model's next request after compaction has it.
    after = run.api.main_requests[-1]
    assert "and the quota again?" in request_text(after)
    assert any(QUOTA in text for text in system_messages(after))


# ---------------------------------------------------------------- several turns, one process


def test_stop_cursor_across_turns(sandbox: Callable[[str], Sandbox]) -> None:
    box = sandbox("turns")
    box.cortex("init", "--claude")
    first = "The CI image ships SQLite 3.31, which lacks DROP COLUMN"
    second = "Every migration script is idempotent and checks the schema version first"
    run = box.claude(None, script=[{"text": f"Right.\n\n[MEMORY: gotcha: {first}]"},
                                   {"text": f"Yes.\n\n[MEMORY: pattern: {second}]"}],
                     stdin_turns=["which SQLite does CI have?", "how do we write migrations?"])
    assert run.rc == 0, run.stderr
    assert len(run.results) == 2
    assert [name for name, _ in hook_outcomes(run)].count("Stop") == 2
    stops = [line for line in box.log_lines() if " stop: " in line]
    assert len(stops) >= 2, stops
    # The second turn's Stop read only what was new: it wrote the second memory and saw no duplicate of the first.
    assert "wrote 1," in stops[0] and "wrote 1," in stops[1], stops
    assert all("duplicates 0" in line for line in stops), stops
    titles = memories_by_title(box)
    assert titles[first].type == "gotcha" and titles[second].type == "pattern"
    assert len(box.memories()) == 2
