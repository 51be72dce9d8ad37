"""`cortex serve`: the prompt hook answered by a warm resident process, with a fallback when there is none."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pygit2

from cortex import serve
from tests.helpers import commit_all, cortex, cortex_command, git, remember, wait_for


def _prompt(project: Path, text: str) -> str:
    payload = json.dumps({"session_id": "s", "cwd": str(project), "hook_event_name": "UserPromptSubmit", "prompt": text})
    result = cortex("hook", "prompt", cwd=project, input=payload)
    assert result.returncode == 0
    return result.stdout


def _served(root: Path, query: str) -> str:
    """The ids and titles of what the running server's recall finds for `query` (its own view of the files)."""
    answer = serve.ask(str(root), {"op": "recall", "query": query, "limit": 10, "global": False}, timeout=10) or {}
    return "\n".join(f"{hit['memory']['id']} {hit['memory']['title']}" for hit in answer.get("hits", []))


def test_served_answers_equal_the_in_process_ones_and_follow_edits(project):
    memory_id = remember(project, "Redis OOM on staging: rate-limit keys were created without a TTL", type="gotcha").id
    in_process = _prompt(project, "redis out of memory on staging")
    assert memory_id in in_process
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "30"], cwd=project, stderr=subprocess.PIPE, text=True)
    try:
        root = str(project / ".cortex")
        assert wait_for(lambda: serve.ask(root, {"op": "ping"}) is not None)
        answer = serve.ask(root, {"op": "prompt", "prompt": "redis out of memory on staging"}, timeout=10)
        assert answer is not None and memory_id in str(answer["context"])
        assert _prompt(project, "redis out of memory on staging") == in_process
        second = cortex("serve", "--idle", "1", cwd=project, check=False)
        assert second.returncode == 1 and "already runs" in second.stderr
        fresh = remember(project, "Kafka consumer lag alerts page the on-call after ten minutes").id  # another process
        assert wait_for(lambda: fresh in str((serve.ask(root, {"op": "prompt", "prompt": "kafka consumer lag alerts"},
                                                     timeout=10) or {}).get("context")), 30)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not Path(serve.socket_path(str(project / ".cortex"))).exists()
    assert memory_id in _prompt(project, "redis out of memory on staging")  # no server: the in-process path


# Prompts on the example store: answerable ones, one answered only in other words, in-domain and off-topic ones.
RELEVANCE_PROMPTS = ["do we keep money amounts as floats?", "how do API clients authenticate?",
                     "can I edit a ledger entry after it is posted?", "which queue library runs background jobs?",
                     "why is the checkout slow on mondays?", "write a haiku about autumn leaves",
                     "what is the capital of australia?", "fix the typo in the readme"]


def _injected(repo: Path, session: str, prompt: str) -> list[str]:
    """The memory ids `cortex hook prompt` injects for `prompt`, in order (none: [])."""
    import re

    from tests.helpers import hook

    answer = hook("prompt", repo, {"session_id": session, "cwd": str(repo), "hook_event_name": "UserPromptSubmit",
                                   "prompt": prompt})
    assert answer.returncode == 0, answer.stderr
    if not answer.stdout.strip():
        return []
    return re.findall(r"`([0-9a-f]{12})`", json.loads(answer.stdout)["hookSpecificOutput"]["additionalContext"])


