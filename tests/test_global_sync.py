"""The global store as a git repository of its own: `cortex sync --global`, conflicts, promote, the Stop hook.

Two machines are two temp homes (`HOME`, `CORTEX_HOME`) and one bare remote; every step is a real `cortex`
subprocess, and the remote is inspected with the real git CLI. The only fake is `claude -p`, the LLM that
capture's last layer asks (it is what writes global-scope memories from a session).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.helpers import cortex, cortex_json, fake_claude, git, hook, wait_for


def _machine(tmp_path: Path, name: str) -> dict[str, str]:
    home = tmp_path / name
    home.mkdir()
    return {"HOME": str(home), "CORTEX_HOME": str(home / ".cortex")}


def _bare(tmp_path: Path) -> Path:
    remote = tmp_path / "global.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    return remote


def _remember(machine: dict[str, str], text: str, cwd: Path) -> str:
    return cortex("remember", "--global", text, cwd=cwd, env=machine).stdout.strip()


def _ids(machine: dict[str, str], cwd: Path) -> set[str]:
    return {row["id"] for row in cortex_json("list", "--global", "--all", cwd=cwd, env=machine)}


def _sync(machine: dict[str, str], cwd: Path, *args: str) -> dict:
    return cortex_json("sync", "--global", *args, cwd=cwd, env=machine)


def _status(machine: dict[str, str], cwd: Path) -> dict:
    return cortex_json("status", "--global", cwd=cwd, env=machine)


def _store(machine: dict[str, str]) -> Path:
    return Path(machine["CORTEX_HOME"])


def _unclean(machine: dict[str, str]) -> list[str]:
    """What `git status` shows in a machine's global store (config.yaml, each machine's own, is excluded)."""
    return [line for line in git(_store(machine), "status", "--porcelain").stdout.splitlines() if line.strip()]


def test_two_machines_syncing_through_a_bare_remote_both_end_with_every_memory_and_no_conflict(tmp_path):
    a, b, remote = _machine(tmp_path, "a"), _machine(tmp_path, "b"), _bare(tmp_path)
    written = {_remember(a, "Prefer ripgrep over grep for code search", tmp_path),
               _remember(a, "Write commit messages in the imperative mood", tmp_path)}
    first = _sync(a, tmp_path, "--remote", str(remote))
    assert first["created"] and first["pushed"] and first["conflicts"] == []
    # B has memories of its own before it ever syncs: an unrelated history, still no conflict.
    written |= {_remember(b, "Use uv to manage Python virtual environments", tmp_path),
                _remember(b, "Run shellcheck on every shell script before committing", tmp_path)}
    second = _sync(b, tmp_path, "--remote", str(remote))
    assert second["pushed"] and second["conflicts"] == [] and len(second["pulled"]) == 2
    # A second round: both write while the other is away, then both sync.
    written.add(_remember(a, "Pin tool versions in CI with a lock file", tmp_path))
    written.add(_remember(b, "Keep secrets in the OS keychain, never in dotfiles", tmp_path))
    for machine in (a, b, a):
        assert _sync(machine, tmp_path)["conflicts"] == []
    assert len(written) == 6
    assert _ids(a, tmp_path) == written and _ids(b, tmp_path) == written
    for machine in (a, b):
        status = _status(machine, tmp_path)
        assert status["sync"]["conflicts"] == [] and status["problems"] == []
        assert (status["sync"]["ahead"], status["sync"]["behind"]) == (0, 0)
        assert status["sync"]["remote"] == str(remote)
        assert _unclean(machine) == []  # every memory committed; cache/, state/ and config.yaml stay out
    tracked = git(remote, "ls-tree", "-r", "--name-only", "main").stdout.split()
    assert len([path for path in tracked if path.startswith("memories/")]) == 6
    assert not [path for path in tracked if path.startswith(("cache/", "state/")) or path == "config.yaml"]
    history = git(remote, "log", "--format=%P", "main").stdout.splitlines()
    assert all(len(parents.split()) <= 1 for parents in history)  # pulls rebase: a line, no merge commits


def test_the_same_memory_edited_on_both_machines_is_reported_and_neither_edit_is_lost(tmp_path):
    a, b, remote = _machine(tmp_path, "a"), _machine(tmp_path, "b"), _bare(tmp_path)
    memory_id = _remember(a, "Prefer ripgrep over grep for code search", tmp_path)
    _sync(a, tmp_path, "--remote", str(remote))
    _sync(b, tmp_path, "--remote", str(remote))
    other_id = _remember(b, "Use uv to manage Python virtual environments", tmp_path)
    paths = {}
    for machine, edit in ((a, "Use rg -n; it skips ignored files."), (b, "On old hosts without rg, use git grep.")):
        [path] = _store(machine).glob(f"memories/*/*-{memory_id}.md")
        path.write_text(path.read_text(encoding="utf-8").replace("Prefer ripgrep over grep for code search\n",
                                                                 f"Prefer ripgrep. {edit}\n", 1), encoding="utf-8")
        paths[machine["HOME"]] = path.relative_to(_store(machine)).as_posix()
    assert _sync(a, tmp_path)["conflicts"] == []
    second = _sync(b, tmp_path)  # B's edit arrives second: kept as a conflict copy, the remote's stays in place
    [conflict] = second["conflicts"]
    assert conflict["id"] == memory_id and conflict["path"] == paths[b["HOME"]]
    _sync(a, tmp_path)
    for machine in (a, b):
        status = _status(machine, tmp_path)
        assert [c["id"] for c in status["sync"]["conflicts"]] == [memory_id]
        assert any(memory_id in problem and "sync conflict" in problem for problem in status["problems"])
        assert cortex("status", "--global", "--strict", cwd=tmp_path, env=machine, check=False).returncode == 1
        texts = (_store(machine) / conflict["path"]).read_text() + (_store(machine) / conflict["copy"]).read_text()
        assert "it skips ignored files" in texts and "use git grep" in texts  # neither edit lost, on either machine
        assert _ids(machine, tmp_path) == {memory_id, other_id}  # the copy is not a second memory
    # The person merges both edits into the memory on B and says so; A follows at its next sync.
    memory = _store(b) / conflict["path"]
    memory.write_text(memory.read_text(encoding="utf-8").replace(
        "Prefer ripgrep. Use rg -n; it skips ignored files.", "Prefer ripgrep (rg -n); on old hosts, git grep."),
        encoding="utf-8")
    resolved = _sync(b, tmp_path, "--resolve", memory_id)
    assert resolved["resolved"] == [conflict["copy"]] and resolved["pushed"]
    _sync(a, tmp_path)
    for machine in (a, b):
        assert _status(machine, tmp_path)["sync"]["conflicts"] == []
        assert "Prefer ripgrep (rg -n); on old hosts, git grep." in (_store(machine) / conflict["path"]).read_text()
        assert not (_store(machine) / conflict["copy"]).exists()


def test_promote_copies_a_project_memory_to_the_global_store_naming_its_project_and_id(project, tmp_path):
    git(project, "remote", "add", "origin", "https://alice:s3cret@example.com/team/shop.git")
    cortex("init", "--global", cwd=project)  # the global store is a repository from the start
    original = cortex_json("remember", "Money is stored as integer cents, never floats", "--type", "decision",
                           "--tag", "money", "--file", "app.py", cwd=project)
    promoted = cortex_json("promote", original["id"][:6], cwd=project)
    assert promoted["store"] == "global" and promoted["id"] != original["id"]
    assert promoted["title"] == original["title"] and promoted["type"] == "decision" and promoted["tags"] == ["money"]
    assert promoted["scope"] == "global" and promoted["files"] == []
    source = promoted["source"]
    assert source["kind"] == "promoted" and source["id"] == original["id"] and source["project"] == project.name
    assert source["repository"] == "https://example.com/team/shop.git" and source["branch"] == "main"
    shown = cortex("show", promoted["id"], "--global", cwd=tmp_path).stdout
    assert original["id"] in shown and "s3cret" not in shown
    assert cortex_json("show", original["id"], cwd=project)["status"] == "active"  # the team's copy stays
    again = cortex("promote", original["id"], cwd=project, check=False)
    assert again.returncode == 1 and f"promoted already: {promoted['id']}" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    home = Path(cortex_json("status", "--global", cwd=project)["root"])
    committed = git(home, "log", "-1", "--name-only", "--format=").stdout
    assert promoted["id"] in committed  # committed in the global store's own repository


def _stop_capturing_globally(project: Path, tmp_path: Path, before_stop: Any = None) -> tuple[dict, Path, Path]:
    """A synced global store, and a Stop hook whose LLM layer (the fake `claude -p`) proposes one global
    memory; `before_stop(home)` runs just before the hook. The environment, the global store and the remote."""
    answer = [{"type": "pattern", "title": "Prefer ripgrep over grep for code search",
               "content": "ripgrep respects .gitignore and is fast.", "confidence": 0.95, "priority": 5,
               "scope": "global", "tags": []}]
    (tmp_path / "answer.json").write_text(json.dumps(answer), encoding="utf-8")
    script = f"import sys\nsys.stdin.read()\nprint(open({str(tmp_path / 'answer.json')!r}).read())\n"
    env = fake_claude(tmp_path / "bin", script) | {"CORTEX_LLM": "on"}  # the one fake; allowed here
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("llm: off", "llm: on"), encoding="utf-8")
    remote = _bare(tmp_path)
    cortex("sync", "--global", "--remote", str(remote), cwd=project, env=env)
    home = Path(cortex_json("status", "--global", cwd=project)["root"])
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "assistant", "uuid": "a1", "sessionId": "s-1", "message": {
        "id": "m1", "role": "assistant", "content": [{"type": "text", "text": "Use ripgrep, not grep, to search."}]}})
        + "\n", encoding="utf-8")
    if before_stop is not None:
        before_stop(home)
    result = hook("stop", project, {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project)},
                  env=env)
    assert result.returncode == 0 and result.stdout == ""
    return env, home, remote


def _committed(home: Path) -> bool:
    """The captured memory is in the global store's HEAD, and `git status` shows nothing under memories/."""
    tracked = git(home, "ls-tree", "-r", "--name-only", "HEAD").stdout
    return "prefer-ripgrep-over-grep-for-code-search" in tracked and not git(
        home, "status", "--porcelain", "memories").stdout.strip()


