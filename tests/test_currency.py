"""Currency (issue 42): a superseded memory is never delivered as current — recall, the prompt hook, the
briefing, MCP — and asking for the history (`cortex show`, MCP `cortex_get_memory`) walks every generation."""

from __future__ import annotations

import json

from tests.helpers import cortex, cortex_json, hook
from tests.test_mcp import Client, connect, server_env

TEXTS = ("Webhook retries use tenacity in-process, three attempts, because celery was too heavy then",
         "Webhook retries now use celery with a Redis broker, five attempts, since volume grew tenfold",
         "Webhook retries use arq queues on Redis now, seven attempts, to share the event loop")


def _generations(project) -> list[str]:
    ids = []
    for text in TEXTS:
        ids.append(cortex_json("remember", text, "--type", "decision", "--json", cwd=project)["id"])
        if len(ids) > 1:
            cortex("forget", ids[-2], "--replaced-by", ids[-1], cwd=project)
    return ids  # oldest first


def test_show_walks_every_generation_both_ways(project):
    old, middle, new = _generations(project)
    for asked in (old, middle, new):
        history = cortex_json("show", asked, "--json", cwd=project)["history"]
        assert [row["id"] for row in history] == [new, middle, old]
        assert [row["status"] for row in history] == ["active", "superseded", "superseded"]
    text = cortex("show", middle, cwd=project).stdout
    block = text[text.index("history (newest first):"):].splitlines()[1:4]
    assert [line.split()[0] for line in block] == [new, middle, old] and block[1].endswith("<- this one")
    alone = cortex_json("remember", "Deploys run from the release branch only", "--json", cwd=project)["id"]
    assert [row["id"] for row in cortex_json("show", alone, "--json", cwd=project)["history"]] == [alone]
    assert "history (newest first)" not in cortex("show", alone, cwd=project).stdout


def test_a_superseded_memory_is_never_delivered_as_current(project, tmp_path):
    from anyio.from_thread import start_blocking_portal

    from tests.helpers import cortex_command

    old, middle, new = _generations(project)
    question = "how many attempts do webhook retries make, and with which library?"
    shown = [hit["id"] for hit in cortex_json("recall", question, "--json", cwd=project)]
    assert new in shown and old not in shown and middle not in shown
    marked = {hit["id"]: hit["status"] for hit in cortex_json("recall", question, "--all", "--json", cwd=project)}
    assert marked.get(old) in (None, "superseded") and marked[new] == "active"  # asked for: shown, marked

    briefing = cortex("briefing", "--fresh", cwd=project).stdout
    assert new in briefing and old not in briefing and middle not in briefing

    payload = {"hook_event_name": "UserPromptSubmit", "session_id": "s-currency", "cwd": str(project),
               "prompt": question, "transcript_path": str(project / "t.jsonl")}
    out = hook("prompt", project, payload)
    context = json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"] if out.stdout.strip() else ""
    assert old not in context and middle not in context

    command = cortex_command()
    with start_blocking_portal() as portal:
        with connect(portal, command[0], [*command[1:], "mcp"], project, server_env(tmp_path / "home")) as session:
            client = Client(portal, session, project, {})
            rows = client.call("cortex_search", query=question, scope="project")["results"]
            view = client.call("cortex_get_memory", id=old)
    assert [row["id"] for row in rows if row["id"] in (old, middle, new)] == [new]
    assert [row["id"] for row in view["history"]] == [new, middle, old]
