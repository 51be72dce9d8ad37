"""Lifecycle: decay math, archive after 14 days under 0.3, removal after 30 more, merged branches' progress.

Time is moved with `$CORTEX_NOW` (a fake clock), never with sleeps.
"""

from __future__ import annotations

import time
from pathlib import Path

import pygit2
import pytest

from cortex.lifecycle import DAY, epoch, half_life, iso
from cortex.memory import Memory
from cortex.lifecycle import decayed_confidence
from cortex.store import Store
from tests.helpers import checkout_new_branch, commit_all, cortex, cortex_json, remember

T0 = epoch("2026-01-01T00:00:00Z")


def _memory(kind: str, confidence: float = 0.8, pinned: bool = False) -> Memory:
    return Memory(id="abcdefabcdef", type=kind, title="t", confidence=confidence, pinned=pinned,
                  created="2026-01-01T00:00:00Z", updated="2026-01-01T00:00:00Z")


@pytest.mark.parametrize("kind, days", [("progress", 7), ("context", 30), ("gotcha", 45), ("pattern", 60)])
def test_confidence_halves_at_each_half_life_and_doubles_it_when_read_or_central(kind, days):
    item = _memory(kind)
    assert decayed_confidence(item, T0 + days * DAY) == pytest.approx(0.4)
    assert decayed_confidence(item, T0 + 2 * days * DAY) == pytest.approx(0.2)
    assert decayed_confidence(item, T0 + 2 * days * DAY, access=11) == pytest.approx(0.4)  # read > 10 times
    assert decayed_confidence(item, T0 + 2 * days * DAY, access=10) == pytest.approx(0.2)
    assert decayed_confidence(item, T0 + 2 * days * DAY, centrality=0.6) == pytest.approx(0.4)
    assert decayed_confidence(item, T0 + 2 * days * DAY, centrality=0.5) == pytest.approx(0.2)
    assert half_life(item, 0, 0.0) == days


@pytest.mark.parametrize("kind", ["architecture", "decision", "code_description", "code", "plan"])
def test_some_types_and_pinned_memories_never_decay(kind):
    assert decayed_confidence(_memory(kind), T0 + 3650 * DAY) == 0.8
    assert decayed_confidence(_memory("progress", pinned=True), T0 + 3650 * DAY) == 0.8


def _write(project: Path, kind: str, title: str, confidence: float, updated: str, branch: str | None = None,
           **extra: object) -> Memory:
    store = Store.locate(project)
    item = Memory(id="", type=kind, title=title, body=title + "\n", confidence=confidence, created=updated,
                  updated=updated, branch=branch, **extra)  # type: ignore[arg-type]
    return store.create(item)


def _gc(project: Path, when: float, *args: str) -> list[dict]:
    return cortex_json("gc", *args, cwd=project, env={"CORTEX_NOW": iso(when)})


def test_archived_after_14_days_under_the_threshold_then_removed_30_days_later(project):
    # progress, confidence 0.6, half-life 7 days: under 0.3 from day 7; archived from day 21.
    faded = _write(project, "progress", "Parser rewrite half done", 0.6, "2026-01-01T00:00:00Z", branch="main")
    kept = _write(project, "decision", "Parse with a streaming reader", 0.6, "2026-01-01T00:00:00Z")
    assert _gc(project, T0 + 20.9 * DAY) == []
    dry = _gc(project, T0 + 21.1 * DAY, "--dry-run")
    assert [(a["action"], a["id"]) for a in dry] == [("archive", faded.id)]
    clock = {"CORTEX_NOW": iso(T0 + 21.1 * DAY)}
    assert cortex_json("show", faded.id, cwd=project, env=clock)["status"] == "active"  # a dry run changes nothing
    done = _gc(project, T0 + 21.1 * DAY)
    assert [(a["action"], a["id"]) for a in done] == [("archive", faded.id)]
    shown = cortex_json("show", faded.id, cwd=project, env=clock)
    # stamped with the day it became due (under 0.3 from day 7, plus 14), not the moment gc ran
    assert shown["status"] == "archived" and shown["extra"]["archived"] == iso(T0 + 21 * DAY)
    assert cortex_json("show", kept.id, cwd=project, env=clock)["status"] == "active"  # decisions never decay
    commit_all(project, "memories")
    archived_at = T0 + 21.1 * DAY
    assert _gc(project, archived_at + 29 * DAY) == []
    removed = _gc(project, archived_at + 31 * DAY)
    assert [(a["action"], a["id"]) for a in removed] == [("remove", faded.id)]
    assert not Path(shown["path"]).exists()
    # git history keeps it
    assert cortex_json("log", faded.id, cwd=project)
    assert faded.id in {m["id"] for m in cortex_json("list", "--all", "--at", "HEAD", cwd=project)}


def test_an_uncommitted_archived_memory_is_kept(project):
    gone = _write(project, "context", "Staging runs on a single node", 0.9, "2026-01-01T00:00:00Z")
    Store.locate(project).update(gone.id, {"status": "archived", "archived": "2026-01-02T00:00:00Z"}, touch=False)
    actions = _gc(project, T0 + 90 * DAY)
    assert [(a["action"], a["id"]) for a in actions] == [("keep", gone.id)]
    assert Path(str(gone.path)).exists()