def test_the_stop_hooks_global_captures_are_committed_and_reach_another_machine(project, tmp_path):
    env, home, remote = _stop_capturing_globally(project, tmp_path)
    assert wait_for(lambda: _committed(home)), "the global capture was not committed in the global store"
    cortex("sync", "--global", cwd=project, env=env)
    other = _machine(tmp_path, "laptop")
    _sync(other, tmp_path, "--remote", str(remote))
    titles = [row["title"] for row in cortex_json("list", "--global", "--status", "proposed", cwd=tmp_path, env=other)]
    assert titles == ["Prefer ripgrep over grep for code search"]  # the LLM's find: a proposal, travelling too


def test_a_global_capture_committed_while_git_holds_the_index_lock_leaves_the_store_clean(project, tmp_path):
    """`git status` (a prompt, an editor) holds `index.lock` for a moment: the commit waits for it, and the
    index ends in step with HEAD. (Failing on the lock once left the committed memory staged for deletion.)"""
    def lock(home: Path) -> None:
        (home / ".git" / "index.lock").write_bytes(b"")

    env, home, _ = _stop_capturing_globally(project, tmp_path, before_stop=lock)
    written = home / "memories"
    assert wait_for(lambda: any(written.rglob("prefer-ripgrep-over-grep-for-code-search*.md")))
    time.sleep(0.5)  # the worker is at its commit now, the lock still held
    (home / ".git" / "index.lock").unlink()
    assert wait_for(lambda: _committed(home), 30), git(home, "status", "--porcelain").stdout


