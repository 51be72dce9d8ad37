"""The pre-push secret scan: every commit a push adds, any branch, any worktree (real git, real hook, bare remote)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cortex.memory import Memory, file_name, new_id, now_iso, render_new
from tests.helpers import add_bare_remote, commit_all, cortex, git

STRIPE_KEY = "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"  # split so this file does not read as holding a key


@pytest.fixture
def pushed(project: Path, tmp_path: Path) -> Path:
    """The project with cortex's git hooks, its store committed with current projections, main pushed to a bare remote."""
    cortex("init", "--git-hooks", cwd=project)
    cortex("project", cwd=project)
    commit_all(project, "cortex store")
    add_bare_remote(project, tmp_path)
    git(project, "push", "-q", "origin", "main")
    return project


def _leaky_memory(project: Path, title: str) -> tuple[str, int]:
    """A memory file holding a live Stripe key, written as a person would (the store's own guard would refuse it).

    Returns its path inside the repository and the line of the key."""
    stamp = now_iso()
    item = Memory(id=new_id(), type="context", title=title, body=f"Deploy notes.\n\nThe key is {STRIPE_KEY} for now.\n",
                  confidence=0.9, created=stamp, updated=stamp, source={"kind": "manual"})
    path = project / ".cortex" / "memories" / "context" / file_name(item)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render_new(item)
    path.write_text(text, encoding="utf-8")
    line = next(n for n, row in enumerate(text.splitlines(), start=1) if STRIPE_KEY in row)
    return path.relative_to(project).as_posix(), line


def _code_commit(project: Path, text: str) -> str:
    (project / "app.py").write_text(f"print({text!r})\n", encoding="utf-8")
    git(project, "commit", "-q", "-m", text, "--", "app.py")
    return git(project, "rev-parse", "HEAD").stdout.strip()


def _remote_branches(project: Path) -> str:
    return git(project, "ls-remote", "--heads", "origin").stdout


def test_a_secret_committed_then_deleted_still_stops_the_push(pushed):
    path, line = _leaky_memory(pushed, "Stripe deploy notes")
    git(pushed, "add", path)
    git(pushed, "commit", "-q", "-m", "notes")
    leaked = git(pushed, "rev-parse", "HEAD").stdout.strip()
    git(pushed, "rm", "-q", path)
    git(pushed, "commit", "-q", "-m", "oops, remove the notes")
    assert not (pushed / path).exists()  # the pushed tree holds no secret; the history does
    refused = git(pushed, "push", "origin", "main", check=False)
    assert refused.returncode != 0, refused.stderr
    assert f"possible secret in {path}:{line}" in refused.stderr
    assert leaked[:12] in refused.stderr
    assert "git rebase -i" in refused.stderr and "push again" in refused.stderr
    assert leaked not in _remote_branches(pushed) and git(pushed, "rev-parse", "HEAD~2").stdout.strip() in _remote_branches(pushed)


def test_a_new_branch_is_scanned_against_what_the_remote_already_has(pushed):
    old_path, _ = _leaky_memory(pushed, "Old notes the remote already holds")
    git(pushed, "add", old_path)
    git(pushed, "commit", "-q", "-m", "old notes")
    git(pushed, "push", "-q", "--no-verify", "origin", "main")  # already in the remote's history: not this push's doing
    git(pushed, "checkout", "-q", "-b", "feature")
    _code_commit(pushed, "a feature")
    accepted = git(pushed, "push", "origin", "feature", check=False)
    assert accepted.returncode == 0, accepted.stderr
    assert "possible secret" not in accepted.stderr and "refs/heads/feature" in _remote_branches(pushed)

    git(pushed, "checkout", "-q", "-b", "feature-2")
    new_path, line = _leaky_memory(pushed, "New notes on a new branch")
    git(pushed, "add", new_path)
    git(pushed, "commit", "-q", "-m", "new notes")
    refused = git(pushed, "push", "origin", "feature-2", check=False)
    assert refused.returncode != 0
    assert f"possible secret in {new_path}:{line}" in refused.stderr and old_path not in refused.stderr