def test_a_prompt_gets_the_same_relevance_decision_with_and_without_a_server(repo, example_store):
    """One relevance rule whichever process answers (issue 38): each prompt injects the same memories through
    the hook's own process and through a running `cortex serve`, or nothing both times; the answerable prompts
    get their memory, the off-topic ones nothing."""
    import shutil

    shutil.copytree(example_store, repo / ".cortex")
    alone = {prompt: _injected(repo, f"alone-{n}", prompt) for n, prompt in enumerate(RELEVANCE_PROMPTS)}
    root = str(repo / ".cortex")
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "60"], cwd=repo, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: serve.ask(root, {"op": "ping"}) is not None, 60)
        served = {prompt: _injected(repo, f"served-{n}", prompt) for n, prompt in enumerate(RELEVANCE_PROMPTS)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert served == alone
    assert "1b5bfa33f6fd" in alone["do we keep money amounts as floats?"]
    assert alone["write a haiku about autumn leaves"] == alone["what is the capital of australia?"] == []


def test_a_server_started_after_edits_made_without_one_serves_the_files_as_they_are(project):
    """Files edited, removed and added while no server ran are what a server started then serves: it syncs
    before it answers."""
    import os

    from cortex.store import Store

    edited = remember(project, "Retry flaky uploads three times with backoff", type="pattern")
    gone = remember(project, "The staging bucket is cleaned every night by a cron job", type="gotcha")
    store = Store.locate(project)
    for path in store.memories_dir.rglob("*.md"):  # written a while ago: no sync re-reads them as racily clean
        os.utime(path, (time.time() - 60, time.time() - 60))
    cortex("recall", "staging bucket cron", cwd=project)  # the cache committed as it is now
    assert edited.path is not None and gone.path is not None
    edited.path.write_text(edited.path.read_text(encoding="utf-8").replace(
        "three times", "three times, then page the zebrafish team"), encoding="utf-8")
    gone.path.unlink()
    root = str(project / ".cortex")
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "30"], cwd=project, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: serve.ask(root, {"op": "ping"}) is not None, 60)
        assert wait_for(lambda: (serve.ask(root, {"op": "state"}) or {}).get("current"), 60)
        answer = serve.ask(root, {"op": "recall", "query": "zebrafish team", "limit": 5, "types": [],
                                  "global": False}, timeout=10)
        assert answer is not None and [hit["memory"]["id"] for hit in answer["hits"]][:1] == [edited.id]
        answer = serve.ask(root, {"op": "recall", "query": "staging bucket cron", "limit": 5, "types": [],
                                  "global": False}, timeout=10)
        assert answer is not None and gone.id not in [hit["memory"]["id"] for hit in answer["hits"]]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_fresh_clones_first_prompt_is_answered_from_the_index_its_server_builds(repo):
    """A fresh clone has the memory files and no cache: its first SessionStart builds the briefing from the
    files' metadata and starts the server, whose committed cache has nothing searchable yet. A `cortex recall`
    and the prompt sent right after find the memory that answers (both used to get nothing from that server)."""
    import shutil

    from tests.helpers import EXAMPLE_STORE, hook

    shutil.copytree(EXAMPLE_STORE, repo / ".cortex", ignore=shutil.ignore_patterns("cache", "state"))
    root = str(repo / ".cortex")
    env = {"CORTEX_SERVE_IDLE": "20"}
    started = hook("session-start", repo, {"session_id": "s", "cwd": str(repo), "hook_event_name": "SessionStart",
                                          "source": "startup"}, env=env)
    assert started.returncode == 0 and "cortex briefing" in started.stdout
    try:
        assert wait_for(lambda: serve.ask(root, {"op": "state"}) is not None, 30)
        # `cortex recall` asks the server first: one that has nothing searchable yet sends it to recall itself.
        found = cortex("recall", "do we keep money amounts as floats?", "--json", cwd=repo, env=env)
        assert "1b5bfa33f6fd" in [hit["id"] for hit in json.loads(found.stdout)][:3]
        answer = hook("prompt", repo, {"session_id": "s", "cwd": str(repo), "hook_event_name": "UserPromptSubmit",
                                                 "prompt": "do we keep money amounts as floats?"}, env=env)
        assert answer.returncode == 0
        assert "1b5bfa33f6fd" in answer.stdout  # "Amounts are integer minor units ..., never floats"
    finally:
        pid = (serve.ask(root, {"op": "state"}) or {}).get("pid")
        if pid:
            import os
            import signal

            os.kill(int(pid), signal.SIGTERM)
        assert wait_for(lambda: not Path(serve.socket_path(root)).exists(), 60)


