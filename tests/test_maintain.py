"""`cortex maintain`, the upkeep after capture: queued memories linked, the queue drained, gc once a day,
one run per store at a time, started detached by the Stop hook."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import re
import time
from pathlib import Path

from cortex.events import upkeep_due
from cortex.graph import queue_links, queued_links
from cortex.memory import Memory
from cortex.store import Store
from tests.helpers import cortex, git, hook, remember

DAY = 86400.0
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp()
TOPICS = [  # the invoice memories are related to each other, the rest to nothing here
    ("We store money as integer cents, never floats, to avoid rounding errors in invoices", "decision"),
    ("The nightly backup job copies the ledger database to object storage at 02:00 UTC", "context"),
    ("Frontend builds use Vite; the old webpack config was deleted", "decision"),
    ("Invoice PDFs are rendered by a separate worker so web requests stay fast", "architecture"),
    ("The PDF invoice template lives in templates/invoice.html and is rendered with WeasyPrint", "context"),
    ("Invoice numbers are sequential per tenant and are never reused", "context"),
]
INVOICE_TOTALS = "Invoice totals are summed in integer cents and only formatted as decimals in the PDF"


def _maintain(project: Path, **env: str) -> dict[str, int]:
    """Run `cortex maintain`; its one line ("linked 2, archived 0, removed 0, merged 0") as counts."""
    line = cortex("maintain", cwd=project, env=env or None).stdout.strip()
    return {name: int(count) for count, name in ((c, n) for n, c in re.findall(r"(\w+) (\d+)", line))}


def _unlinked_store(project: Path) -> tuple[Store, dict[str, str]]:
    """The topics, written as capture writes them: not linked yet (that is the upkeep's job)."""
    store = Store.locate(project)
    return store, {text: remember(store, text, type=kind, link=False).id for text, kind in TOPICS}


def _links(store: Store, memory_id: str) -> set[tuple[str, str]]:
    return {(link.rel, link.to) for link in store.get(memory_id).links}


def test_queued_memories_are_linked_the_queue_drained_and_nothing_staged(project):
    store, ids = _unlinked_store(project)
    new = remember(store, INVOICE_TOTALS, type="decision", link=False).id
    (project / "app.py").write_text("print('the person is mid-edit')\n", encoding="utf-8")
    queue_links(store, [new])
    assert upkeep_due(store)
    counts = _maintain(project)
    linked = _links(store, new)
    assert counts["linked"] == len(linked) >= 1 and {rel for rel, _ in linked} == {"relates_to"}
    invoices = {ids[text] for text, _ in TOPICS if "nvoice" in text or "cents" in text}
    assert {to for _, to in linked} <= invoices  # backups and Vite are not related
    assert queued_links(store) == [] and not upkeep_due(store)  # drained (in git, gc is never the upkeep's)
    assert git(project, "diff", "--cached", "--name-only").stdout == ""  # the upkeep stages nothing (issue 39)
    before = {p: p.read_bytes() for p in store.memories_dir.rglob("*.md")}
    assert _maintain(project) == {"linked": 0, "archived": 0, "removed": 0, "merged": 0}  # nothing due: nothing done
    assert {p: p.read_bytes() for p in store.memories_dir.rglob("*.md")} == before


def test_one_maintain_at_a_time_and_a_stamp_from_the_future_is_stale(project):
    store = Store.locate(project)
    queue_links(store, ["0123456789ab"])
    lock = store.state_dir / "maintain-run.lock"
    with open(lock, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # another `cortex maintain` is running
        out = cortex("maintain", cwd=project).stdout
        assert out.strip() == "linked 0, archived 0, removed 0, merged 0"  # it returned at once
        assert queued_links(store) == ["0123456789ab"]  # and left the queue to the running one
    cortex("maintain", cwd=project)  # now it runs: the queue is drained (an unknown id links nothing)
    assert queued_links(store) == []
    assert not upkeep_due(store)  # in a git worktree gc is the person's command: never due for the upkeep


def test_outside_git_gc_runs_at_most_once_a_day_and_a_stamp_from_the_future_is_stale(tmp_path):
    """A store outside git (the global store, a plain folder) has no tracked file to keep still: its upkeep runs
    gc once a day. In a git worktree it never does (issue 39: no write behind the person's back)."""
    project = tmp_path / "notes"
    project.mkdir()
    cortex("init", cwd=project)
    store = Store.locate(project)
    assert upkeep_due(store)

    def faded(title: str) -> str:  # progress at confidence 0.6 (half-life 7 days): due for archiving from day 21
        return store.create(Memory(id="", type="progress", title=title, body=title + "\n", confidence=0.6,
                                   branch="main", created="2026-01-01T00:00:00Z", updated="2026-01-01T00:00:00Z")).id

    first = faded("Parser rewrite half done")
    assert _maintain(project, CORTEX_NOW=str(T0 + 21.1 * DAY))["archived"] == 1
    assert store.get(first).status == "archived"
    second = faded("Importer half done")
    assert _maintain(project, CORTEX_NOW=str(T0 + 21.2 * DAY))["archived"] == 0  # gc ran today
    assert store.get(second).status == "active"
    assert _maintain(project, CORTEX_NOW=str(T0 + 22.2 * DAY))["archived"] == 1  # a day later it runs again
    assert store.get(second).status == "archived"
    (store.state_dir / "gc.stamp").write_text(str(time.time()), encoding="utf-8")
    assert not upkeep_due(store)  # gc ran today
    (store.state_dir / "gc.stamp").write_text(str(time.time() + 90 * DAY), encoding="utf-8")  # a fixed clock ahead
    assert upkeep_due(store)


def test_in_a_git_worktree_the_upkeep_archives_nothing(project):
    store = Store.locate(project)
    faded = store.create(Memory(id="", type="progress", title="Parser rewrite half done", body="Half done.\n",
                                confidence=0.6, branch="main", created="2026-01-01T00:00:00Z",
                                updated="2026-01-01T00:00:00Z")).id
    assert _maintain(project, CORTEX_NOW=str(T0 + 60 * DAY))["archived"] == 0
    assert store.get(faded).status == "active"
    assert f"archived {faded}" in cortex("gc", cwd=project, env={"CORTEX_NOW": str(T0 + 60 * DAY)}).stdout  # by hand


def test_the_stop_hook_leaves_the_links_to_a_detached_upkeep(project, tmp_path):
    store, ids = _unlinked_store(project)
    transcript = tmp_path / "t.jsonl"
    line = {"type": "assistant", "uuid": "a1", "sessionId": "s", "message": {
        "id": "m1", "role": "assistant", "content": [{"type": "text", "text": f"Done. [MEMORY: decision: {INVOICE_TOTALS}]"}]}}
    transcript.write_text(json.dumps(line) + "\n", encoding="utf-8")
    result = hook("stop", project, {"session_id": "s", "transcript_path": str(transcript), "cwd": str(project)})
    assert result.returncode == 0 and result.stdout == ""
    [captured] = [m for m in store.list() if INVOICE_TOTALS in m.body]
    deadline = time.time() + 60  # the hook returned; `cortex maintain` links in its own process
    while time.time() < deadline and not (_links(store, captured.id) and not queued_links(store)):
        time.sleep(0.1)
    linked = {to for _, to in _links(store, captured.id)}
    assert linked and linked <= set(ids.values()) and queued_links(store) == []