def test_recall_all_shows_an_archived_memory_and_only_restore_brings_it_back(project):
    item = _write(project, "gotcha", "The staging database rejects connections without TLS", 0.9,
                  "2026-01-01T00:00:00Z")
    archived = Store.locate(project).archive(item.id)
    before = Path(str(archived.path)).read_bytes()
    assert item.id not in {h["id"] for h in cortex_json("recall", "staging database TLS", cwd=project)}
    hits = cortex_json("recall", "staging database TLS", "--all", cwd=project)
    assert hits[0]["id"] == item.id and hits[0]["status"] == "archived"  # shown, marked as such ...
    assert "(archived)" in cortex("recall", "staging database TLS", "--all", cwd=project).stdout
    assert Path(str(archived.path)).read_bytes() == before  # ... and reading changed no tracked file
    assert cortex("restore", item.id, cwd=project).stdout.strip() == f"{item.id} restored (was archived)"
    restored = cortex_json("show", item.id, cwd=project)
    assert restored["status"] == "active" and "archived" not in restored.get("extra", {})
    assert cortex("restore", item.id, cwd=project).stdout.strip() == f"{item.id} is already active"


def test_progress_of_a_merged_branch_is_archived(project):
    checkout_new_branch(project, "feature/export")
    done = remember(project, "CSV export endpoint done, tests green", type="progress").id  # on feature/export
    (project / "export.py").write_text("pass\n", encoding="utf-8")
    commit_all(project, "export")
    checkout_new_branch(project, "feature/search")
    open_work = remember(project, "Search ranking half done", type="progress").id
    repo = pygit2.Repository(str(project))
    feature_tip = repo.branches.local["feature/export"].target
    repo.branches.local["main"].set_target(feature_tip)  # a fast-forward merge into main
    actions = cortex_json("gc", cwd=project)
    assert [(a["action"], a["id"]) for a in actions] == [("archive", done)]
    assert "merged into main" in actions[0]["reason"]
    assert cortex_json("show", open_work, cwd=project)["status"] == "active"


def test_a_branch_fast_forwarded_to_main_has_not_merged_its_progress(project):
    checkout_new_branch(project, "feature/wip")
    wip = remember(project, "Importer half done: parsing works, saving does not", type="progress").id
    repo = pygit2.Repository(str(project))
    repo.checkout("refs/heads/main")
    (project / "other.py").write_text("pass\n", encoding="utf-8")
    repo.index.add("other.py")  # someone else's work on main, after the memory (which is not committed)
    repo.index.write()
    signature = pygit2.Signature("Cortex Test", "test@example.com", int(time.time()) + 5)
    repo.create_commit("HEAD", signature, signature, "other work", repo.index.write_tree(), [repo.head.target])
    repo.branches.local["feature/wip"].set_target(repo.branches.local["main"].target)  # `git merge main` (ff)
    repo.checkout("refs/heads/feature/wip")
    assert cortex_json("gc", "--dry-run", cwd=project) == []
    assert cortex_json("show", wip, cwd=project)["status"] == "active"


def test_a_zero_threshold_is_harmless(project):
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("archive_below: 0.3", "archive_below: 0"),
                      encoding="utf-8")
    _write(project, "progress", "Old progress", 0.6, "2026-01-01T00:00:00Z", branch="main")
    assert _gc(project, T0 + 400 * DAY) == []


def test_two_clones_archive_the_same_memory_with_the_same_bytes_whatever_they_read(tmp_path):
    """Issue 39, item 3: upkeep writes a function of tracked files and history. Two clones running gc on
    different days, one of which read the memory many times (access counts are machine-local), archive it
    identically, so their branches merge cleanly; a fresh clone with no reads keeps what its origin kept."""
    from tests.helpers import git, make_repo

    origin = make_repo(tmp_path / "origin")
    cortex("init", cwd=origin)
    faded = _write(origin, "context", "The staging cluster has three nodes", 0.6, "2026-01-01T00:00:00Z")
    young = _write(origin, "context", "The staging cluster moved to eu-west", 0.9, "2026-03-01T00:00:00Z")
    commit_all(origin, "memories")
    clones = []
    for name in ("a", "b"):
        clone = tmp_path / name
        git(tmp_path, "clone", "-q", str(origin), str(clone))
        clones.append(clone)
    # a reads the memory a dozen times (machine-local access counts); b never does
    for _ in range(12):
        cortex("show", faded.id, cwd=clones[0], env={"CORTEX_NOW": iso(T0 + 30 * DAY)})
    # context: half-life 30 days, 0.6 -> under 0.3 on day 30, due on day 44
    a_done = _gc(clones[0], T0 + 45 * DAY)
    b_done = _gc(clones[1], T0 + 70 * DAY)
    assert [(x["action"], x["id"]) for x in a_done] == [("archive", faded.id)]
    assert [(x["action"], x["id"]) for x in b_done] == [("archive", faded.id)]
    name = Path(str(faded.path)).relative_to(origin)
    assert (clones[0] / name).read_bytes() == (clones[1] / name).read_bytes()
    assert "archived: '2026-02-14T00:00:00Z'" in (clones[0] / name).read_text(encoding="utf-8") or \
        "archived: 2026-02-14T00:00:00Z" in (clones[0] / name).read_text(encoding="utf-8")
    assert cortex_json("show", young.id, cwd=clones[1], env={"CORTEX_NOW": iso(T0 + 70 * DAY)})["status"] == "active"