def test_serve_exits_when_idle_and_session_start_starts_it(project):
    remember(project, "Pinned rule: never log card numbers", pinned=True)
    result = cortex("serve", "--idle", "1", cwd=project)
    assert "stopped (idle)" in result.stderr
    payload = json.dumps({"session_id": "s", "cwd": str(project), "hook_event_name": "SessionStart", "source": "startup"})
    cortex("hook", "session-start", cwd=project, input=payload, env={"CORTEX_SERVE_IDLE": "2"})
    root = str(project / ".cortex")
    assert wait_for(lambda: serve.ask(root, {"op": "ping"}) is not None, 60)
    assert wait_for(lambda: not Path(serve.socket_path(root)).exists(), 60)  # CORTEX_SERVE_IDLE=2: it leaves by itself


def test_the_server_vouches_for_the_files_and_builds_the_next_briefing_ahead(project, capsys):
    from cortex import __version__, hotpath, layout
    from cortex.index import Index
    from cortex.store import Store

    remember(project, "Pinned rule: never log card numbers", pinned=True)
    root = str(project / ".cortex")
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "60"], cwd=project, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: serve.ask(root, {"op": "state"}) is not None, 30)  # up before it is warm
        assert wait_for(lambda: serve.ask(root, {"op": "ping"}) is not None, 60)
        # It vouches for the files once it has synced them.
        assert wait_for(lambda: (serve.ask(root, {"op": "state"}) or {}).get("current"), 60)
        # Once it says its start-up work is done, the next session's briefing is built for the store as it is.
        assert wait_for(lambda: (serve.ask(root, {"op": "state"}) or {}).get("settled"), 60)
        assert any((layout.saved_briefing(root, name) or {}).get("key") == layout.briefing_key(root, __version__)
                   for name in ("briefing.json", "briefing.next.json"))
        store = Store.locate(project)
        # Another process (this one) trusts the server's watch and skips its stat of every file.
        assert "cache kept by a watcher (cortex watch or cortex serve)" in Index(store).sync(full=False).notes
        shown = layout.saved_briefing(root)
        fresh = remember(project, "Pinned: the staging database is read-only on Fridays", pinned=True)
        # Written by another process: the walk is back until the server has synced, then trusted again.
        assert wait_for(lambda: "cache kept by a watcher (cortex watch or cortex serve)"
                        in Index(store).sync(full=False).notes, 30)
        ahead = lambda: layout.saved_briefing(root, "briefing.next.json") or {}  # noqa: E731
        assert wait_for(lambda: ahead().get("key") == layout.briefing_key(root, __version__), 60)
        assert layout.saved_briefing(root) == shown  # what this session was shown stays until the next start
        assert fresh.id in ahead()["text"]
        capsys.readouterr()
        payload = json.dumps({"session_id": "s2", "cwd": str(project), "hook_event_name": "SessionStart",
                              "source": "startup"})
        assert hotpath.session_start(payload) is True  # a file read: the server built it
        assert fresh.id in json.loads(capsys.readouterr().out)["hookSpecificOutput"]["additionalContext"]
        assert fresh.id in str((layout.saved_briefing(root) or {}).get("text"))  # now what this session was shown
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not layout.watcher_ready(root)  # gone with the server: readers walk again


