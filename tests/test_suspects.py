"""The suspects queue (issue 42): pairs of active memories that cannot both hold, raised with both ids and why in
`cortex suspects`, `cortex status`, `cortex review` and MCP; a cleared pair stays cleared on every clone."""

from __future__ import annotations

import json
from pathlib import Path

from anyio.from_thread import start_blocking_portal

from tests.helpers import commit_all, cortex, cortex_command, cortex_json, git, make_repo
from tests.test_mcp import connect, server_env

RETRIES_3 = "The payments worker retries failed charges 3 times before alerting on-call."
RETRIES_5 = "The payments worker retries failed charges 5 times before alerting on-call."


def _remember(project: Path, text: str, *args: str) -> str:
    return str(cortex_json("remember", text, *args, cwd=project)["id"])


def _pairs(project: Path) -> dict[frozenset[str], dict[str, str]]:
    return {frozenset((row["a"], row["b"])): row for row in cortex_json("suspects", cwd=project)}


def test_a_value_contradiction_between_linked_memories_is_raised_with_both_sides_and_why(project):
    old = _remember(project, RETRIES_3, "--type", "decision")
    new = _remember(project, RETRIES_5, "--type", "decision")
    cortex("links", "add", new, old, cwd=project)  # someone connected them: not drift, a contradiction
    row = _pairs(project)[frozenset((old, new))]
    assert row["kind"] == "contradiction"
    assert row["reason"] in ("number: 3 vs 5", "number: 5 vs 3")
    assert {row["a_title"], row["b_title"]} == {RETRIES_3.rstrip("."), RETRIES_5.rstrip(".")}
    text = cortex("suspects", cwd=project).stdout
    assert f"contradiction: {row['a']} \"{row['a_title']}\" vs {row['b']}" in text
    assert "why: number:" in text and "1 open pair" in text


def test_a_unit_contradiction_is_raised_and_the_same_value_in_other_units_is_not(project):
    hours = _remember(project, "Session cookies expire after 2 hours of inactivity.")
    minutes = _remember(project, "Session cookies expire after 90 minutes of inactivity.")
    same = _remember(project, "Session cookies expire after 120 minutes of inactivity.")
    pairs = _pairs(project)
    assert "2 hours vs 90 minutes" in pairs[frozenset((hours, minutes))]["reason"] \
        or "90 minutes vs 2 hours" in pairs[frozenset((hours, minutes))]["reason"]
    assert frozenset((hours, same)) not in pairs  # 2 hours is 120 minutes
    assert frozenset((minutes, same)) in pairs


def test_an_extra_fact_and_another_subject_are_not_raised(project):
    _remember(project, RETRIES_3)
    _remember(project, "The payments worker retries failed charges 3 times before alerting on-call, with "
                       "exponential backoff between tries.")
    _remember(project, "The API gateway request timeout is 30 seconds.")
    _remember(project, "The search indexer request timeout is 60 seconds.")
    _remember(project, "Until the 2.0 release, the payments worker retried failed charges 5 times.")
    assert cortex_json("suspects", cwd=project) == []
    assert cortex("suspects", cwd=project).stdout.strip() == "0 open pairs"


def test_drift_two_unlinked_memories_on_one_subject_with_different_values(project):
    old = _remember(project, "Nightly backups of the ledger database are kept for 30 days.")
    new = _remember(project, "Nightly backups of the ledger database are kept for 14 days, then pruned.")
    row = _pairs(project)[frozenset((old, new))]
    assert row["kind"] == "drift" and "30 days" in row["reason"] and "14 days" in row["reason"]


def test_negation_and_permission_are_contradictions(project):
    never = _remember(project, "Webhook signatures must never be skipped in staging.")
    fine = _remember(project, "Skipping webhook signatures in staging is fine.")
    cached = _remember(project, "The billing service caches exchange rates for an hour.")
    denied = _remember(project, "It is not true that the billing service caches exchange rates.")
    pairs = _pairs(project)
    assert pairs[frozenset((never, fine))]["reason"].startswith("permission:")
    assert pairs[frozenset((cached, denied))]["kind"] == "contradiction"


def test_a_cleared_pair_stays_cleared_in_a_fresh_clone(project, tmp_path):
    old = _remember(project, RETRIES_3)
    new = _remember(project, RETRIES_5)
    assert frozenset((old, new)) in _pairs(project)
    cleared = cortex_json("suspects", "clear", new, old, cwd=project)
    assert [(row["a"], row["b"]) for row in cleared] == [tuple(sorted((old, new)))]
    assert (project / ".cortex" / "cleared" / f"{min(old, new)}-{max(old, new)}.json").is_file()
    assert _pairs(project) == {}
    commit_all(project, "memories and a cleared pair")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project), str(clone))
    assert not (clone / ".cortex" / "cache").exists()  # a fresh clone: its own index, built now
    assert cortex_json("suspects", cwd=clone) == []
    again = _remember(clone, "The payments worker retries failed charges 7 times before alerting on-call.")
    assert {frozenset((again, old)), frozenset((again, new))} <= set(_pairs(clone))  # only that pair is cleared


