"""`cortex recall --since/--until` and MCP `cortex_search` since/until: only memories created within the window,
linked ones included (issue 42, "Time"). Real `cortex` subprocesses in a real repository."""

from __future__ import annotations

import json

from cortex.store import Store
from tests.helpers import cortex, cortex_json, make_repo

DATED = [
    ("2026-03-02T09:00:00Z", "The payments webhook retries three times with exponential backoff"),
    ("2026-06-15T14:30:00Z", "The payments webhook retries five times, then parks the event in a dead-letter table"),
    ("2026-09-20T08:00:00Z", "The payments webhook retries are handled by the queue, not by the handler"),
]


def _dated_store(tmp_path):
    project = make_repo(tmp_path / "shop")
    Store.init(project / ".cortex")
    ids = []
    for when, text in DATED:
        made = cortex("remember", text, "--type", "decision", "--json", cwd=project, env={"CORTEX_NOW": when})
        ids.append(json.loads(made.stdout)["id"])
    return project, ids


def test_recall_keeps_to_the_window_asked(tmp_path):
    project, (march, june, september) = _dated_store(tmp_path)
    question = "how many times does the payments webhook retry?"
    everything = {row["id"] for row in cortex_json("recall", question, "--all", cwd=project)}
    assert {march, june, september} <= everything
    summer = cortex_json("recall", question, "--all", "--since", "2026-06-01", "--until", "2026-08-31", cwd=project)
    assert [row["id"] for row in summer] == [june]
    assert {row["id"] for row in cortex_json("recall", question, "--all", "--until", "2026-06-15", cwd=project)} \
        == {march, june}  # a bare day counts whole
    assert [row["id"] for row in cortex_json("recall", question, "--all", "--since", "2026-06-15T14:30:01Z",
                                             cwd=project)] == [september]
    assert cortex_json("recall", question, "--all", "--since", "2027-01-01", cwd=project) == []


def test_a_bad_date_is_one_line_naming_the_option(tmp_path):
    project, _ids = _dated_store(tmp_path)
    bad = cortex("recall", "webhook retries", "--since", "last tuesday", cwd=project, check=False)
    assert bad.returncode != 0 and bad.stdout == ""
    assert bad.stderr.strip().count("\n") == 0 and "--since" in bad.stderr and "last tuesday" in bad.stderr
    for value in ("9999-99-99", "2026-02-30"):  # shaped like a date, on no calendar
        bad = cortex("recall", "webhook retries", "--until", value, cwd=project, check=False)
        assert bad.returncode != 0 and "--until" in bad.stderr and value in bad.stderr


def test_notes_brought_in_with_their_date_are_found_in_their_window_and_hits_say_when(tmp_path):
    project = make_repo(tmp_path / "shop")
    Store.init(project / ".cortex")
    old = cortex("remember", DATED[0][1], "--type", "decision", "--created", "2026-03-02T09:00:00Z", cwd=project)
    day = cortex("remember", DATED[1][1], "--type", "decision", "--created", "2026-06-15", cwd=project)
    old_id, day_id = old.stdout.strip(), day.stdout.strip()
    question = "how many times does the payments webhook retry?"
    rows = cortex_json("recall", question, "--all", "--since", "2026-03-01", "--until", "2026-03-03", cwd=project)
    assert [(row["id"], row["created"]) for row in rows] == [(old_id, "2026-03-02T09:00:00Z")]
    rows = cortex_json("recall", question, "--all", "--since", "2026-06-15", "--until", "2026-06-15", cwd=project)
    assert [(row["id"], row["created"]) for row in rows] == [(day_id, "2026-06-15T00:00:00Z")]
    bad = cortex("remember", "Refunds settle in two days", "--created", "last spring", cwd=project, check=False)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "created" in bad.stderr
    assert len(Store.locate(project).list()) == 2  # nothing written