def test_a_write_without_a_server_builds_the_next_briefing_ahead(project):
    """No server (it left when idle): `cortex remember` in its own process starts a detached build of the next
    SessionStart's briefing, so that session start prints a file, the new memory in it. A store that never
    briefed a session gets none."""
    from cortex import __version__, layout

    root = str(project / ".cortex")
    cortex("remember", "Pinned rule: never log card numbers", "--pin", cwd=project)
    time.sleep(1)
    assert layout.saved_briefing(root, "briefing.next.json") is None  # no session was ever briefed here
    payload = json.dumps({"session_id": "s", "cwd": str(project), "hook_event_name": "SessionStart", "source": "startup"})
    cortex("hook", "session-start", cwd=project, input=payload, env={"CORTEX_SERVE_IDLE": "1"})
    assert wait_for(lambda: not layout.server_up(root), 60)  # the server it started has left
    fresh = json.loads(cortex("remember", "Pinned: the staging database is read-only on Fridays", "--pin", "--json",
                              cwd=project).stdout)["id"]
    ahead = lambda: layout.saved_briefing(root, "briefing.next.json") or {}  # noqa: E731
    assert wait_for(lambda: ahead().get("key") == layout.briefing_key(root, __version__), 60)
    assert fresh in ahead()["text"]
    started = cortex("hook", "session-start", cwd=project, input=payload, env={"CORTEX_SERVE_IDLE": "1"})
    assert fresh in json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    assert fresh in str((layout.saved_briefing(root) or {}).get("text"))  # the file was what it printed
    assert not (project / ".cortex" / "state" / "briefing.next.json").exists()


def test_a_session_shown_the_last_briefing_gets_what_changed_from_the_server_at_its_first_prompt(project):
    """No server, and a memory file added by hand (a pull with no git hook): the SessionStart prints the last
    briefing and starts the server, which answers the first prompt with what changed since, then builds the next
    briefing, which the next SessionStart prints with the new memory in it."""
    from cortex import __version__, layout

    root = str(project / ".cortex")
    cortex("remember", "Pinned rule: never log card numbers", "--pin", cwd=project)

    def session_start(session: str) -> str:
        payload = json.dumps({"session_id": session, "cwd": str(project), "hook_event_name": "SessionStart",
                              "source": "startup"})
        started = cortex("hook", "session-start", cwd=project, input=payload, env={"CORTEX_SERVE_IDLE": "3"})
        return json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]

    first = session_start("s1")
    assert wait_for(lambda: not layout.server_up(root), 60)  # it left when idle
    folder = project / ".cortex" / "memories" / "decision"
    folder.mkdir(exist_ok=True)
    (folder / "payments-use-stripe-checkout-0123456789ab.md").write_text(
        "---\nid: 0123456789ab\ntype: decision\ntitle: Payments go through Stripe Checkout\npinned: true\n---\n"
        "Payments go through Stripe Checkout; we never handle card numbers.\n", encoding="utf-8")
    assert session_start("s2") == first  # the last briefing, as it was
    assert wait_for(lambda: serve.ask(root, {"op": "ping"}) is not None, 60)  # the server it started is warm
    payload = json.dumps({"session_id": "s2", "cwd": str(project), "hook_event_name": "UserPromptSubmit",
                          "prompt": "what should the next release include"})
    caught = cortex("hook", "prompt", cwd=project, input=payload).stdout
    assert "Changed since the briefing" in caught and "`0123456789ab`" in caught
    assert "Changed since" not in cortex("hook", "prompt", cwd=project, input=payload).stdout  # once
    ahead = lambda: layout.saved_briefing(root, "briefing.next.json") or {}  # noqa: E731
    assert wait_for(lambda: ahead().get("key") == layout.briefing_key(root, __version__), 60)
    assert "0123456789ab" in session_start("s3")


