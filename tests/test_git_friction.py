"""Git without friction (issue 39): a team's week with three kinds of clone and one bare remote.

- alice: cortex with its git hooks (`cortex init --claude --git-hooks --agents`),
- bob: cortex installed, no git hooks (a teammate who never ran `--git-hooks`),
- carol: no cortex at all: plain git, as a host's merge button is.

Feature branches on all sides add, supersede, forget and archive memories; Stop-hook captures from real
transcripts are followed at once by a commit; `cortex gc` runs on two branches; new branches are pushed right
after `cortex init` and after `remember`; all three merge pull requests, in both orders; alice rebases and
checks out back and forth. Asserted throughout: no conflict, no failed git command (push included), no commit
authored by cortex, no staged file that differs from the work tree, no untracked file left by cortex, a clean
tree after every step; at the end every page equals its regeneration, and a fresh clone whose memories are
months old runs a Stop and its upkeep archiving nothing and leaving `git status` clean.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from cortex.layout import lock_held
from cortex.store import Store
from tests.helpers import REPO_ROOT, cortex, git, hook, make_repo, remember

TRANSCRIPTS = sorted((REPO_ROOT / "tests" / "data" / "transcripts").glob("*.jsonl"))
MONTHS_AGO = str(int(time.time()) - 120 * 86400)  # `$CORTEX_NOW`: the memories of the week's first day are old


class Clone:
    """One teammate's clone; every git command through the real CLI must succeed without a conflict."""

    def __init__(self, path: Path, name: str, messages: set[str]) -> None:
        self.path, self.name, self.sessions, self.messages = path, name, 0, messages

    def git(self, *args: str) -> str:
        out = git(self.path, *args, check=False)
        assert out.returncode == 0, (self.name, args, out.stdout, out.stderr)
        assert "CONFLICT" not in out.stdout + out.stderr, (self.name, args, out.stdout, out.stderr)
        return out.stdout

    def cortex(self, *args: str, env: dict[str, str] | None = None) -> str:
        return cortex(*args, cwd=self.path, env=env).stdout

    def clean(self) -> None:
        """Nothing modified, staged or untracked: what cortex wrote is either committed or not in the tree."""
        assert self.git("status", "--porcelain", "--untracked-files=all") == "", (self.name, self.git("status"),
                                                                                   self.git("diff"))

    def staged_is_on_disk(self) -> None:
        """No file staged and then changed again (a commit now would take an older version)."""
        staged = set(self.git("diff", "--cached", "--name-only").split())
        changed = set(self.git("diff", "--name-only").split())
        assert not staged & changed, (self.name, staged & changed)

    def commit(self, message: str, code: str | None = None) -> None:
        if code:
            (self.path / code).write_text(f"# {message}\n", encoding="utf-8")
        self.git("add", "-A")
        self.messages.add(message)
        self.git("commit", "-q", "-m", message)
        self.clean()

    def merge(self, branch: str) -> None:
        message = f"Merge {branch} ({self.name})"
        self.messages.add(message)
        self.git("merge", "-q", "--no-ff", "-m", message, branch)
        self.clean()

    def pull(self) -> None:
        self.git("pull", "-q", "--ff-only")
        self.clean()

    def checkout(self, *args: str) -> None:
        self.git("checkout", "-q", *args)
        self.clean()

    def session(self, *tags: str, untagged: tuple[str, ...] = ()) -> None:
        """A Claude Code session ends: a real transcript plus a turn carrying `tags` and a turn for each of
        `untagged` (what capture's gate only proposes), then the Stop hook."""
        self.sessions += 1
        transcript = self.path.parent / f"{self.name}-{self.sessions}.jsonl"
        shutil.copy(TRANSCRIPTS[self.sessions % len(TRANSCRIPTS)], transcript)
        texts = [" ".join(f"[MEMORY: {tag}]" for tag in tags), *untagged]
        with open(transcript, "a", encoding="utf-8") as handle:
            for n, text in enumerate(texts):
                turn = {"type": "assistant", "uuid": f"{self.name}-{self.sessions}-{n}",
                        "sessionId": f"{self.name}-{self.sessions}",
                        "message": {"id": f"msg-{self.name}-{self.sessions}-{n}", "role": "assistant",
                                    "content": [{"type": "text", "text": text}]}}
                handle.write(json.dumps(turn) + "\n")
        result = hook("stop", self.path, {"session_id": f"{self.name}-{self.sessions}",
                                          "transcript_path": str(transcript), "cwd": str(self.path),
                                          "hook_event_name": "Stop", "stop_hook_active": False})
        assert result.returncode == 0 and result.stdout == "", result
        self.staged_is_on_disk()

    def settle(self, limit: float = 90.0) -> None:
        """Wait for the detached upkeep a Stop started (links, gc) to finish."""
        store = Store.locate(self.path)
        lock = store.state_dir / "maintain-run.lock"
        deadline = time.time() + limit
        time.sleep(0.3)
        while time.time() < deadline:
            if not lock_held(str(lock)):
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: the upkeep did not finish in {limit} s")

    def active(self) -> set[str]:
        return {m.id for m in Store.locate(self.path).list()}

    def proposals(self) -> dict[str, str]:
        """id -> title of what waits in `cortex inbox`."""
        return {m["id"]: m["title"] for m in json.loads(self.cortex("inbox", "--json"))}