def test_clear_refuses_an_odd_list_or_an_unknown_id_and_writes_nothing(project):
    old = _remember(project, RETRIES_3)
    odd = cortex("suspects", "clear", old, cwd=project, check=False)
    assert odd.returncode != 0 and "pairs of ids" in odd.stderr
    unknown = cortex("suspects", "clear", old, "abcdef012345", cwd=project, check=False)
    assert unknown.returncode != 0 and "abcdef012345" in unknown.stderr
    assert not (project / ".cortex" / "cleared").exists()


def test_a_superseded_memory_is_never_in_a_pair(project):
    old = _remember(project, RETRIES_3)
    new = _remember(project, RETRIES_5)
    assert frozenset((old, new)) in _pairs(project)
    cortex("forget", old, "--replaced-by", new, cwd=project)
    assert _pairs(project) == {}


def test_status_counts_the_queue_and_says_how_to_see_it(project):
    _remember(project, RETRIES_3)
    assert "suspects" not in cortex("status", cwd=project).stdout
    _remember(project, RETRIES_5)
    assert cortex_json("status", cwd=project)["suspects"] == 1
    line = next(ln for ln in cortex("status", cwd=project).stdout.splitlines() if ln.startswith("suspects:"))
    assert "1 pairs" in line and "`cortex suspects`" in line


def test_review_lists_the_pairs_a_branch_introduces_but_not_a_cleared_one(project):
    kept = _remember(project, "The CSV export job runs at 02:00 UTC every night.", "--type", "gotcha")
    commit_all(project, "base")
    git(project, "checkout", "-q", "-b", "pr")
    moved = _remember(project, "The CSV export job runs at 04:00 UTC every night.", "--type", "gotcha")
    commit_all(project, "pr")
    report = json.loads(cortex("review", "main..pr", "--json", cwd=project).stdout)
    found = [w for w in report["warnings"] if w["kind"] == "contradiction"]
    assert [(w["id"], w["other"]["id"]) for w in found] == [(moved, kept)] and "02:00" in found[0]["reason"]
    assert "**Contradiction:**" in cortex("review", "main..pr", cwd=project).stdout
    cortex("suspects", "clear", kept, moved, cwd=project)
    commit_all(project, "cleared")
    report = json.loads(cortex("review", "main..pr", "--json", cwd=project).stdout)
    assert not [w for w in report["warnings"] if w["kind"] == "contradiction"]


def test_mcp_lists_and_clears_the_queue(tmp_path):
    project = make_repo(tmp_path / "project")
    cortex("init", cwd=project)
    old = _remember(project, RETRIES_3)
    new = _remember(project, RETRIES_5)
    command = cortex_command()
    with start_blocking_portal() as portal:
        with connect(portal, command[0], [*command[1:], "mcp"], project, server_env(tmp_path / "home")) as session:
            listed = portal.call(session.call_tool, "cortex_suspects", {}).structured_content
            assert [(p["a"], p["b"], p["kind"]) for p in listed["pairs"]] == [(*sorted((old, new)), "drift")]
            cleared = portal.call(session.call_tool, "cortex_suspects", {"clear": [[old, new]]})
            assert not cleared.is_error and cleared.structured_content["cleared"] == [sorted((old, new))]
            again = portal.call(session.call_tool, "cortex_suspects", {}).structured_content
            assert again["pairs"] == []
            bad = portal.call(session.call_tool, "cortex_suspects", {"clear": [[old]]})
            assert bad.is_error
    assert cortex_json("suspects", cwd=project) == []


def test_status_in_a_big_store_reads_the_kept_queue_and_never_checks_itself(project):
    """Past `suspects.SMALL` active memories `cortex status` stays quick: it says the queue was not checked in
    this clone, then (after `cortex suspects`) the kept count, marked as of the last check once memories change."""
    from cortex.suspects import SMALL

    folder = project / ".cortex" / "memories" / "context"
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(SMALL + 1):
        ident = f"{n:012x}"
        (folder / f"note-{n}-{ident}.md").write_text(
            f"---\nid: '{ident}'\ntype: context\ntitle: Module m{n} owns table t{n}\nstatus: active\n"
            f"created: '2026-01-01T00:00:00Z'\n---\nModule m{n} owns table t{n}.\n", encoding="utf-8")
    _remember(project, RETRIES_3)
    _remember(project, RETRIES_5)
    report = cortex_json("status", cwd=project)
    assert report["suspects_checked"] == "never" and report["suspects"] == 0
    assert "suspects: not checked yet" in cortex("status", cwd=project).stdout
    assert not (project / ".cortex" / "state" / "suspects.json").exists()  # status compared nothing
    assert len(_pairs(project)) == 1  # `cortex suspects` checks and keeps the queue
    assert cortex_json("status", cwd=project)["suspects"] == 1
    _remember(project, "The nightly export writes to the reports bucket.")
    line = next(ln for ln in cortex("status", cwd=project).stdout.splitlines() if ln.startswith("suspects:"))
    assert "1 pairs" in line and "at the last check" in line
