"""A team's week with cortex: two clones, a shared bare remote, the git hooks installed, feature branches on
both sides, Stop-hook captures from real transcripts, pushes of new branches, pulls, merges in both orders, a
rebase, checkouts back and forth, recall of archived memories, forget and consolidate.

Every git command must succeed (the `git` helper raises on a non-zero exit), nothing under `.cortex/` may
conflict, every checkout and merge leaves a clean tree, a Stop never leaves a staged file that differs from
the work tree, a Stop's captures without a [MEMORY: …] tag are proposals (not in the pages), and at the end every
memory made on any branch is on main, with the pages current.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from cortex.layout import lock_held
from cortex.store import Store
from tests.helpers import REPO_ROOT, cortex, cortex_json, git, hook, make_repo

TRANSCRIPTS = sorted((REPO_ROOT / "tests" / "data" / "transcripts").glob("*.jsonl"))


class Clone:
    """One teammate's clone: git through the real CLI, cortex through real subprocesses and hooks."""

    def __init__(self, path: Path, name: str) -> None:
        self.path, self.name, self.sessions, self.made, self.proposed = path, name, 0, [], []

    def git(self, *args: str) -> str:
        out = git(self.path, *args)
        assert "CONFLICT" not in out.stdout + out.stderr, (args, out.stdout, out.stderr)
        return out.stdout

    def clean(self) -> None:
        assert self.git("status", "--porcelain") == "", self.git("status")

    def session(self, *tags: str) -> list[str]:
        """A Claude Code session: a real transcript with one more assistant turn carrying `tags`, then Stop."""
        self.sessions += 1
        transcript = self.path.parent / f"{self.name}-{self.sessions}.jsonl"
        shutil.copy(TRANSCRIPTS[self.sessions % len(TRANSCRIPTS)], transcript)
        turn = {"type": "assistant", "uuid": f"{self.name}-{self.sessions}", "sessionId": f"{self.name}-{self.sessions}",
                "message": {"id": f"msg-{self.name}-{self.sessions}", "role": "assistant",
                            "content": [{"type": "text", "text": " ".join(f"[MEMORY: {tag}]" for tag in tags) + (
                                # and a lasting fact said without a tag: capture proposes it (the gate)
                                f" Gotcha: the {self.name} receiver {self.sessions} must be restarted after its "
                                f"config file changes, because it reads that file only at start.")}]}}
        with open(transcript, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(turn) + "\n")
        before = {m.id for m in Store.locate(self.path).list(statuses=())}
        result = hook("stop", self.path, {"session_id": f"{self.name}-{self.sessions}", "transcript_path": str(transcript),
                                          "cwd": str(self.path), "hook_event_name": "Stop", "stop_hook_active": False})
        assert result.returncode == 0 and result.stdout == "", result
        self.settle()
        store = Store.locate(self.path)
        made = sorted({m.id for m in store.list(statuses=())} - before)  # the tags, and what the real session held
        titles = [store.get(memory_id).title for memory_id in made]
        for tag in tags:
            assert any(tag.split(": ", 1)[1][:40] in title for title in titles), (tag, titles)
        # the gate: the tags are active, everything else the real session held is proposed, out of the pages
        for memory_id in made:
            item = store.get(memory_id)
            tagged = any(tag.split(": ", 1)[1][:40] in item.title for tag in tags)
            assert item.status == ("active" if tagged else "proposed"), (item.title, item.status)
        proposed = [m for m in made if store.get(m).status == "proposed"]
        pages = "".join((self.path / ".cortex" / name).read_text(encoding="utf-8")
                        for name in ("decisions.md", "active-plan.md"))
        assert not any(memory_id in pages for memory_id in proposed)
        assert set(proposed) <= {row["id"] for row in cortex_json("inbox", cwd=self.path)}
        self.made += made
        self.proposed += proposed
        # what the Stop (and the upkeep it started) staged is what is on disk
        staged = set(self.git("diff", "--cached", "--name-only").split())
        unstaged = set(self.git("diff", "--name-only").split())
        assert staged and not staged & unstaged, (staged, unstaged)
        assert all(path.startswith(".cortex/") for path in staged), staged
        return made

    def settle(self, limit: float = 60.0) -> None:
        """Wait for the detached `cortex maintain` the Stop started to finish."""
        from cortex.graph import queued_links

        store = Store.locate(self.path)
        lock = store.state_dir / "maintain-run.lock"
        deadline = time.time() + limit
        time.sleep(0.2)
        while time.time() < deadline:
            if not queued_links(store) and not lock_held(str(lock)):
                return
            time.sleep(0.1)
        raise AssertionError(f"cortex maintain did not finish in {limit} s")

    def commit(self, message: str, code: str | None = None) -> None:
        if code:
            (self.path / code).write_text(f"# {message}\n", encoding="utf-8")
            self.git("add", code)
        self.git("commit", "-q", "-m", message)
        self.clean()

    def checkout(self, *args: str) -> None:
        self.git("checkout", "-q", *args)
        self.clean()

    def on_main(self) -> set[str]:
        """Ids of the memory files in main's tree (read from git, not the work tree)."""
        names = self.git("ls-tree", "-r", "--name-only", "main", "--", ".cortex/memories").split()
        return {Path(name).stem.rsplit("-", 1)[-1] for name in names}


