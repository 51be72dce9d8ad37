"""A real Claude Code session (the pinned CLI, fake Messages API) that starts a sub-agent.

The model calls the Agent tool; cortex's PreToolUse hook records the task, the
SubagentStart hook answers with a briefing scoped to it, and that briefing
reaches the sub-agent's own request to the model — not the unrelated memory.
SubagentStop judges what the sub-agent did with it. Installed both ways:
`cortex init --claude` and `--plugin-dir`.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest

from cortex import salience
from cortex.store import Store
from tests.e2e.harness import Sandbox, request_text

ROUNDING = "Invoice totals are rounded per line, never on the sum"
UNRELATED = "The marketing site deploys from the www branch on Fridays"
REPORT = "Rounded each line in the invoice, never the sum: totals now match."


@pytest.mark.parametrize("install", ["settings", "plugin"])
def test_a_sub_agent_gets_its_scoped_briefing_in_a_real_session(sandbox: Callable[[str], Sandbox], install: str) -> None:
    box = sandbox(f"subagent-{install}")
    box.cortex("init", *(["--claude"] if install == "settings" else []))
    (box.project / "billing").mkdir()
    (box.project / "billing" / "invoice.py").write_text("def total(): ...\n", encoding="utf-8")
    rounding = json.loads(box.cortex("remember", ROUNDING, "--type", "gotcha", "--file", "billing/invoice.py",
                                     "--json").stdout)["id"]
    unrelated = json.loads(box.cortex("remember", UNRELATED, "--json").stdout)["id"]
    task = {"description": "Fix invoice rounding", "prompt": "Open billing/invoice.py and fix how totals are rounded.",
            "subagent_type": "general-purpose"}
    # Claude Code may send a side request with tools before the sub-agent's: both get the sub-agent's answer.
    script: list[Any] = [{"tool_use": {"name": "Agent", "input": task}}, {"text": REPORT}, {"text": REPORT},
                         {"text": "Done."}]
    run = box.claude("fix the invoice rounding", script=script, plugin=install == "plugin",
                     args=("--permission-mode", "acceptEdits"))
    assert run.rc == 0, run.stderr[-2000:]
    briefed = [r for r in run.api.main_requests if "cortex briefing for the `general-purpose` sub-agent" in request_text(r)]
    assert len(briefed) == 1, [request_text(r)[:300] for r in run.api.main_requests]
    seen = request_text(briefed[0])
    assert rounding in seen and "Fix invoice rounding" in seen and "billing/invoice.py" in seen
    # The session's briefing (SessionStart) had both; the sub-agent's only what bears on its task.
    assert unrelated not in seen.split("cortex briefing for the")[1]
    store = Store(box.project / ".cortex", "project")
    shown = (store.state_dir / "injections" / f"{run.session_id}.jsonl").read_text(encoding="utf-8")
    assert '"event": "SubagentStart"' in shown and '"agent": "' in shown
    assert salience.usages(store)[rounding].used >= 1  # the sub-agent's report carried it
