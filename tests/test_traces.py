"""Deletion with a trace: a forgotten memory leaves `.cortex/forgotten/<id>.json` (id, title, fingerprint, when,
why), committed with the branch, and writing the same thing again is warned (CLI), or proposed (capture)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cortex.store import Store
from tests.helpers import cortex, cortex_json, git

TEXT = ("The nightly export reads from the replica at 02:00 because the primary's write lock stalled checkout "
        "for minutes during the March incident.")
SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub token's shape, split so no scanner trips on this file


def _trace(project: Path, memory_id: str) -> dict:
    return json.loads((project / ".cortex" / "forgotten" / f"{memory_id}.json").read_text(encoding="utf-8"))


def test_forget_leaves_a_committed_trace_with_its_reason_and_the_same_text_again_is_warned_and_written(project):
    first = cortex("remember", TEXT, "--type", "decision", "--title", "Nightly export reads from the replica",
                   cwd=project).stdout.strip()
    said = cortex("forget", first, "--reason", f"moved to the warehouse job; old token {SECRET}", cwd=project)
    assert said.stdout.strip() == f"{first} archived"
    trace = _trace(project, first)
    assert trace["id"] == first and trace["title"] == "Nightly export reads from the replica"
    assert trace["how"] == "archived" and trace["type"] == "decision"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", trace["forgotten"])
    assert trace["reason"].startswith("moved to the warehouse job; old token [REDACTED")
    raw = (project / ".cortex" / "forgotten" / f"{first}.json").read_text(encoding="utf-8")
    assert SECRET not in raw and "replica at 02:00" not in raw  # no secret, and not the text itself: hashes
    git(project, "add", ".cortex")
    assert f".cortex/forgotten/{first}.json" in git(project, "ls-files").stdout.split()  # travels with the branch

    again = cortex("remember", TEXT, "--type", "decision", "--title", "Nightly export reads from the replica",
                   cwd=project)
    assert again.returncode == 0 and again.stdout.strip() != first  # written: the person asked
    assert f"this repeats a forgotten memory: {first} \"Nightly export reads from the replica\" was archived on " \
        in again.stderr and "moved to the warehouse job" in again.stderr and SECRET not in again.stderr
    close = cortex("remember", TEXT.replace("02:00", "03:00").replace("minutes", "ten minutes"), cwd=project)
    assert f"forgotten memory: {first}" in close.stderr  # a very close text is the same thing
    other = cortex("remember", "Checkout retries a declined card twice before it gives up.", cwd=project)
    assert "forgotten" not in other.stderr


def test_delete_leaves_a_trace_restore_drops_it_and_a_rejected_proposal_leaves_none(project):
    gone = cortex("remember", TEXT, cwd=project).stdout.strip()
    cortex("forget", gone, "--delete", "--yes", "--reason", "wrong: we never had a replica", cwd=project)
    assert _trace(project, gone)["how"] == "deleted"
    assert _trace(project, gone)["reason"] == "wrong: we never had a replica"
    assert "wrong: we never had a replica" in cortex("remember", TEXT, cwd=project).stderr

    kept = cortex("remember", "Rate limits are per API key, not per IP address.", cwd=project).stdout.strip()
    cortex("forget", kept, cwd=project)
    assert _trace(project, kept)["reason"] == ""
    cortex("restore", kept, cwd=project)
    assert not (project / ".cortex" / "forgotten" / f"{kept}.json").exists()  # live again
    assert "forgotten" not in cortex("remember", "Rate limits are per API key, not per IP address.",
                                     cwd=project).stderr

    bad = cortex("forget", kept, "--replaced-by", gone, "--reason", "x", cwd=project, check=False)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "--reason" in bad.stderr


def _line(uuid: str, text: str) -> str:
    return json.dumps({"type": "assistant", "uuid": uuid, "sessionId": "s-1", "gitBranch": "main",
                       "message": {"role": "assistant", "id": f"m-{uuid}", "content": [{"type": "text", "text": text}]}})


def test_capture_writes_what_a_person_forgot_only_as_a_proposal(project, tmp_path):
    tag = "[MEMORY: decision: Use SQLite for the local cache because it needs no server]"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(_line("a1", tag) + "\n", encoding="utf-8")
    payload = {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project),
               "hook_event_name": "Stop", "stop_hook_active": False}
    assert cortex("hook", "stop", cwd=project, input=json.dumps(payload)).returncode == 0
    [first] = [m for m in Store.locate(project).list() if m.title.startswith("Use SQLite")]
    cortex("forget", first.id, "--reason", "we moved to DuckDB", cwd=project)

    with open(transcript, "a", encoding="utf-8") as more:
        more.write(_line("a2", "Again: " + tag) + "\n")
    done = cortex("hook", "stop", cwd=project, input=json.dumps(payload))
    assert done.returncode == 0 and done.stdout == ""  # a hook never blocks
    again = [m for m in Store.locate(project).list(statuses=("active", "proposed"))
             if m.title.startswith("Use SQLite")]
    assert [m.status for m in again] == ["proposed"]  # waits in `cortex inbox` for a person
    assert [row["id"] for row in cortex_json("inbox", cwd=project)] == [again[0].id]
    log = (project / ".cortex" / "state" / "cortex.log").read_text(encoding="utf-8")
    assert f"repeats a forgotten memory: {first.id}" in log and "we moved to DuckDB" in log
