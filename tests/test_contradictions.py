"""Consolidation never merges a contradiction (issue 40), by `--auto`, `--yes` or the run after a Stop: swapped
alternatives, pairs linked `contradicts`, decisions on one subject with different choices; an LLM veto that cannot
be read is a no. Pairs kept apart are listed for a person by `consolidate` and `cortex status`."""

from __future__ import annotations

from pathlib import Path

from cortex.graph import queue_links
from cortex.memory import Link
from cortex.store import Store
from tests.helpers import cortex, cortex_json, fake_claude, remember

TENACITY = "Webhook retries use tenacity in-process, not celery"
CELERY = "Webhook retries use celery with a Redis broker, not tenacity"
CENTS = "Money amounts are stored as integer cents, never as floats, so invoices never drift by rounding."
CENTS_AGAIN = "Store every money amount as integer cents, never floats: invoices must not drift by rounding."


def _low_thresholds(project: Path) -> None:
    """Short memories score lower than long ones: thresholds that group these pairs as duplicates, and an
    automatic run after every capture."""
    config = project / ".cortex" / "config.yaml"
    text = config.read_text(encoding="utf-8")
    for old, new in (("auto_threshold: 0.64", "auto_threshold: 0.3"), ("manual_threshold: 0.55", "manual_threshold: 0.3"),
                     ("every_captures: 10", "every_captures: 1")):
        assert old in text
        text = text.replace(old, new)
    config.write_text(text, encoding="utf-8")


def _pair(project: Path, first: str, second: str) -> list[str]:
    """Two decisions remembered by the real command (which flags them as possible duplicates)."""
    _low_thresholds(project)
    return [cortex_json("remember", text, "--type", "decision", cwd=project)["id"] for text in (first, second)]


def _all_active(project: Path, ids: list[str]) -> bool:
    listed = {row["id"]: row["status"] for row in cortex_json("list", "--all", cwd=project)}
    return all(listed.get(i) == "active" for i in ids) and len(listed) == len(ids)  # nothing merged, nothing new


def _for_a_person(project: Path) -> set[frozenset[str]]:
    return {frozenset((row["id"], row["other"])) for row in cortex_json("status", cwd=project)["contested"]}


def test_the_claim_checks_see_swapped_alternatives_and_different_choices():
    from cortex.claims import conflict, different_choices

    assert conflict(TENACITY, CELERY) is not None
    assert conflict("We use SQLite, not Postgres, for the cache", "The cache uses Postgres, not SQLite") is not None
    assert conflict(CENTS, CENTS_AGAIN) is None
    assert different_choices("Use Postgres for the job queue", "The job queue uses Redis") is not None
    assert different_choices("Webhook retries use tenacity in-process, not celery",
                             "Webhook retries use celery with a Redis broker") is not None
    assert different_choices(CENTS, CENTS_AGAIN) is None


def test_swapped_alternatives_are_not_merged_by_yes_and_are_flagged_for_a_person(project):
    ids = _pair(project, TENACITY, CELERY)
    out = cortex("consolidate", "--yes", cwd=project).stdout
    assert _all_active(project, ids)
    assert "not merged" in out and "kept for a person" in out
    assert _for_a_person(project) == {frozenset(ids)}
    assert all(i in cortex("status", cwd=project).stdout for i in ids)


def test_swapped_alternatives_are_not_merged_by_auto_which_runs_by_hand(project):
    ids = _pair(project, TENACITY, CELERY)
    result = cortex("consolidate", "--auto", cwd=project, check=False)  # no terminal, no --yes: it still runs
    assert result.returncode == 0, result.stderr
    assert _all_active(project, ids)
    assert _for_a_person(project) == {frozenset(ids)}


def test_auto_by_hand_merges_a_true_duplicate_without_asking(project):
    ids = _pair(project, CENTS, CENTS_AGAIN)
    result = cortex("consolidate", "--auto", cwd=project, check=False)
    assert result.returncode == 0, result.stderr
    assert "merged" in result.stdout
    statuses = {row["id"]: row["status"] for row in cortex_json("list", "--all", cwd=project)}
    assert all(statuses[i] == "archived" for i in ids) and len(statuses) == 3


def test_swapped_alternatives_are_not_merged_after_a_stop(tmp_path):
    # The automatic run after capture is the upkeep of a store outside git (the global store, a plain folder):
    # in a git worktree merging is the person's command (issue 39).
    project = tmp_path / "notes"
    project.mkdir()
    cortex("init", cwd=project)
    _low_thresholds(project)
    store = Store.locate(project)
    ids = [remember(store, text, type="decision").id for text in (TENACITY, CELERY)]  # linked and flagged
    queue_links(store, ids)  # what a Stop's capture leaves for the upkeep it starts (`cortex maintain`)
    cortex("maintain", cwd=project)
    assert _all_active(project, ids)
    assert _for_a_person(project) == {frozenset(ids)}


def test_a_pair_linked_contradicts_is_not_merged(project):
    ids = _pair(project, CENTS, CENTS_AGAIN)
    Store.locate(project).add_links(ids[1], [Link("contradicts", ids[0])])
    out = cortex("consolidate", "--yes", cwd=project).stdout
    assert "a contradicts link" in out
    assert _all_active(project, ids)
    cortex("consolidate", "--auto", cwd=project)
    assert _all_active(project, ids)


UNREADABLE = """
import sys
sys.stdin.read()
print("Sure! These two look quite alike to me, though one is a little more specific.")
"""


def test_an_llm_veto_that_cannot_be_read_is_a_no(project, tmp_path):
    ids = _pair(project, CENTS, CENTS_AGAIN)
    env = fake_claude(tmp_path / "bin", UNREADABLE) | {"CORTEX_LLM": "on"}
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("llm: off", "llm: auto"), encoding="utf-8")
    out = cortex("consolidate", "--yes", cwd=project, env=env).stdout
    assert "could not be read" in out
    assert _all_active(project, ids)
    cortex("consolidate", "--auto", cwd=project, env=env)
    assert _all_active(project, ids)
