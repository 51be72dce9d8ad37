"""Git hooks and merges, driven by the real git CLI against real repositories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2

from cortex.store import Store
from tests.helpers import add_bare_remote, commit_all, cortex, cortex_json, git, remember


def _decision(project: Path, text: str, *tags: str) -> str:
    """A decision saved in process (the git side is what these tests run for real)."""
    return remember(project, text, type="decision", tags=list(tags)).id


def _path(project: Path, memory_id: str) -> Path:
    return Store.locate(project).get(memory_id).path


def test_install_keeps_a_foreign_hook_and_uninstall_restores_it(project, tmp_path):
    hooks = project / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    marker = tmp_path / "foreign-ran"
    (hooks / "pre-push").write_text(f"#!/bin/sh\ncat > /dev/null\necho ran >> {marker}\n", encoding="utf-8")
    (hooks / "pre-push").chmod(0o755)
    out = cortex("init", "--git-hooks", cwd=project).stdout
    assert "kept your existing pre-push hook" in out
    assert "cortex-managed hook" in (hooks / "pre-push").read_text(encoding="utf-8")
    assert (project / ".cortex" / ".gitattributes").read_text(encoding="utf-8").count("merge=union") == 3
    cortex("project", cwd=project)
    commit_all(project, "cortex store")
    add_bare_remote(project, tmp_path)
    git(project, "push", "-q", "origin", "main")
    assert marker.read_text() == "ran\n"
    cortex("init", "--git-hooks", cwd=project)  # twice: still one chained copy, ours on top
    assert (hooks / "pre-push.pre-cortex").read_text(encoding="utf-8").startswith("#!/bin/sh\ncat")
    cortex("uninstall", "--git-hooks", cwd=project)
    assert (hooks / "pre-push").read_text(encoding="utf-8").startswith("#!/bin/sh\ncat")
    assert not (hooks / "post-merge").exists() and not (hooks / "pre-push.pre-cortex").exists()
    (project / "app.py").write_text("print('one more commit')\n", encoding="utf-8")
    commit_all(project, "after uninstall")
    git(project, "push", "-q", "origin", "main")
    assert marker.read_text() == "ran\nran\n"  # the person's hook still runs, on its own
    assert "merge.cortex-projection.driver" not in git(project, "config", "--list").stdout


def test_pre_push_names_stale_projections_and_lets_the_push_go_on_without_a_commit(project, tmp_path):
    cortex("init", "--git-hooks", cwd=project)
    cortex("project", cwd=project)
    commit_all(project, "cortex store")
    remote = add_bare_remote(project, tmp_path)
    git(project, "push", "-q", "origin", "main")
    _decision(project, "Use uv to manage environments", "tooling")
    (project / "app.py").write_text("print('changed, staged, not ours')\n", encoding="utf-8")
    git(project, "add", "app.py", ".cortex/memories")
    git(project, "commit", "-q", "-m", "add a decision", "--", ".cortex/memories")
    head = git(project, "rev-parse", "HEAD").stdout.strip()
    pushed = git(project, "push", "origin", "main", check=False)
    assert pushed.returncode == 0, pushed.stderr
    warned = [line for line in pushed.stderr.splitlines() if line.startswith("cortex:")]
    assert len(warned) == 1 and "decisions.md out of date" in warned[0]
    assert git(project, "rev-parse", "HEAD").stdout.strip() == head  # cortex made no commit
    assert str(pygit2.Repository(str(remote)).revparse_single("main").id) == head
    assert "app.py" in git(project, "diff", "--cached", "--name-only").stdout  # the person's staging untouched


def test_pre_push_block_mode_stops_a_push_with_stale_projections(project, tmp_path):
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("pre_push: warn", "pre_push: block"), encoding="utf-8")
    assert "pre_push: block" in config.read_text(encoding="utf-8")
    cortex("init", "--git-hooks", cwd=project)
    _decision(project, "Prefer small pull requests")
    commit_all(project, "memories without projections")
    add_bare_remote(project, tmp_path)
    head = git(project, "rev-parse", "HEAD").stdout.strip()
    refused = git(project, "push", "origin", "main", check=False)
    assert refused.returncode != 0 and "push stopped: decisions.md" in refused.stderr
    assert git(project, "rev-parse", "HEAD").stdout.strip() == head


def test_hooks_degrade_when_cortex_is_gone(project, tmp_path):
    from cortex.gitops import install_git_hooks

    install_git_hooks(project, python="/nonexistent/python")
    hook = project / ".git" / "hooks" / "post-merge"
    env = dict(os.environ, PATH="/usr/bin:/bin")
    result = subprocess.run([str(hook)], cwd=project, capture_output=True, text=True, env=env, timeout=30)
    assert result.returncode == 0 and "cortex: not installed any more" in result.stderr


def test_a_branch_switch_costs_one_python_start_writes_nothing_and_the_next_command_follows(project):
    """post-checkout (issue 39: <= 100 ms) only starts the next briefing's build: the hook script tests a file
    instead of starting Python to see whether cortex is installed, the hook itself loads no store or index, and
    the next command's sync is what brings the cache in step with the branch."""
    cortex("init", "--git-hooks", cwd=project)
    script = (project / ".git" / "hooks" / "post-checkout").read_text(encoding="utf-8")
    assert "import cortex" not in script and script.count("-m cortex") == 1
    commit_all(project, "cortex store")
    git(project, "checkout", "-q", "-b", "feature")
    mine = _decision(project, "Feature branch decision: cache invoices with Redis", "cache")
    commit_all(project, "feature decision")
    before = git(project, "status", "--porcelain").stdout
    git(project, "checkout", "-q", "main")
    assert git(project, "status", "--porcelain").stdout == before == ""  # nothing written
    assert mine not in [hit["id"] for hit in cortex_json("recall", "redis invoices cache", cwd=project)]
    git(project, "checkout", "-q", "feature")
    assert [hit["id"] for hit in cortex_json("recall", "redis invoices cache", cwd=project)][:1] == [mine]
    log = project / ".cortex" / "state" / "cortex.log"
    assert "post-checkout" not in (log.read_text(encoding="utf-8") if log.exists() else "")


