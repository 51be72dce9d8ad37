"""The real Google Gemini CLI (pinned) against cortex, installed with `cortex init --gemini`, offline.

Each step is a real `gemini -p` run against the fake Gemini API
(tests/e2e/fakeothers.py), with cortex's hooks and MCP server from the
project's `.gemini/settings.json`:

1. capture: the model calls cortex's MCP tool `cortex_remember`, runs a shell
   command, then states a decision with a `[MEMORY:]` tag; the AfterAgent hook
   captures it from the chat file Gemini wrote;
2. a second session: the briefing (SessionStart) and the prompt-time recall
   (BeforeAgent) reach the model inside the user message, as `<hook_context>`;
   the person's prompt, not the briefing in front of it, is what recall
   searched for; and neither comes back as a memory.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cortex.memory import parse
from tests.e2e.harness import Sandbox
from tests.e2e.otherclis import GEMINI, GEMINI_VERSION, CliRun, cli_version, gemini
from tests.helpers import commit_all

MARK = "<!-- cortex:injected -->"
DECISION = "Use SQLite, not Postgres, for the local rate cache: no server to run"
REPLY = f"Added the cache module.\n\n[MEMORY: decision: {DECISION}]"
VIA_MCP = "Exchange rates come from the central bank feed, refreshed hourly"
PINNED = "Every API response carries an X-Request-Id header for tracing"
RELATED = "SQLite rate cache files must live on a local disk: WAL mode breaks on NFS"
FILLERS = [
    ("pattern", "Invoices are rendered from Jinja templates in billing/templates"),
    ("context", "The payments team owns the webhook endpoints and reviews their changes"),
    ("gotcha", "Stripe test webhooks arrive out of order during the nightly replay"),
    ("architecture", "Ledger entries are append-only; corrections are new entries"),
    ("pattern", "Every money amount is an integer number of cents"),
    ("decision", "Logs are JSON lines shipped to the collector, never plain text"),
]


@pytest.fixture(scope="module")
def gemini_cli() -> str:
    found = cli_version(GEMINI)
    assert found == GEMINI_VERSION, f"tests/e2e has gemini {found}, package.json pins {GEMINI_VERSION}: run npm ci --prefix tests/e2e"
    return found


def titles(box: Sandbox) -> dict[str, Any]:
    return {m.title: m for m in (parse(p.read_text(encoding="utf-8"), p) for p in box.memories())}


def hook_contexts(body: dict[str, Any]) -> list[str]:
    """The `<hook_context>` texts of a request's last user message, unescaped (Gemini escapes `<` and `>`)."""
    user = [c for c in body.get("contents") or [] if c.get("role") == "user"][-1]
    out = []
    for part in user.get("parts") or []:
        text = str(part.get("text") or "")
        while "<hook_context>" in text:
            start = text.index("<hook_context>") + len("<hook_context>")
            end = text.index("</hook_context>", start)
            out.append(html.unescape(text[start:end]))
            text = text[end:]
    return out


@dataclass
class Story:
    box: Sandbox
    first: CliRun
    after_first: dict[str, Any]
    second: CliRun | None = None


@pytest.fixture(scope="module")
def story(gemini_cli: str, tmp_path_factory: pytest.TempPathFactory) -> Story:
    box = Sandbox(Path(tmp_path_factory.mktemp("gemini-story")))
    box.cortex("init", "--gemini")
    commit_all(box.project, "cortex installed for Gemini")
    run = gemini(box, "add a local cache for the exchange rates", [
        {"mcp": ["cortex", "cortex_remember", {"text": VIA_MCP, "type": "context"}]},
        {"shell": "printf 'import sqlite3\\n' > cache.py"},
        {"text": REPLY},
    ])
    return Story(box, run, {"memories": titles(box), "log": box.log_lines()})


def test_capture_from_a_real_gemini_session(story: Story) -> None:
    run, memories = story.first, story.after_first["memories"]
    assert run.rc == 0, run.stderr[-3000:]
    assert (story.box.project / "cache.py").exists()  # the fake model's shell call really ran
    assert run.transcript is not None and run.transcript.exists()
    decision = memories.get(DECISION)
    assert decision is not None, f"no decision captured; memories: {list(memories)}; log: {story.after_first['log']}"
    assert decision.type == "decision"
    assert decision.source.get("session") == run.session_id
    assert decision.source.get("layer") == "self-report"
    # The briefing Gemini stored in the user message did not come back as a memory or as the prompt.
    assert not any(MARK in m.body or "cortex briefing" in m.body or title.startswith("cortex briefing")
                   for title, m in memories.items())


def test_mcp_server_in_a_real_gemini_session(story: Story) -> None:
    memories = story.after_first["memories"]
    via = next((m for t, m in memories.items() if t.startswith("Exchange rates come from the central bank")), None)
    assert via is not None, list(memories)
    assert via.source.get("kind") == "mcp"
    results = [line for line in story.first.lines if line.get("type") == "tool_result"]
    assert any(via.id in str(line.get("output")) for line in results), results


@pytest.fixture(scope="module")
def second(story: Story) -> Story:
    box = story.box
    from cortex.memory import Memory
    from cortex.store import Store

    config = box.project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("budget_tokens: 500", "budget_tokens: 250", 1),
                      encoding="utf-8")
    store = Store(box.project / ".cortex", "project")
    for kind, title in FILLERS:
        store.create(Memory(id="", type=kind, title=title, body=title + ".\n", priority=5, confidence=0.7))
    box.cortex("remember", PINNED, "--type", "pattern", "--pin")
    box.cortex("remember", RELATED, "--type", "gotcha", "--priority", "1", "--confidence", "0.3")
    story.second = gemini(box, "why did we pick SQLite for the rate cache?", [{"text": "Because of the decision."}])
    return story


def test_briefing_and_recall_reach_the_gemini_model(second: Story) -> None:
    run = second.second
    assert run is not None and run.rc == 0, run and run.stderr[-3000:]
    request = run.api.main_requests[0]
    contexts = [text for text in hook_contexts(request) if MARK in text]
    assert len(contexts) == 2, hook_contexts(request)
    briefing, recall = contexts
    assert "cortex briefing" in briefing and DECISION.split(":")[0] in briefing and PINNED in briefing
    assert RELATED not in briefing
    assert "Memories that may bear on this request" in recall and RELATED in recall
    user_text = "\n".join(str(p.get("text")) for p in request["contents"][-1]["parts"])
    assert "why did we pick SQLite for the rate cache?" in user_text


def test_second_session_captures_nothing_injected(second: Story) -> None:
    memories = titles(second.box)
    assert not any(MARK in m.body or "Memories that may bear" in m.body for m in memories.values())
    assert not any("The CI image has SQLite 3.31" in t or "We keep the cache in SQLite" in t for t in memories)


def test_uninstall_takes_it_back_out(gemini_cli: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    box = Sandbox(Path(tmp_path_factory.mktemp("gemini-uninstall")))
    settings = box.project / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"ui": {"theme": "GitHub"}}\n', encoding="utf-8")
    box.cortex("init", "--gemini")
    box.cortex("uninstall", "--gemini")
    assert settings.read_text(encoding="utf-8") == '{\n  "ui": {\n    "theme": "GitHub"\n  }\n}\n'
    assert not (box.project / "GEMINI.md").exists()
    run = gemini(box, "remember nothing", [{"text": f"[MEMORY: decision: {DECISION}]"}])
    assert run.rc == 0, run.stderr[-2000:]
    assert box.memories() == [] and not any(" stop: " in line for line in box.log_lines())