@pytest.mark.long
def test_a_team_week_has_no_conflict_no_aborted_command_and_loses_no_memory(tmp_path):
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    alice = Clone(make_repo(tmp_path / "alice"), "alice")
    alice.git("remote", "add", "origin", str(remote))
    cortex("init", "--git-hooks", cwd=alice.path)
    cortex("remember", "Webhook deliveries are retried with exponential backoff, starting at 30 seconds",
           "--type", "decision", "--tag", "webhooks", cwd=alice.path)
    cortex("project", cwd=alice.path)
    alice.git("add", "-A")
    alice.commit("cortex store")
    alice.git("push", "-q", "-u", "origin", "main")
    git(tmp_path, "clone", "-q", str(remote), str(tmp_path / "bob"))
    bob = Clone(tmp_path / "bob", "bob")
    cortex("init", "--git-hooks", cwd=bob.path)
    bob.clean()  # installing the hooks in a clone changes no tracked file

    # Monday: both start a feature branch and capture memories about the same subject.
    alice.checkout("-b", "feature/retries")
    alice.session("decision: Webhook retries stop after 8 attempts; the delivery is then parked in the dead-letter "
                  "table for a person to replay.", "gotcha: The retry worker must run with one process per queue: "
                  "two consumers on one queue double-deliver webhooks.")
    alice.commit("Cap webhook retries", code="retries.py")
    alice.git("push", "-q", "-u", "origin", "feature/retries")  # a new branch: scanned against origin/main
    bob.checkout("-b", "feature/backoff")
    bob.session("decision: Webhook retry backoff is capped at 15 minutes between attempts so a receiver that is "
                "down for hours is not hammered.")
    bob.commit("Cap the backoff", code="backoff.py")
    bob.git("push", "-q", "-u", "origin", "feature/backoff")

    # Tuesday: both branches merge into main, one from each clone, in both orders of arrival.
    alice.checkout("main")
    alice.git("pull", "-q", "--no-rebase")
    alice.git("merge", "-q", "--no-ff", "-m", "Merge feature/retries", "feature/retries")
    alice.clean()
    alice.git("push", "-q")
    bob.checkout("main")
    bob.git("pull", "-q", "--no-rebase")
    bob.clean()
    bob.git("merge", "-q", "--no-ff", "-m", "Merge feature/backoff", "feature/backoff")
    bob.clean()  # both sides changed decisions.md: git's union driver kept both, as a regeneration would
    assert "projections are up to date" in cortex("project", "--check", cwd=bob.path).stdout
    bob.git("push", "-q")

    # Wednesday: alice branched from her old main, then rebases onto the team's main.
    alice.checkout("-b", "feature/dead-letters")
    alice.session("pattern: Dead-letter rows carry the original payload and the last error, so a replay needs "
                  "nothing else.")
    alice.commit("Dead-letter payloads", code="dead_letters.py")
    alice.git("fetch", "-q")
    alice.git("rebase", "-q", "origin/main")
    alice.clean()
    assert "projections are up to date" in cortex("project", "--check", cwd=alice.path).stdout
    alice.git("push", "-q", "-u", "origin", "feature/dead-letters")
    for branch in ("main", "feature/retries", "feature/dead-letters", "main"):  # back and forth
        alice.checkout(branch)
    alice.git("pull", "-q", "--no-rebase")
    alice.git("merge", "-q", "--no-ff", "-m", "Merge feature/dead-letters", "feature/dead-letters")
    alice.clean()
    alice.git("push", "-q")

    # Thursday: bob forgets a memory and finds it again; the same fact captured twice is consolidated.
    bob.git("pull", "-q", "--no-rebase")
    bob.clean()
    gotcha = next(m for m in Store.locate(bob.path).list(types=["gotcha"]))
    cortex("forget", gotcha.id, "--yes", cwd=bob.path)
    before = Path(str(Store.locate(bob.path).get(gotcha.id).path)).read_bytes()
    found = cortex_json("recall", "two consumers double-deliver webhooks", "--all", cwd=bob.path)
    assert found[0]["id"] == gotcha.id and found[0]["status"] == "archived"
    assert Path(str(Store.locate(bob.path).get(gotcha.id).path)).read_bytes() == before  # reading wrote nothing
    bob.git("add", ".cortex")
    bob.commit("Forget the worker gotcha")
    bob.checkout("-b", "feature/staging")
    bob.session("context: The staging webhook receiver is at hooks.staging.example.com and checks no signature.")
    bob.commit("Staging receiver", code="staging.py")
    twins = [cortex("remember", text, cwd=bob.path).stdout.strip() for text in (
        "Rate limits on the public API are 100 requests per minute per token; bursts above that get HTTP 429.",
        "The public API allows 100 requests per minute per token, and bursts over that limit are answered with 429.")]
    bob.git("add", ".cortex")
    bob.commit("Two notes on rate limits")
    merged = cortex_json("consolidate", "--yes", cwd=bob.path)
    assert [sorted(group["from"]) for group in merged["merged"]] == [sorted(twins)], merged
    bob.git("add", ".cortex")
    bob.commit("Consolidate")
    bob.made += [merged["merged"][0]["id"]]
    bob.git("push", "-q", "-u", "origin", "feature/staging")
    bob.checkout("main")
    bob.git("pull", "-q", "--no-rebase")
    bob.git("merge", "-q", "--no-ff", "-m", "Merge feature/staging", "feature/staging")
    bob.clean()
    bob.git("push", "-q")

    # Friday: both clones on main, in step.
    alice.git("pull", "-q", "--no-rebase")
    alice.clean()
    made = set(alice.made) | set(bob.made)
    proposed = set(alice.proposed) | set(bob.proposed)
    assert proposed  # what the real sessions held waits for a person, in each clone's inbox once on main
    for clone in (alice, bob):
        assert proposed <= {row["id"] for row in cortex_json("inbox", cwd=clone.path)}
        assert made <= clone.on_main()
        assert "projections are up to date" in cortex("project", "--check", cwd=clone.path).stdout
        assert cortex("verify", cwd=clone.path).returncode == 0
        clone.clean()
