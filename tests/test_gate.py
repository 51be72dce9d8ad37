"""The gate on capture: what a Stop finds without an explicit [MEMORY: …] tag is proposed, waits in `cortex inbox`,
and reaches the briefing, the pages and the prompt hook only once a person accepts it (docs/capture.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pygit2

from cortex.store import Store
from tests.helpers import commit_all, cortex, cortex_json, hook, remember

UNTAGGED = ("We'll use Redis instead of Memcached for the rate limiter, since Redis keeps counters across restarts "
            "and the limiter must survive a deploy.")
TAGGED = "[MEMORY: decision: Webhook deliveries are retried 5 times with exponential backoff]"


def _line(record_type: str, uuid: str, text: str) -> str:
    message = {"role": record_type, "content": [{"type": "text", "text": text}] if record_type == "assistant" else text}
    if record_type == "assistant":
        message["id"] = f"msg-{uuid}"
    return json.dumps({"type": record_type, "uuid": uuid, "sessionId": "s-1", "gitBranch": "main", "message": message})


def _stop(project: Path, tmp_path: Path, *texts: str) -> None:
    transcript = tmp_path / "t.jsonl"
    lines = [_line("user", "u0", "Pick a store for the rate limiter and set the webhook retry policy")]
    lines += [_line("assistant", f"a{n}", text) for n, text in enumerate(texts)]
    transcript.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = hook("stop", project, {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project),
                                    "hook_event_name": "Stop", "stop_hook_active": False})
    assert result.returncode == 0, result.stderr


def _by_status(project: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in Store.locate(project).list(statuses=()):
        out.setdefault(item.status, []).append(item.title)
    return out


def _proposal(project: Path, text: str, **fields: object) -> str:
    return remember(project, text, status="proposed", source={"kind": "transcript", "layer": "keyword"},
                    link=False, **fields).id


def test_a_stop_proposes_what_no_tag_asked_for_and_keeps_it_out_of_briefing_pages_and_prompt(project, tmp_path):
    _stop(project, tmp_path, UNTAGGED, TAGGED)
    statuses = _by_status(project)
    assert statuses["active"] == ["Webhook deliveries are retried 5 times with exponential backoff"]  # the tag: active
    [proposed] = statuses["proposed"]
    assert "Redis" in proposed
    store = Store.locate(project)
    [item] = store.list(statuses=("proposed",))
    assert item.path is not None and item.path.is_relative_to(project / ".cortex" / "memories")
    rel = item.path.relative_to(project).as_posix()
    assert rel in {entry.path for entry in pygit2.Repository(str(project)).index}  # staged like other captures
    # Not in the pages, the briefing or the prompt hook ...
    decisions = (project / ".cortex" / "decisions.md").read_text(encoding="utf-8")
    assert "Webhook deliveries" in decisions and "Redis" not in decisions
    briefing = cortex("briefing", "--fresh", cwd=project).stdout
    assert item.id not in briefing and "Redis" not in briefing
    assert "1 proposed memory waits for review: `cortex inbox`." in briefing
    prompt = {"session_id": "s", "cwd": str(project), "hook_event_name": "UserPromptSubmit",
              "prompt": "should the rate limiter use Redis or Memcached?"}
    assert item.id not in hook("prompt", project, prompt).stdout
    # ... but found by recall, marked
    hits = cortex_json("recall", "rate limiter Redis or Memcached", "--keyword", cwd=project)
    assert [h["proposed"] for h in hits if h["id"] == item.id] == [True]
    text = cortex("recall", "rate limiter Redis or Memcached", "--keyword", cwd=project).stdout
    assert f"{item.id}  decision" in text and "(proposed)" in text
    assert json.loads(cortex("status", "--json", cwd=project).stdout)["proposed"] == 1
    assert "inbox:    1 proposed by capture" in cortex("status", cwd=project).stdout
    # accepted: in the pages and the briefing, no longer counted
    cortex("inbox", "accept", item.id, cwd=project)
    assert "Redis" in (project / ".cortex" / "decisions.md").read_text(encoding="utf-8")
    briefing = cortex("briefing", "--fresh", cwd=project).stdout
    assert item.id in briefing and "proposed" not in briefing


def test_the_inbox_lists_newest_first_accepts_and_rejects_several_ids_at_once(project):
    first = _proposal(project, "The nightly export writes to the reports bucket, not to the app bucket.",
                      created="2026-11-02T10:00:00Z")
    second = _proposal(project, "Migrations run from the release job, never from the web process.", type="pattern",
                       created="2026-11-03T10:00:00Z")
    third = _proposal(project, "The staging database is rebuilt every night from a masked dump.",
                      created="2026-11-01T10:00:00Z")
    active = remember(project, "Every handler validates its input with pydantic.").id
    rows = cortex_json("inbox", cwd=project)
    assert [r["id"] for r in rows] == [second, first, third]  # newest first
    assert set(rows[0]) >= {"id", "type", "title", "branch", "created"} and rows[0]["branch"] == "main"
    listed = cortex("inbox", cwd=project).stdout
    assert second in listed and "pattern" in listed and "Migrations run from the release job" in listed
    cortex("inbox", "accept", first, second, cwd=project)
    store = Store.locate(project)
    assert store.get(first).status == "active" and store.get(second).status == "active"
    path = store.get(third).path
    rejected = cortex_json("inbox", "reject", third, cwd=project)
    assert rejected[0]["id"] == third and rejected[0]["status"] == "deleted"
    assert path is not None and not path.exists()
    assert cortex("inbox", cwd=project).stdout.strip() == "no proposals"
    # an active memory is not a proposal: nothing changes
    bad = cortex("inbox", "reject", active, cwd=project, check=False)
    assert bad.returncode == 1 and active in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert Store.locate(project).get(active).status == "active"


def test_a_bad_id_among_several_changes_nothing(project):
    good = _proposal(project, "The nightly export writes to the reports bucket, not to the app bucket.")
    for action in ("accept", "reject"):
        result = cortex("inbox", action, good, "abcdef012345", cwd=project, check=False)
        assert result.returncode == 1 and "abcdef012345" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert Store.locate(project).get(good).status == "proposed"
    assert cortex("inbox", "accept", cwd=project, check=False).returncode == 1


def test_inbox_edit_opens_the_editor_then_accepts(project, tmp_path):
    memory_id = _proposal(project, "The nightly export writes to the reports bucket.")
    editor = tmp_path / "editor.py"
    editor.write_text("import sys, pathlib\np = pathlib.Path(sys.argv[1])\n"
                      "p.write_text(p.read_text().replace('reports bucket.', 'reports bucket, never the app bucket.'))\n",
                      encoding="utf-8")
    cortex("inbox", "edit", memory_id, cwd=project, env={"VISUAL": f"{sys.executable} {editor}"})
    item = Store.locate(project).get(memory_id)
    assert item.status == "active" and "never the app bucket" in item.body
    failing = cortex("inbox", "edit", memory_id, cwd=project, check=False, env={"VISUAL": "false"})
    assert failing.returncode == 1 and memory_id in failing.stderr  # not a proposal any more


def test_a_persons_feedback_up_accepts_a_proposal(project):
    memory_id = _proposal(project, "The nightly export writes to the reports bucket, not to the app bucket.")
    out = cortex("feedback", memory_id, "up", cwd=project).stdout
    assert "accepted" in out and Store.locate(project).get(memory_id).status == "active"
    other = _proposal(project, "The staging database is rebuilt every night.")
    cortex("feedback", other, "down", cwd=project)
    assert Store.locate(project).get(other).status == "proposed"  # down accepts nothing


def test_capture_gate_off_writes_what_capture_finds_as_active(project, tmp_path):
    config = project / ".cortex" / "config.yaml"
    text = config.read_text(encoding="utf-8")
    assert "gate: on" in text
    config.write_text(text.replace("gate: on", "gate: off"), encoding="utf-8")
    _stop(project, tmp_path, UNTAGGED)
    statuses = _by_status(project)
    assert "proposed" not in statuses and any("Redis" in t for t in statuses["active"])


def test_gc_and_consolidation_leave_proposals_alone(project):
    text = "The nightly export writes to the reports bucket, not to the app bucket, every night at two."
    a = _proposal(project, text)
    b = _proposal(project, text + " ")
    cortex("gc", cwd=project)
    cortex("consolidate", "--yes", cwd=project, check=False)
    store = Store.locate(project)
    assert store.get(a).status == "proposed" and store.get(b).status == "proposed"


def test_review_lists_the_branchs_proposals(project):
    commit_all(project, "store")
    repo = pygit2.Repository(str(project))
    repo.branches.local.create("feature", repo.head.peel(pygit2.Commit))
    repo.checkout("refs/heads/feature")
    memory_id = _proposal(project, "The nightly export writes to the reports bucket, not to the app bucket.")
    commit_all(project, "capture")
    report = cortex_json("review", "main..feature", cwd=project)
    assert [row["id"] for row in report["proposed"]] == [memory_id]
    text = cortex("review", "main..feature", cwd=project).stdout
    assert "Proposed by capture" in text and memory_id in text