def test_sync_errors_are_one_line_and_push_nothing(tmp_path):
    machine, remote = _machine(tmp_path, "a"), _bare(tmp_path)
    plain = cortex("sync", cwd=tmp_path, env=machine, check=False)
    assert plain.returncode == 1 and "--global" in plain.stderr and len(plain.stderr.splitlines()) == 1
    _remember(machine, "Prefer ripgrep over grep for code search", tmp_path)
    missing = cortex("sync", "--global", "--remote", str(tmp_path / "nowhere.git"), cwd=tmp_path, env=machine,
                     check=False)
    assert missing.returncode == 1 and "cannot fetch from" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    # A file written by hand, never through the store's guard, holding a secret: refused, nothing pushed.
    folder = _store(machine) / "memories" / "context"
    (folder / "aws-keys-0123456789ab.md").write_text(
        "---\nid: 0123456789ab\ntype: context\ntitle: AWS keys\n---\naws_secret_access_key = "
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n", encoding="utf-8")
    refused = cortex("sync", "--global", "--remote", str(remote), cwd=tmp_path, env=machine, check=False)
    assert refused.returncode == 1 and "aws-keys-0123456789ab.md" in refused.stderr and "secret" in refused.stderr
    assert git(remote, "rev-parse", "--verify", "-q", "main", check=False).returncode != 0  # the remote got nothing
    (folder / "aws-keys-0123456789ab.md").unlink()
    assert _sync(machine, tmp_path)["pushed"]


def test_a_memory_deleted_on_one_machine_and_edited_on_the_other_keeps_the_edit(tmp_path):
    a, b, remote = _machine(tmp_path, "a"), _machine(tmp_path, "b"), _bare(tmp_path)
    memory_id = _remember(a, "Prefer ripgrep over grep for code search", tmp_path)
    _sync(a, tmp_path, "--remote", str(remote))
    _sync(b, tmp_path, "--remote", str(remote))
    [gone] = _store(a).glob(f"memories/*/*-{memory_id}.md")
    gone.unlink()  # what `cortex gc` does to a long-archived memory
    [edited] = _store(b).glob(f"memories/*/*-{memory_id}.md")
    edited.write_text(edited.read_text(encoding="utf-8") + "Also: rg --hidden searches dotfiles.\n", encoding="utf-8")
    for machine in (a, b, a):
        assert _sync(machine, tmp_path)["conflicts"] == []
    for machine in (a, b):
        assert _ids(machine, tmp_path) == {memory_id}
        assert "rg --hidden" in cortex("show", memory_id, "--global", cwd=tmp_path, env=machine).stdout
    log = cortex_json("log", memory_id, "--global", cwd=tmp_path, env=a)  # history from the global repository
    assert [entry["change"] for entry in log][-1] == "added" and len(log) >= 2


def test_a_push_the_remote_refuses_is_fetched_and_replayed_again(tmp_path, isolated_env):
    from cortex import globalsync
    from cortex.store import Store

    here = {"HOME": str(isolated_env), "CORTEX_HOME": str(isolated_env / ".cortex")}
    other, remote = _machine(tmp_path, "b"), _bare(tmp_path)
    first = _remember(here, "Prefer ripgrep over grep for code search", tmp_path)
    _sync(here, tmp_path, "--remote", str(remote))
    _sync(other, tmp_path, "--remote", str(remote))
    second = _remember(here, "Write commit messages in the imperative mood", tmp_path)
    third = _remember(other, "Use uv to manage Python virtual environments", tmp_path)
    _sync(other, tmp_path)  # the remote moves on while this machine still has the old tip
    store = Store.locate(use_global=True)
    globalsync.commit_changes(store)
    repo = globalsync._open(store)
    assert globalsync._push(repo, str(remote), "main") is False  # refused, not forced
    assert git(remote, "log", "-1", "--format=%H", "main").stdout.strip() != str(repo.head.target)
    result = globalsync.sync(store)
    assert result.pushed and result.replayed == 1 and result.conflicts == []
    _sync(other, tmp_path)
    assert _ids(here, tmp_path) == _ids(other, tmp_path) == {first, second, third}


def test_the_same_archive_on_both_machines_at_different_moments_is_no_conflict(tmp_path):
    a, b, remote = _machine(tmp_path, "a"), _machine(tmp_path, "b"), _bare(tmp_path)
    memory_id = _remember(a, "Prefer ripgrep over grep for code search", tmp_path)
    _sync(a, tmp_path, "--remote", str(remote))
    _sync(b, tmp_path, "--remote", str(remote))
    cortex("forget", memory_id, "--global", cwd=tmp_path, env=a | {"CORTEX_NOW": "2026-12-01T08:00:00Z"})
    cortex("forget", memory_id, "--global", cwd=tmp_path, env=b | {"CORTEX_NOW": "2026-12-01T21:30:00Z"})
    for machine in (a, b, a):
        assert _sync(machine, tmp_path)["conflicts"] == []
    for machine in (a, b):
        assert cortex_json("show", memory_id, "--global", cwd=tmp_path, env=machine)["status"] == "archived"
        assert _status(machine, tmp_path)["sync"]["conflicts"] == []


def test_a_git_clone_of_the_remote_syncs_the_same_branch_as_the_machine_that_made_it(tmp_path):
    """Issue 39, item 8: a bare remote made by `git init --bare` names `master` as HEAD while cortex pushes
    `main`; a `git clone` of it on a second machine checks out nothing. Its first `cortex sync` must still sync
    `main` (the other machine's memories arrive, its own reach the other machine), never a branch of its own."""
    a, b, remote = _machine(tmp_path, "a"), _machine(tmp_path, "b"), _bare(tmp_path)
    first = _remember(a, "Prefer ripgrep over grep for code search", tmp_path)
    _sync(a, tmp_path, "--remote", str(remote))
    git(tmp_path, "clone", "-q", str(remote), b["CORTEX_HOME"])  # HEAD names master: nothing is checked out
    pulled = _sync(b, tmp_path)
    assert first in _ids(b, tmp_path), pulled
    second = _remember(b, "Run the formatter before every commit", tmp_path)
    _sync(b, tmp_path)
    _sync(a, tmp_path)
    assert {first, second} <= _ids(a, tmp_path)
    branches = git(remote, "for-each-ref", "--format=%(refname)", "refs/heads").stdout.split()
    assert branches == ["refs/heads/main"], branches


def test_a_remote_whose_only_branch_is_not_main_is_an_error_naming_both(tmp_path):
    """Issue 39, item 8: a remote holding `master` and no `main` is named with both branches, exit non-zero,
    and nothing is pushed beside it."""
    a, remote = _machine(tmp_path, "a"), _bare(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    git(tmp_path, "init", "-q", "-b", "master", str(elsewhere))
    (elsewhere / "notes.md").write_text("not cortex\n", encoding="utf-8")
    git(elsewhere, "add", "notes.md")
    git(elsewhere, "-c", "user.name=x", "-c", "user.email=x@example.com", "commit", "-q", "-m", "notes")
    git(elsewhere, "push", "-q", str(remote), "master")
    _remember(a, "Prefer ripgrep over grep for code search", tmp_path)
    result = cortex("sync", "--global", "--remote", str(remote), cwd=tmp_path, env=a, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "master" in line and "main" in line, line
    branches = git(remote, "for-each-ref", "--format=%(refname)", "refs/heads").stdout.split()
    assert branches == ["refs/heads/master"], branches