def _page_check(clone: Clone) -> None:
    assert "projections are up to date" in clone.cortex("project", "--check")


@pytest.mark.long
def test_a_week_with_hooks_without_hooks_and_without_cortex_has_no_friction(tmp_path):
    """Items 1, 2, 4, 5 of issue 39: the week, its first memories made today, no code outlines, no fresh clone."""
    _week(tmp_path, months_old=False, outlines=False, fresh_clone=False)


@pytest.mark.long
def test_the_whole_week_with_months_old_memories_code_outlines_and_a_fresh_clone(tmp_path):
    _week(tmp_path, months_old=True, outlines=True, fresh_clone=True)


def _week(tmp_path: Path, *, months_old: bool, outlines: bool, fresh_clone: bool) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    messages: set[str] = set()

    # Monday: alice sets cortex up and pushes at once (item 1: the first push succeeds, nothing more to commit).
    alice = Clone(make_repo(tmp_path / "alice"), "alice", messages)
    messages.update(git(alice.path, "log", "--format=%s").stdout.split("\n"))
    alice.git("remote", "add", "origin", str(remote))
    alice.cortex("init", "--claude", "--git-hooks", "--agents")
    old = {"CORTEX_NOW": MONTHS_AGO} if months_old else None
    for text, kind in (("Invoices are numbered per tenant and year, never globally", "decision"),
                       ("The nightly export writes CSV in UTF-8 with a BOM, because the accountants open it in Excel",
                        "decision"),
                       ("Retry the payment webhook at most five times", "decision"),
                       ("PDF rendering runs in a worker pool of four processes", "context")):
        alice.cortex("remember", text, "--type", kind, env=old)
    alice.commit("Set up cortex")
    alice.git("push", "-q", "-u", "origin", "main")
    alice.clean()

    bob = Clone(tmp_path / "bob", "bob", messages)
    git(tmp_path, "clone", "-q", str(remote), str(bob.path))
    bob.clean()
    carol = Clone(tmp_path / "carol", "carol", messages)
    git(tmp_path, "clone", "-q", str(remote), str(carol.path))
    carol.clean()

    # alice: a decision by hand, committed and pushed on a new branch (item 1: no failed push after `remember`).
    alice.checkout("-b", "feat/numbering")
    alice.cortex("remember", "Credit notes share the invoice number sequence of their tenant", "--type", "decision")
    alice.staged_is_on_disk()
    alice.commit("Credit notes numbering", code="numbering.py")
    alice.git("push", "-q", "-u", "origin", "feat/numbering")
    alice.clean()

    # bob (no git hooks): a session's captures, committed the moment the session ends.
    bob.checkout("-b", "feat/export")
    bob.session("decision: The export job streams rows to the CSV file instead of building it in memory, so "
                "tenants with a million invoices do not run the worker out of memory.",
                "gotcha: Excel drops leading zeros of invoice numbers unless the CSV column is quoted.",
                untagged=("We decided to write the export header row in English for every tenant, because the "
                          "import scripts of the accountants match on those names.",
                          "I chose to compress exports larger than 50 MB with gzip, because the mail gateway "
                          "rejects bigger attachments."))
    proposed = bob.proposals()  # the gate: found without a tag, so proposed
    assert len(proposed) == 2, proposed
    staged = git(bob.path, "diff", "--cached", "--name-only").stdout
    page = (bob.path / ".cortex" / "decisions.md").read_text(encoding="utf-8")
    for memory_id, title in proposed.items():
        assert memory_id in staged and title not in page, (memory_id, staged)  # staged with the rest; on no page
    bob.commit("Stream the export", code="export.py")
    bob.settle()
    bob.clean()  # the upkeep the Stop started wrote nothing into the tree after the commit (item 5)
    bob.git("push", "-q", "-u", "origin", "feat/export")

    # Tuesday: carol (no cortex) merges both pull requests, as a host's merge button does (item 2).
    carol.git("fetch", "-q")
    carol.merge("origin/feat/numbering")
    carol.merge("origin/feat/export")
    carol.git("push", "-q")

    # Wednesday: a supersession on one side, a forget on the other, merged in the other order.
    alice.checkout("main")
    alice.pull()
    bob.checkout("main")
    bob.pull()
    store = Store.locate(alice.path)
    retry = next(m for m in store.list(types=["decision"]) if "five times" in m.title)
    alice.checkout("-b", "feat/retries")
    new = alice.cortex("remember", "Retry the payment webhook at most eight times, backing off to one hour",
                       "--type", "decision").strip()
    alice.cortex("forget", retry.id, "--replaced-by", new, "--yes")
    accepted, rejected = sorted(alice.proposals())
    alice.cortex("inbox", "accept", accepted)  # the inbox on one branch only: the other branch leaves it alone
    alice.commit("Eight retries")
    alice.git("push", "-q", "-u", "origin", "feat/retries")
    pool = next(m for m in Store.locate(bob.path).list(types=["context"]) if "worker pool" in m.title)
    bob.checkout("-b", "feat/pool")
    bob.cortex("forget", pool.id, "--yes")
    bob.cortex("inbox", "reject", rejected)
    bob.commit("PDF pool note is stale")
    bob.git("push", "-q", "-u", "origin", "feat/pool")
    alice.checkout("main")  # alice (hooks) merges bob's branch, carol the other: every kind of clone merges
    alice.git("fetch", "-q")
    alice.merge("origin/feat/pool")
    alice.git("push", "-q")
    carol.git("fetch", "-q")
    carol.pull()
    carol.merge("origin/feat/retries")
    carol.git("push", "-q")

    # Thursday: `cortex gc` on two branches from the same main, merged (item 3: deterministic upkeep).
    alice.checkout("main")
    alice.pull()
    bob.checkout("main")
    bob.pull()
    for person, branch in ((alice, "chore/gc-a"), (bob, "chore/gc-b")):
        person.checkout("-b", branch)
        person.cortex("gc")
        person.git("add", "-A")
        if person.git("status", "--porcelain"):
            person.commit(f"gc on {branch}")
        person.git("push", "-q", "-u", "origin", branch)
    bob.checkout("main")  # bob (cortex, no hooks) merges both
    bob.git("fetch", "-q")
    bob.pull()
    bob.merge("origin/chore/gc-b")
    bob.merge("origin/chore/gc-a")
    bob.git("push", "-q")
    carol.git("fetch", "-q")
    carol.pull()

    # alice rebases a branch begun on the old main, checks out back and forth, describes the code (items 4, 6).
    alice.checkout("-b", "feat/late", "feat/numbering")
    alice.session("pattern: Every money amount is an integer number of cents; formatting happens at the edge.")
    alice.commit("Cents everywhere", code="money.py")
    alice.settle()
    alice.clean()
    alice.git("fetch", "-q")
    alice.git("rebase", "-q", "origin/main")
    alice.clean()
    for branch in ("main", "feat/late", "main", "feat/late"):
        alice.checkout(branch)
    if outlines:
        assert "indexed money.py" in alice.cortex("index-code")
        alice.clean()  # code outlines are derived data kept out of git, not files to commit
    alice.git("push", "-q", "-u", "origin", "feat/late")
    carol.git("fetch", "-q")
    carol.merge("origin/feat/late")
    carol.git("push", "-q")

    # Friday: everyone on main, in step; no commit anyone did not make; every page its own regeneration.
    for clone in (alice, bob):
        clone.checkout("main")
        clone.pull()
        _page_check(clone)
        clone.clean()
    carol.pull()
    made = set(git(carol.path, "log", "--all", "--format=%s").stdout.strip().split("\n"))
    assert made <= messages, sorted(made - messages)  # cortex authored no commit (item 1, 2)
    assert alice.proposals() == {} and accepted in alice.active() and rejected not in alice.active()
    assert accepted in (alice.path / ".cortex" / "decisions.md").read_text(encoding="utf-8")
    agents = (alice.path / "AGENTS.md").read_text(encoding="utf-8")
    assert "feat/" not in agents and str(tmp_path) not in agents  # no branch name or machine path (item 4)

    if not fresh_clone:
        return
    # A fresh clone: its memories are months old, a Stop and its upkeep run, nothing it inherited is archived.
    fresh = Clone(tmp_path / "fresh", "fresh", messages)
    git(tmp_path, "clone", "-q", str(remote), str(fresh.path))
    kept = fresh.active()
    fresh.cortex("recall", "invoice numbering")
    transcript = tmp_path / "fresh.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in (
        {"type": "user", "uuid": "f1", "sessionId": "fresh", "message": {"role": "user", "content": "hi"}},
        {"type": "assistant", "uuid": "f2", "sessionId": "fresh",
         "message": {"id": "m-f2", "role": "assistant", "content": [{"type": "text", "text": "Hello."}]}})),
        encoding="utf-8")
    result = hook("stop", fresh.path, {"session_id": "fresh", "transcript_path": str(transcript),
                                       "cwd": str(fresh.path), "hook_event_name": "Stop", "stop_hook_active": False})
    assert result.returncode == 0, result
    fresh.settle()
    assert kept <= fresh.active(), sorted(kept - fresh.active())  # item 3: a fresh clone archives nothing
    fresh.clean()