def test_commands_run_in_their_own_process_and_recall_asks_the_running_server(project):
    """With a server running, `list`, `show`, `status` and `remember` run in their own process (the server runs
    no command for a client, issue 37) and print what they print without one; `cortex recall` asks the server
    for its search (its warm indexes and models) and prints the same hits; `--at` stays in the process."""
    first = remember(project, "Redis OOM on staging: rate-limit keys were created without a TTL", type="gotcha").id
    remember(project, "Chose SQLite over Postgres for the local cache: one file, no server", type="decision")
    remember(project, "Pinned rule: never log card numbers", pinned=True)
    here = {name: cortex(*args, cwd=project).stdout for name, args in {
        "list": ("list",), "json": ("list", "--json", "--all"), "show": ("show", first),
        "recall": ("recall", "which database did we decide on", "--json"), "status": ("status", "--json")}.items()}
    root = project / ".cortex"
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "60"], cwd=project, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: serve.ask(str(root), {"op": "ping"}) is not None, 60)
        # It answers before it has built the next briefing; that build would rebuild a missing manifest.
        assert wait_for(lambda: (root / "state" / "briefing.next.json").exists(), 60)
        # Proof that the server answers: with the cache's database gone, a recall run here would rebuild it.
        for name in ("cache.db", "cache.db-wal", "cache.db-shm"):
            (root / "cache" / name).unlink(missing_ok=True)
        traced = subprocess.run([sys.executable, "-X", "importtime", "-m", "cortex", "recall",
                                 "which database did we decide on", "--json"], cwd=project, capture_output=True,
                                text=True, check=True)
        assert [hit["id"] for hit in json.loads(traced.stdout)] == [hit["id"] for hit in json.loads(here["recall"])]
        imported = {line.rsplit("|", 1)[-1].strip() for line in traced.stderr.splitlines() if "|" in line}
        assert not {"numpy", "whoosh"} & imported  # the server's warm models answered
        assert not (root / "cache" / "cache.db").exists()
        refused = cortex("recall", "?", cwd=project, check=False)  # a refused query: said as without a server
        assert refused.returncode == 1 and "no word to search for" in refused.stderr
        assert cortex("list", cwd=project).stdout == here["list"]
        assert cortex("list", "--json", "--all", cwd=project).stdout == here["json"]
        assert cortex("show", first, cwd=project).stdout == here["show"]
        status = json.loads(cortex("status", "--json", cwd=project).stdout)
        assert {key: status[key] for key in ("total", "by_type", "by_status", "pinned", "problems")} == \
            {key: json.loads(here["status"])[key] for key in ("total", "by_type", "by_status", "pinned", "problems")}
        new = cortex("remember", "Redis keys for rate limits must always get a TTL", "--type", "gotcha",
                     cwd=project).stdout.strip()
        assert new in cortex("list", cwd=project).stdout
        assert wait_for(lambda: new in _served(root, "rate limit keys must get a TTL"), 30)  # and in the server's
        assert cortex("show", "nope", cwd=project, check=False).returncode == 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_files_changed_by_hand_reach_the_server_from_its_observer(project):
    """With `cortex serve` running, a memory edited in place, one deleted and one added by hand (an editor, `rm`,
    a file copied in) reach its answers; the server reads the files its observer named (no walk over the
    store) and other processes trust its cache again once it has."""
    from cortex.index import Index
    from cortex.store import Store

    edited = remember(project, "Deploys go through the staging cluster first", type="pattern")
    removed = remember(project, "Redis runs in a container on port 6380", type="context")
    root = project / ".cortex"
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "60"], cwd=project, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: serve.ask(str(root), {"op": "ping"}) is not None, 60)
        assert edited.path is not None and removed.path is not None
        edited.path.write_text(edited.path.read_text(encoding="utf-8").replace(
            "title: Deploys go through the staging cluster first", "title: Deploys go through the canary fleet first"),
            encoding="utf-8")
        removed.path.unlink()
        added = root / "memories" / "pattern" / "written-by-hand-0123456789ab.md"  # a folder that exists: no walk
        added.write_text("---\nid: 0123456789ab\ntype: pattern\ntitle: The VPN drops idle SSH sessions\n---\n"
                         "The VPN drops SSH sessions idle for five minutes.\n", encoding="utf-8")

        assert wait_for(lambda: "canary fleet" in _served(root, "deploys go through first")
                        and removed.id not in _served(root, "Redis runs in a container on port 6380")
                        and "0123456789ab" in _served(root, "VPN drops idle SSH sessions"), 30)
        store = Store.locate(project)
        assert wait_for(lambda: "cache kept by a watcher (cortex watch or cortex serve)"
                        in Index(store).sync(full=False).notes, 30)
        hits = json.loads(cortex("recall", "VPN drops idle SSH sessions", "--json", cwd=project).stdout)
        assert hits and hits[0]["id"] == "0123456789ab"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_write_by_another_cortex_process_reaches_the_server_behind_a_fence(project):
    """Another cortex process (a hook, the upkeep) writes a memory and rewrites one while `cortex serve` runs:
    the server writes its fence file, waits for its observer to report it (every event before it has then
    arrived) and reads the files the observer named, not every file; its answers hold both writes, other
    processes trust its cache again, and nothing of the fence shows in `git status`, `cortex status` or the
    list."""
    from cortex.index import Index
    from cortex.memory import Memory
    from cortex.store import Store

    kept = remember(project, "Deploys go through the staging cluster first", type="pattern")
    root = project / ".cortex"
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "60"], cwd=project, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: serve.ask(str(root), {"op": "ping"}) is not None and
                        serve.ask(str(root), {"op": "ping"}).get("ready"), 60)
        store = Store.locate(project)  # this test's process: another writer than the server
        written = store.create(Memory(id="", type="gotcha", title="The VPN drops idle SSH sessions",
                                     body="The VPN drops SSH sessions idle for five minutes."))
        store.update(kept.id, {"title": "Deploys go through the canary fleet first"})

        assert wait_for(lambda: written.id in _served(root, "VPN drops idle SSH sessions")
                        and "canary fleet" in _served(root, "deploys go through first"), 30)
        fence = root / "memories" / ".fence" / "mark"
        assert fence.is_file()  # the write was followed behind a fence
        assert wait_for(lambda: "cache kept by a watcher (cortex watch or cortex serve)"
                        in Index(store).sync(full=False).notes, 30)
        assert not any(".fence" in path for path in pygit2.Repository(str(project)).status())
        status = cortex("status", cwd=project).stdout
        assert "problems: none" in status and ".fence" not in status + cortex("list", cwd=project).stdout
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_observer_names_the_files_or_asks_for_a_walk() -> None:
    """What `cortex serve` reads after a change: the files named by their events (a folder's own "modified",
    which every file added or removed in it raises, names nothing), or a walk when a folder came or went or
    too many files changed at once (a checkout; the kernel may drop events past that)."""
    from watchdog.events import (DirCreatedEvent, DirModifiedEvent, FileClosedEvent, FileCreatedEvent,
                                 FileDeletedEvent, FileMovedEvent)

    from cortex.watch import Changes

    changes = Changes()
    for event in (FileCreatedEvent("/m/decision/.a.md.x.tmp"), FileMovedEvent("/m/decision/.a.md.x.tmp", "/m/decision/a.md"),
                  DirModifiedEvent("/m/decision"), FileClosedEvent("/m/gotcha/b.md"), FileDeletedEvent("/m/gotcha/c.md")):
        changes.add(event)
    paths, seen = changes.take()
    assert paths == ["/m/decision/.a.md.x.tmp", "/m/decision/a.md", "/m/gotcha/b.md", "/m/gotcha/c.md"] and seen > 0
    assert changes.take()[0] == []  # taken: nothing since
    changes.add(DirCreatedEvent("/m/plan"))
    changes.add(FileCreatedEvent("/m/plan/d.md"))
    assert changes.take()[0] is None  # a new folder: walk
    for n in range(Changes.MOST + 1):
        changes.add(FileCreatedEvent(f"/m/decision/{n}.md"))
    assert changes.take()[0] is None