def test_merging_branches_that_both_added_decisions_needs_no_hand_resolution(project):
    cortex("init", "--git-hooks", cwd=project)
    cortex("project", cwd=project)
    commit_all(project, "cortex store")
    git(project, "checkout", "-q", "-b", "feature")
    _decision(project, "Feature branch decision: cache with Redis", "cache")
    cortex("project", cwd=project)
    commit_all(project, "feature decision")
    git(project, "checkout", "-q", "main")
    _decision(project, "Main branch decision: deploy on Fridays never", "ops")
    cortex("project", cwd=project)
    commit_all(project, "main decision")
    merged = git(project, "merge", "-q", "--no-edit", "feature", check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "CONFLICT" not in merged.stdout + merged.stderr
    page = (project / ".cortex" / "decisions.md").read_text(encoding="utf-8")
    assert "Feature branch decision" in page and "Main branch decision" in page  # git's union driver kept both
    assert cortex("project", "--check", cwd=project).returncode == 0


def test_same_memory_edited_on_both_sides_conflicts_in_that_file_only(project):
    memory_id = _decision(project, "Shared decision about logging")
    commit_all(project, "base")
    path = _path(project, memory_id)
    git(project, "checkout", "-q", "-b", "other")
    path.write_text(path.read_text(encoding="utf-8").replace("logging", "structured logging"), encoding="utf-8")
    commit_all(project, "other edit")
    git(project, "checkout", "-q", "main")
    path.write_text(path.read_text(encoding="utf-8").replace("logging", "plain logging"), encoding="utf-8")
    commit_all(project, "main edit")
    merged = git(project, "merge", "--no-edit", "other", check=False)
    assert merged.returncode != 0
    conflicted = git(project, "diff", "--name-only", "--diff-filter=U").stdout.split()
    assert conflicted == [path.relative_to(project).as_posix()]
    status = cortex("status", cwd=project).stdout
    assert "conflict markers" in status and path.name in status


def test_worktree_install_uses_the_common_hooks_folder(project, tmp_path):
    worktree = tmp_path / "wt"
    git(project, "worktree", "add", "-q", "-b", "wt-branch", str(worktree))
    attributes = project / ".cortex" / ".gitattributes"
    before = attributes.read_bytes() if attributes.exists() else None
    cortex("init", "--git-hooks", cwd=worktree)
    assert (project / ".git" / "hooks" / "pre-push").read_text(encoding="utf-8").count("cortex-managed hook") == 1
    assert (worktree / ".cortex" / "config.yaml").is_file()
    assert "merge=union" in (worktree / ".cortex" / ".gitattributes").read_text(encoding="utf-8")
    assert (attributes.read_bytes() if attributes.exists() else None) == before  # the other worktree's untouched


def test_log_follows_a_memory_through_edits_and_renames(project):
    memory_id = _decision(project, "Use Postgres for the ledger")
    commit_all(project, "first version")
    path = _path(project, memory_id)
    path.write_text(path.read_text(encoding="utf-8").replace("priority: 5", "priority: 8"), encoding="utf-8")  # by hand
    commit_all(project, "raise its priority")
    path.rename(path.with_name(f"renamed-by-hand-{memory_id}.md"))
    commit_all(project, "rename the file")
    Store.locate(project).archive(memory_id)
    commit_all(project, "archive it")
    import json

    entries = json.loads(cortex("log", memory_id[:6], "--json", cwd=project).stdout)
    assert [e["message"] for e in entries] == ["archive it", "rename the file", "raise its priority", "first version"]
    assert entries[-1]["change"] == "added"
    assert any("status: 'active' -> 'archived'" in d for d in entries[0]["details"])
    assert any(d.startswith("moved from") for d in entries[1]["details"])
    assert any("priority: 5 -> 8" in d for d in entries[2]["details"])
    assert "Cortex Test <test@example.com>" == entries[0]["author"]


def test_diff_between_branches_groups_changes_by_kind_and_type(project):
    kept = _decision(project, "Kept decision")
    retired = _decision(project, "Retired decision")
    old = _decision(project, "Old approach")
    commit_all(project, "base")
    git(project, "checkout", "-q", "-b", "feature")
    new = _decision(project, "New approach")
    store = Store.locate(project)
    store.supersede(old, new)
    store.archive(retired)
    gotcha = remember(project, "Watch out for clock skew", type="gotcha").id
    commit_all(project, "feature work")
    import json

    changes = json.loads(cortex("diff", "main..feature", "--json", cwd=project).stdout)
    assert {r["id"] for r in changes["added"]} == {new, gotcha}
    assert [r["id"] for r in changes["superseded"]] == [old]
    assert [r["id"] for r in changes["archived"]] == [retired]
    assert kept not in json.dumps(changes)
    text = cortex("diff", "main..feature", cwd=project).stdout
    assert "added (2):" in text and "  gotcha:" in text and "Watch out for clock skew" in text


def test_recall_and_list_at_an_older_revision_read_git_objects(project):
    first = _decision(project, "Deploy with Ansible playbooks")
    commit_all(project, "v1")
    base = git(project, "rev-parse", "HEAD").stdout.strip()
    Store.locate(project).archive(first)
    second = _decision(project, "Deploy with Kubernetes manifests")
    commit_all(project, "v2")
    import json

    now = [h["id"] for h in json.loads(cortex("recall", "deploy", "--json", cwd=project).stdout)]
    then = [h["id"] for h in json.loads(cortex("recall", "deploy", "--json", "--at", base, cwd=project).stdout)]
    assert now == [second] and then == [first]
    assert [r["id"] for r in json.loads(cortex("list", "--json", "--at", base, cwd=project).stdout)] == [first]
    assert git(project, "status", "--porcelain").stdout.strip() == ""  # nothing checked out or written outside the cache
    bad = cortex("list", "--at", "no-such-rev", cwd=project, check=False)
    assert bad.returncode == 1 and "unknown revision 'no-such-rev'" in bad.stderr


def test_a_planted_secret_stops_the_push_naming_file_and_line(project, tmp_path):
    cortex("init", "--git-hooks", cwd=project)
    cortex("project", cwd=project)
    commit_all(project, "cortex store")
    add_bare_remote(project, tmp_path)
    git(project, "push", "-q", "origin", "main")
    path = _path(project, _decision(project, "CI deploys with a service account"))
    path.write_text(path.read_text(encoding="utf-8") + "\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n", encoding="utf-8")
    cortex("project", cwd=project)
    commit_all(project, "a memory edited by hand, with a key in it")
    refused = git(project, "push", "origin", "main", check=False)
    line = path.read_text(encoding="utf-8").splitlines().index("aws_access_key_id = AKIAIOSFODNN7EXAMPLE") + 1
    rel = path.relative_to(project).as_posix()
    assert refused.returncode != 0 and f"possible secret in {rel}:{line} (AWS Access Key)" in refused.stderr
    assert "main -> main" not in refused.stderr


def test_on_stop_stages_only_cortex_paths_and_never_commits(project):
    from cortex.gitops import record_cortex_changes

    commit_all(project, "store")
    _decision(project, "Staged with the next commit")
    (project / "app.py").write_text("print('the person is mid-edit')\n", encoding="utf-8")
    head = git(project, "rev-parse", "HEAD").stdout.strip()
    staged = record_cortex_changes(project / ".cortex", "stage")
    assert staged and all(p.startswith(".cortex/memories/") for p in staged)
    cached = git(project, "diff", "--cached", "--name-only").stdout.split()
    assert cached == staged and "app.py" not in cached
    assert not any("cache/" in p or "state/" in p for p in cached)
    assert "app.py" in git(project, "status", "--porcelain").stdout  # still the person's, untracked
    git(project, "reset", "-q")
    assert record_cortex_changes(project / ".cortex", "commit") == staged  # an older setting: staged, not committed
    assert git(project, "rev-parse", "HEAD").stdout.strip() == head
    git(project, "reset", "-q")
    assert record_cortex_changes(project / ".cortex", "off") == []
    # a tracked memory file removed from the working tree: staged as removed, and only it
    commit_all(project, "the decision")
    gone = next((project / ".cortex" / "memories").rglob("*.md"))
    gone.unlink()
    removed = record_cortex_changes(project / ".cortex", "stage")
    assert removed == [gone.relative_to(project).as_posix()]
    assert git(project, "diff", "--cached", "--name-status").stdout.split() == ["D", removed[0]]


def test_briefing_at_an_older_revision(project):
    old = _decision(project, "Deploy with Ansible playbooks")
    commit_all(project, "v1")
    base = git(project, "rev-parse", "HEAD").stdout.strip()
    Store.locate(project).archive(old)
    new = _decision(project, "Deploy with Kubernetes manifests")
    commit_all(project, "v2")
    then = cortex("briefing", "--at", base, cwd=project).stdout
    now = cortex("briefing", "--fresh", cwd=project).stdout
    assert old in then and new not in then and f"@ {base[:7]}" in then and "v1" in then
    assert new in now and old not in now