def test_the_push_right_after_init_names_no_stale_page(tmp_path):
    """`cortex init` writes the pages it creates the store with: the first push, and one after a context memory
    (on no page), says nothing and `project --check` passes."""
    repo = make_repo(tmp_path / "repo")
    git(repo, "init", "-q", "--bare", str(tmp_path / "remote.git"))
    git(repo, "remote", "add", "origin", str(tmp_path / "remote.git"))
    cortex("init", "--claude", "--git-hooks", cwd=repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    pushed = git(repo, "push", "-u", "origin", "main")
    assert "cortex:" not in pushed.stderr, pushed.stderr
    cortex("remember", "The staging database is reset every night", cwd=repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a context memory")
    pushed = git(repo, "push")
    assert "cortex:" not in pushed.stderr, pushed.stderr
    assert "projections are up to date" in cortex("project", "--check", cwd=repo).stdout
    assert git(repo, "status", "--porcelain", "--untracked-files=all").stdout == ""


def test_forget_delete_refreshes_the_pages_at_once(project):
    gone = cortex("remember", "Tenants are isolated by schema", "--type", "decision", cwd=project).stdout.strip()
    cortex("remember", "Invoices are numbered per tenant", "--type", "decision", cwd=project)
    cortex("forget", "--delete", gone, "--yes", cwd=project)
    assert "isolated by schema" not in (project / ".cortex" / "decisions.md").read_text(encoding="utf-8")
    assert "projections are up to date" in cortex("project", "--check", cwd=project).stdout


def test_a_rebase_whose_union_page_is_not_its_regeneration_leaves_the_tree_clean(tmp_path):
    """One branch archives the last decision of a section, the other adds one after it: git's union merge keeps
    the archived entry. The post-rewrite and post-merge hooks name the page and write nothing, so the next
    checkout and merge succeed; `cortex project` then makes it right for the person's commit."""
    repo = Clone(make_repo(tmp_path / "repo"), "alice", set())
    repo.cortex("init", "--git-hooks")
    repo.cortex("remember", "Invoices are numbered per tenant", "--type", "decision")
    last = repo.cortex("remember", "The export is written as CSV with a BOM", "--type", "decision").strip()
    repo.commit("base")
    repo.checkout("-b", "feature")
    repo.cortex("remember", "Webhooks are retried five times", "--type", "decision")
    repo.commit("a decision after the last one")
    repo.checkout("main")
    repo.cortex("forget", last, "--yes")
    repo.commit("the last one archived")
    repo.checkout("feature")
    rebased = git(repo.path, "rebase", "main")
    repo.clean()  # nothing rewritten behind the person's back
    assert "decisions.md is not its regeneration after the rebase" in rebased.stderr, rebased.stderr
    repo.checkout("main")
    merged = git(repo.path, "merge", "-q", "feature")
    repo.clean()
    assert "decisions.md is not its regeneration after the merge" in merged.stderr, merged.stderr
    assert "decisions.md" in cortex("project", cwd=repo.path).stdout
    repo.commit("pages regenerated")
    _page_check(repo)


def test_a_page_follows_a_removed_memory_its_decisions_link_to(project):
    """A decision's page entry names the memories it links to, whatever their type: removing a linked gotcha
    (`forget --delete`, or gc) changes the page, though no decision changed."""
    from cortex.memory import Link

    gotcha = remember(project, "Excel drops leading zeros of invoice numbers", type="gotcha", link=False)
    remember(project, "Invoice numbers in CSV exports are quoted", type="decision", link=False,
             links=[Link("relates_to", gotcha.id, 0.5)])
    cortex("project", cwd=project)
    page = project / ".cortex" / "decisions.md"
    assert "Excel drops leading zeros" in page.read_text(encoding="utf-8")  # under **Related:**
    cortex("forget", "--delete", gotcha.id, "--yes", cwd=project)
    assert "Excel drops leading zeros" not in page.read_text(encoding="utf-8")
    assert "projections are up to date" in cortex("project", "--check", cwd=project).stdout