def test_files_that_are_not_memories_change_nothing_and_a_linked_folder_is_reported(project, tmp_path):
    """An editor's swap file beside a memory does not rewrite the cache (the server reads nothing and commits
    nothing: other processes would reload it), and a link to a folder put into `memories/` is walked and
    reported as a problem, as a walk without a server would."""
    import os

    remember(project, "Deploys go through the staging cluster first", type="pattern")
    root = project / ".cortex"
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "60"], cwd=project, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: serve.ask(str(root), {"op": "ping"}) is not None, 60)
        assert wait_for(lambda: (root / "state" / "briefing.next.json").exists(), 60)
        time.sleep(1.0)  # the server at rest
        manifest = root / "cache" / "commit"  # rewritten by every commit of the files' rows
        before = manifest.stat().st_mtime_ns
        swap = root / "memories" / "pattern" / ".deploys-go-through.md.swp"
        for n in range(5):  # vim rewrites its swap file every few seconds
            swap.write_bytes(b"swap %d" % n)
            time.sleep(0.2)
        time.sleep(1.0)
        assert manifest.stat().st_mtime_ns == before
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        os.symlink(elsewhere, root / "memories" / "linked")
        assert wait_for(lambda: "linked" in cortex("status", cwd=project, check=False).stdout, 30)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_branch_switch_that_empties_the_memories_folder_and_back_reaches_the_server(project):
    """A memory on `feature` only, a server running: `git checkout main` empties `memories/` and git removes the
    folder, the server's watch going with it; the server watches the folder made again, so after `git checkout
    feature` its recall, and `cortex recall`, find the memory again (its observer alone tells it: no cortex
    write)."""
    cortex("init", "--git-hooks", cwd=project)
    commit_all(project, "cortex store")
    git(project, "checkout", "-q", "-b", "feature")
    mine = remember(project, "Feature branch decision: cache invoices with Redis", type="decision").id
    commit_all(project, "feature decision")
    root = project / ".cortex"
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "60"], cwd=project, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: (serve.ask(str(root), {"op": "ping"}) or {}).get("ready"), 60)
        assert mine in _served(root, "redis invoices cache")
        folder = (root / "memories").stat().st_ino
        git(project, "checkout", "-q", "main")
        assert not (root / "memories").exists() or (root / "memories").stat().st_ino != folder  # git removed it
        assert wait_for(lambda: mine not in _served(root, "redis invoices cache"), 30)
        git(project, "checkout", "-q", "feature")
        assert wait_for(lambda: mine in _served(root, "redis invoices cache"), 30)
        assert mine in cortex("recall", "redis invoices cache", cwd=project).stdout
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_build_ahead_after_a_write_commits_what_the_write_left_in_memory(project):
    """A `remember` links its memory to others after its own commit, rewriting files the committed manifest
    then holds as they were. The build a write without a server starts (`build_next(..., commits=True)`)
    commits them first, so the recall views it keeps are for the manifest the next command or server loads
    (at 100,000 memories a server started after a `remember` worked them out again: ~0.3 s of its start)."""
    from cortex.briefing import build_next
    from cortex.index import Index
    from cortex.store import Store

    from tests.helpers import remember as remember_in_process

    store = Store(project / ".cortex", "project")
    for text in ("Never log card numbers", "Card numbers are masked in the payment service logs"):
        remember_in_process(store, text)
    Index(store).sync(full=True, progress=False)  # committed, in step with the files
    assert _manifest_in_step(project)
    linked = next(store.memories_dir.rglob("*.md"))
    # what the linking does after the commit: the file rewritten, the manifest left as the commit made it
    linked.write_text(linked.read_text(encoding="utf-8") + "Masked or not.\n", encoding="utf-8")
    assert not _manifest_in_step(project)
    build_next(str(project / ".cortex"), commits=True)
    assert _manifest_in_step(project)


def _manifest_in_step(project: Path) -> bool:
    """Whether the committed manifest holds every memory file as it is on disk (its time and size)."""
    from cortex.index import db

    manifest = db.load(db.connect(project / ".cortex" / "cache"))
    memories = project / ".cortex" / "memories"
    for path in memories.rglob("*.md"):
        entry = manifest.files.get(path.relative_to(memories).as_posix()) if manifest is not None else None
        if entry is None or (entry["mtime"], entry["size"]) != (path.stat().st_mtime_ns, path.stat().st_size):
            return False
    return True
