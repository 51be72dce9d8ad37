"""A real Claude Code session (the pinned CLI, fake Messages API) that edits a file memory is bound to.

The model reads billing/invoice.py and edits it; cortex's PreToolUse hook (installed by `cortex init --claude`)
adds the memory bound to that file, and it reaches the model's next request next to the Edit's result — once,
and not the memory bound to another file.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from tests.e2e.harness import Sandbox, request_text

ROUNDING = "Invoice totals are rounded per line, never on the sum: the auditors reconcile line by line"
UNRELATED = "The marketing site deploys from the www branch on Fridays"


def test_an_edit_in_a_real_session_gets_the_memories_bound_to_its_file(sandbox: Callable[[str], Sandbox]) -> None:
    box = sandbox("edit")
    box.cortex("init", "--claude")
    (box.project / "billing").mkdir()
    invoice = box.project / "billing" / "invoice.py"
    invoice.write_text("def total(lines):\n    return round(sum(lines), 2)\n", encoding="utf-8")
    rounding = json.loads(box.cortex("remember", ROUNDING, "--type", "decision", "--file", "billing/invoice.py",
                                     "--json").stdout)["id"]
    unrelated = json.loads(box.cortex("remember", UNRELATED, "--type", "gotcha", "--file", "www/deploy.sh",
                                      "--json").stdout)["id"]
    edit = {"file_path": str(invoice), "old_string": "round(sum(lines), 2)",
            "new_string": "sum(round(line, 2) for line in lines)"}
    script: list[Any] = [{"tool_use": {"name": "Read", "input": {"file_path": str(invoice)}}},
                         {"tool_use": {"name": "Edit", "input": edit}},
                         {"text": "Each line is rounded now."}]
    run = box.claude("round each invoice line", script=script, args=("--permission-mode", "acceptEdits"))
    assert run.rc == 0, run.stderr[-2000:]
    assert "sum(round(line, 2) for line in lines)" in invoice.read_text(encoding="utf-8")
    texts = [request_text(r) for r in run.api.main_requests]
    marked = [n for n, text in enumerate(texts) if "Memories bound to billing/invoice.py" in text]
    assert marked and marked[0] == 2, [t[-600:] for t in texts]  # the request after the Edit, not before
    context = texts[2].split("Memories bound to billing/invoice.py", 1)[1].split("</cortex-notes>", 1)[0]
    assert rounding in context and unrelated not in context
    assert texts[-1].count("Memories bound to billing/invoice.py") == 1  # once: the Read got nothing
    shown = (box.project / ".cortex" / "state" / "injections" / f"{run.session_id}.jsonl").read_text(encoding="utf-8")
    assert any(json.loads(line)["event"] == "PreToolUse" and rounding in json.loads(line)["ids"]
               for line in shown.splitlines())