def test_with_no_remote_tracking_refs_a_new_branch_scans_all_its_history(pushed, tmp_path):
    path, line = _leaky_memory(pushed, "Notes pushed without the hook")
    git(pushed, "add", path)
    git(pushed, "commit", "-q", "-m", "notes")
    git(pushed, "push", "-q", "--no-verify", "origin", "main")
    git(pushed, "checkout", "-q", "-b", "feature")
    _code_commit(pushed, "a feature")
    # Pushed by URL, no remote-tracking refs name what that remote has: every reachable commit is scanned.
    refused = git(pushed, "push", str(tmp_path / "remote.git"), "feature", check=False)
    assert refused.returncode != 0 and f"possible secret in {path}:{line}" in refused.stderr


def test_a_merge_is_not_blamed_for_what_it_takes_from_the_remote(pushed):
    git(pushed, "checkout", "-q", "-b", "feature")
    _code_commit(pushed, "a feature")
    git(pushed, "push", "-q", "origin", "feature")
    git(pushed, "checkout", "-q", "main")
    path, _ = _leaky_memory(pushed, "Notes already on the remote's main")
    git(pushed, "add", path)
    git(pushed, "commit", "-q", "-m", "notes")
    git(pushed, "push", "-q", "--no-verify", "origin", "main")
    git(pushed, "checkout", "-q", "feature")
    git(pushed, "merge", "-q", "--no-edit", "main")
    accepted = git(pushed, "push", "origin", "feature", check=False)
    assert accepted.returncode == 0, accepted.stderr


def test_a_worktree_without_the_store_still_scans_what_it_pushes(pushed, tmp_path):
    first = git(pushed, "rev-list", "--max-parents=0", "HEAD").stdout.strip()  # before .cortex/ existed
    git(pushed, "checkout", "-q", "-b", "leak")
    path, line = _leaky_memory(pushed, "Notes on a side branch")
    git(pushed, "add", path)
    git(pushed, "commit", "-q", "-m", "notes")
    leaked = git(pushed, "rev-parse", "HEAD").stdout.strip()
    git(pushed, "checkout", "-q", "main")
    old = tmp_path / "old"
    git(pushed, "worktree", "add", "-q", "--detach", str(old), first)
    assert not (old / ".cortex").exists()
    refused = git(old, "push", "origin", "leak", check=False)
    assert refused.returncode != 0, refused.stderr
    assert f"possible secret in {path}:{line}" in refused.stderr and leaked[:12] in refused.stderr
    assert "refs/heads/leak" not in _remote_branches(pushed)


def test_a_worktree_without_the_store_skips_the_projection_check(pushed, tmp_path):
    first = git(pushed, "rev-list", "--max-parents=0", "HEAD").stdout.strip()
    git(pushed, "checkout", "-q", "-b", "notes")
    from tests.helpers import remember

    remember(pushed, "Use uv to manage environments", type="decision", link=False)
    git(pushed, "add", ".cortex/memories")
    git(pushed, "commit", "-q", "-m", "a decision, projections not rendered")
    git(pushed, "checkout", "-q", "main")
    old = tmp_path / "old"
    git(pushed, "worktree", "add", "-q", "--detach", str(old), first)
    accepted = git(old, "push", "origin", "notes", check=False)
    assert accepted.returncode == 0, accepted.stderr  # clean memories; nothing on disk here to render pages from
    assert "refs/heads/notes" in _remote_branches(pushed)


def test_deleting_a_branch_pushes_nothing_to_scan(pushed, tmp_path):
    git(pushed, "checkout", "-q", "-b", "leak")
    path, _ = _leaky_memory(pushed, "Notes on a branch to delete")
    git(pushed, "add", path)
    git(pushed, "commit", "-q", "-m", "notes")
    git(pushed, "push", "-q", "--no-verify", "origin", "leak", "leak:leak-2")
    git(pushed, "checkout", "-q", "main")
    deleted = git(pushed, "push", "origin", "--delete", "leak", check=False)
    assert deleted.returncode == 0 and "possible secret" not in deleted.stderr, deleted.stderr
    old = tmp_path / "old"
    git(pushed, "worktree", "add", "-q", "--detach", str(old), "main")
    git(old, "rm", "-rq", ".cortex")
    git(old, "commit", "-q", "-m", "no store in this worktree")
    deleted = git(old, "push", "origin", "--delete", "leak-2", check=False)
    assert deleted.returncode == 0 and "possible secret" not in deleted.stderr, deleted.stderr
    assert "leak" not in _remote_branches(pushed)
