"""The real OpenAI Codex CLI (pinned) against cortex, installed with `cortex init --codex`, offline.

Each step is a real `codex exec` run against the fake Responses API
(tests/e2e/fakeothers.py), with cortex's hooks from the project's
`.codex/hooks.json` and its MCP server from `.codex/config.toml`:

1. capture: the model calls cortex's MCP tool `cortex_remember`, then states a
   decision with a `[MEMORY:]` tag; the Stop hook captures it from the rollout
   file Codex wrote;
2. a second session: the briefing (SessionStart) and the prompt-time recall
   (UserPromptSubmit) reach the model as developer messages;
3. compaction: an auto-compaction runs the PreCompact capture, and the
   `compact` SessionStart puts the briefing back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cortex.memory import parse
from tests.e2e.harness import Sandbox
from tests.e2e.otherclis import CODEX, CODEX_VERSION, CliRun, cli_version, codex, request_text
from tests.helpers import commit_all

MARK = "<!-- cortex:injected -->"
DECISION = "Use SQLite, not Postgres, for the local rate cache: no server to run"
REPLY = f"Added the cache module.\n\n[MEMORY: decision: {DECISION}]"
VIA_MCP = "Exchange rates come from the central bank feed, refreshed hourly"
PINNED = "Every API response carries an X-Request-Id header for tracing"
RELATED = "SQLite rate cache files must live on a local disk: WAL mode breaks on NFS"
QUOTA = "The rates API answers HTTP 200 with an error body when the quota is exhausted"
FILLERS = [
    ("pattern", "Invoices are rendered from Jinja templates in billing/templates"),
    ("context", "The payments team owns the webhook endpoints and reviews their changes"),
    ("gotcha", "Stripe test webhooks arrive out of order during the nightly replay"),
    ("architecture", "Ledger entries are append-only; corrections are new entries"),
    ("pattern", "Every money amount is an integer number of cents"),
    ("decision", "Logs are JSON lines shipped to the collector, never plain text"),
]


@pytest.fixture(scope="module")
def codex_cli() -> str:
    found = cli_version(CODEX)
    assert found == CODEX_VERSION, f"tests/e2e has codex {found}, package.json pins {CODEX_VERSION}: run npm ci --prefix tests/e2e"
    return found


def titles(box: Sandbox) -> dict[str, Any]:
    return {m.title: m for m in (parse(p.read_text(encoding="utf-8"), p) for p in box.memories())}


def developer_messages(body: dict[str, Any]) -> list[str]:
    """The `role: developer` messages of a Responses request: where Codex puts hook additionalContext."""
    out = []
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("role") == "developer":
            out.append("\n".join(str(c.get("text", "")) for c in item.get("content") or [] if isinstance(c, dict)))
    return out


@dataclass
class Story:
    box: Sandbox
    first: CliRun
    after_first: dict[str, Any]
    second: CliRun | None = None


@pytest.fixture(scope="module")
def story(codex_cli: str, tmp_path_factory: pytest.TempPathFactory) -> Story:
    box = Sandbox(Path(tmp_path_factory.mktemp("codex-story")))
    box.cortex("init", "--codex")
    commit_all(box.project, "cortex installed for Codex")
    run = codex(box, "add a local cache for the exchange rates", [
        {"mcp": ["cortex", "cortex_remember", {"text": VIA_MCP, "type": "context"}]},
        {"shell": "printf 'import sqlite3\\n' > cache.py"},
        {"text": REPLY},
    ])
    return Story(box, run, {"memories": titles(box), "log": box.log_lines()})


def test_capture_from_a_real_codex_session(story: Story) -> None:
    run, memories = story.first, story.after_first["memories"]
    assert run.rc == 0, run.stderr[-3000:]
    assert (story.box.project / "cache.py").exists()  # the fake model's shell call really ran
    assert run.transcript is not None and run.transcript.exists()
    decision = memories.get(DECISION)
    assert decision is not None, f"no decision captured; memories: {list(memories)}; log: {story.after_first['log']}"
    assert decision.type == "decision"
    assert decision.source.get("session") == run.session_id
    assert decision.source.get("layer") == "self-report"
    assert any(" stop: " in line and "wrote 1," in line for line in story.after_first["log"])
    # The briefing Codex stored in its rollout (developer messages) did not come back as memories.
    assert not any(MARK in m.body or title.startswith("cortex briefing") for title, m in memories.items())


def test_mcp_server_in_a_real_codex_session(story: Story) -> None:
    memories = story.after_first["memories"]
    outputs = [item for body in story.first.api.main_requests for item in body.get("input") or []
               if isinstance(item, dict) and item.get("type") == "function_call_output"]
    via = next((m for t, m in memories.items() if t.startswith("Exchange rates come from the central bank")), None)
    assert via is not None, (list(memories), outputs)
    assert via.source.get("kind") == "mcp"
    # The tool's answer (the new memory's id) went back to the model.
    assert any(via.id in json.dumps(item) for item in outputs), outputs


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
    story.second = codex(box, "why did we pick SQLite for the rate cache?", [{"text": "Because of the decision."}])
    return story


def test_briefing_and_recall_reach_the_codex_model(second: Story) -> None:
    run = second.second
    assert run is not None and run.rc == 0, run and run.stderr[-3000:]
    request = run.api.main_requests[0]
    contexts = [text for text in developer_messages(request) if MARK in text]
    assert len(contexts) == 2, developer_messages(request)
    briefing, recall = contexts
    assert "cortex briefing" in briefing and DECISION.split(":")[0] in briefing and PINNED in briefing
    assert RELATED not in briefing
    assert "Memories that may bear on this request" in recall and RELATED in recall
    # The recall follows the prompt, as Codex places UserPromptSubmit context.
    order = [item.get("role") for item in request["input"] if isinstance(item, dict) and item.get("type") == "message"]
    texts = [request_text(item) for item in request["input"] if isinstance(item, dict) and item.get("type") == "message"]
    prompt_at = next(n for n, t in enumerate(texts) if "why did we pick SQLite" in t)
    recall_at = next(n for n, t in enumerate(texts) if RELATED in t and MARK in t)
    assert order[prompt_at] == "user" and recall_at > prompt_at


def test_compaction_captures_and_briefs_again(codex_cli: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A turn whose hooks were off is captured by the PreCompact hook of a later auto-compaction."""
    box = Sandbox(Path(tmp_path_factory.mktemp("codex-compact")))
    box.cortex("init", "--codex")
    hooks = box.project / ".codex" / "hooks.json"
    saved = hooks.read_text(encoding="utf-8")
    hooks.rename(hooks.with_suffix(".off"))
    first = codex(box, "what does the rates API do when we run out of quota?",
                  [{"text": f"Noted.\n\n[MEMORY: gotcha priority=9: {QUOTA}]"}])
    assert first.rc == 0, first.stderr[-2000:]
    assert QUOTA not in titles(box)
    hooks.with_suffix(".off").rename(hooks)
    assert hooks.read_text(encoding="utf-8") == saved
    run = codex(box, "and the quota again?", [{"text": "It returns 200."}], resume=first.session_id,
                args=("-c", "model_auto_compact_token_limit=12"))
    assert run.rc == 0, run.stderr[-2000:]
    quota = titles(box).get(QUOTA)
    assert quota is not None and quota.type == "gotcha", (list(titles(box)), box.log_lines())
    assert quota.source.get("session") == first.session_id
    compacted = [r for r in run.records() if r.get("type") == "compacted"]
    assert compacted, "Codex did not compact"
    # After the compaction, the model's next request carries the briefing again, with what PreCompact captured.
    after = run.api.main_requests[-1]
    assert any(MARK in text and QUOTA in text for text in developer_messages(after)), developer_messages(after)


def test_uninstall_takes_it_back_out(story: Story, tmp_path_factory: pytest.TempPathFactory,
                                     codex_cli: str) -> None:
    """After `cortex uninstall --codex` a real session runs no cortex hook and writes no memory."""
    box = Sandbox(Path(tmp_path_factory.mktemp("codex-uninstall")))
    (box.project / ".codex").mkdir()
    (box.project / ".codex" / "config.toml").write_text('# mine\nmodel_reasoning_effort = "low"\n', encoding="utf-8")
    before = (box.project / ".codex" / "config.toml").read_bytes()
    box.cortex("init", "--codex")
    box.cortex("uninstall", "--codex")
    assert (box.project / ".codex" / "config.toml").read_bytes() == before
    assert not (box.project / ".codex" / "hooks.json").exists()
    assert (box.project / "AGENTS.md").exists() is False
    run = codex(box, "remember nothing", [{"text": f"[MEMORY: decision: {DECISION}]"}])
    assert run.rc == 0, run.stderr[-2000:]
    assert box.memories() == [] and not any(" stop: " in line for line in box.log_lines())
