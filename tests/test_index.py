"""The cache: in step with files whoever changes them, rebuilt when broken, safe under concurrency."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pygit2
import pytest

from cortex.index import Index
from cortex.index import db
from cortex.index.manifest import Manifest
from cortex.store import Store
from tests.helpers import checkout_new_branch, commit_all, cortex, cortex_command, cortex_json, git, remember, wait_for


def _ids(cwd: Path, query: str, *args: str, **kwargs) -> list[str]:
    return [hit["id"] for hit in cortex_json("recall", query, *args, cwd=cwd, **kwargs)]


def _remember(cwd: Path, text: str, **fields: object) -> str:
    return remember(cwd, text, **fields).id  # in process; the recalls that must see it are `cortex` processes


def _path(cwd: Path, memory_id: str) -> Path:
    return Store.locate(cwd).get(memory_id).path


def _committed(store: Store) -> Manifest:
    """The manifest another process would read from the cache database."""
    manifest = db.load(db.connect(store.cache_dir))
    assert manifest is not None
    return manifest


def test_an_edit_made_in_an_editor_is_found_by_the_next_recall(project):
    memory_id = _remember(project, "Deploys go through the staging cluster first", type="pattern")
    assert _ids(project, "staging deploys")[0] == memory_id
    path = _path(project, memory_id)
    path.write_text(path.read_text(encoding="utf-8").replace("staging cluster", "canary fleet"), encoding="utf-8")
    assert _ids(project, "canary fleet")[0] == memory_id


def test_a_deleted_file_disappears(project):
    keep = _remember(project, "Redis keys need a TTL")
    gone = _remember(project, "Redis runs in a container on port 6380")
    assert set(_ids(project, "redis")) == {keep, gone}
    _path(project, gone).unlink()
    assert _ids(project, "redis") == [keep]


def test_branch_switch_changes_results_and_switching_back_embeds_nothing(project):
    _remember(project, "The API is versioned in the URL path", type="decision")
    commit_all(project, "memory on main")
    checkout_new_branch(project, "feature/graphql")
    feature_id = _remember(project, "GraphQL replaces the REST endpoints for the dashboard", type="decision")
    commit_all(project, "memory on feature")
    assert feature_id in _ids(project, "graphql dashboard")
    repo = pygit2.Repository(str(project))
    repo.checkout("refs/heads/main")
    assert feature_id not in _ids(project, "graphql dashboard")
    store = Store.locate(project)
    before = len(_committed(store).vector_keys)
    repo.checkout("refs/heads/feature/graphql")
    report = Index(store).sync()
    assert report.changed == 1 and report.embedded == 0
    assert len(_committed(store).vector_keys) == before
    assert feature_id in _ids(project, "graphql dashboard")


@pytest.mark.long
def test_a_corrupted_cache_is_rebuilt_silently(tmp_path, example_store):
    store_dir = example_store  # its cache built and in step
    query = ("recall", "signature check fails when the body was parsed", "--dir", str(store_dir))
    first = cortex_json(*query, cwd=tmp_path)[0]["id"]
    cache = store_dir / "cache"
    for damage in (
        lambda: [(cache / name).unlink() for name in ("cache.db-wal", "cache.db-shm") if (cache / name).exists()]
        and (cache / "cache.db").write_bytes(b"{ not a database" * 300),
        lambda: [p.write_bytes(b"garbage") for p in (cache / "whoosh").iterdir()],
        lambda: shutil.rmtree(cache),
        lambda: (cache / "cache.db").unlink(),
    ):
        damage()
        result = cortex("recall", *query[1:], "--json", cwd=tmp_path)
        assert json.loads(result.stdout)[0]["id"] == first
        assert "Traceback" not in result.stderr and "error" not in result.stderr.lower()
    assert cortex("verify", "--dir", str(store_dir), cwd=tmp_path).returncode == 0


def test_two_rebuilds_give_the_same_digest(tmp_path, example_store):
    store_dir = example_store
    cortex("reindex", "--dir", str(store_dir), cwd=tmp_path)
    first = cortex_json("verify", "--dir", str(store_dir), cwd=tmp_path)
    shutil.rmtree(store_dir / "cache")
    cortex("reindex", "--dir", str(store_dir), cwd=tmp_path)
    second = cortex_json("verify", "--dir", str(store_dir), cwd=tmp_path)
    assert first["ok"] and second["ok"] and first["vectors"]
    assert first["digest"] == second["digest"] and first["memories"] == 26


def test_verify_notices_a_cache_out_of_step(project):
    _remember(project, "Verify me")
    assert cortex("verify", cwd=project).returncode == 0
    index = Index(Store.locate(project))
    index.sync()
    rel = next(iter(index.manifest.files))
    index.manifest.files[rel]["hash"] = "0" * 40  # what a missed edit would look like
    assert index.check() == [f"stale in cache: {rel}"]


def test_concurrent_processes_never_corrupt_the_cache(tmp_path, example_store):
    store_dir = example_store
    worker = (
        "import sys\n"
        "from cortex.store import Store\n"
        "from cortex.memory import Memory\n"
        "from cortex.recall import recall\n"
        "s = Store.locate(directory=sys.argv[1])\n"
        "for n in range(1, 16):  # a count, not a duration: a loaded machine runs them all the same\n"
        "    if n % 3 == 0:\n"
        "        s.create(Memory(id='', type='context', title=f'{sys.argv[2]} note {n}', body='sqlite ledger note'))\n"
        "    if n % 5 == 0:\n"
        "        victims = [p for p in s.walk()[0] if sys.argv[2] in p.name]\n"
        "        if victims: victims[0].unlink()\n"
        "    hits = recall([s], 'sqlite ledger', limit=5).hits\n"
        "    assert hits, 'recall found nothing'\n"
        "print(n)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", worker, str(store_dir), name], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for name in ("alpha", "beta")]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert all(int(out.strip()) == 15 for out, _ in outputs)
    result = cortex_json("verify", "--dir", str(store_dir), cwd=tmp_path)
    assert result["ok"], result["differences"]


def test_list_reads_through_the_cache_and_sees_new_files(project):
    first = _remember(project, "First", link=False)  # unlinked: no cache yet, the list makes it
    assert [r["id"] for r in cortex_json("list", cwd=project)] == [first]
    second = _remember(project, "Second", link=False)
    assert {r["id"] for r in cortex_json("list", cwd=project)} == {first, second}
    cache = project / ".cortex" / "cache"
    assert (cache / "cache.db").is_file() and not list(cache.glob("manifest*")) and not list(cache.glob("*.bin"))


def test_watch_keeps_the_cache_in_step_and_refuses_a_second_watcher(project):
    memory_id = _remember(project, "Watched memory about kafka")
    cortex("recall", "kafka", cwd=project)
    # As from a terminal: SIGINT at its default even if this test runs where it is ignored (a background CI job).
    proc = subprocess.Popen([*cortex_command(), "watch", "--debounce", "0.1"], cwd=project,
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        import select

        assert select.select([proc.stderr], [], [], 60)[0], "cortex watch printed nothing for 60 s"
        assert "watching" in proc.stderr.readline()  # ready: the first sync is done
        second = cortex("watch", cwd=project, check=False)
        assert second.returncode == 1 and "already running" in second.stderr
        path = _path(project, memory_id)
        path.write_text(path.read_text(encoding="utf-8").replace("kafka", "pulsar"), encoding="utf-8")
        deadline = time.time() + 30
        store = Store.locate(project)

        def committed() -> bool:
            return "pulsar" in _committed(store).files.value(path.relative_to(store.memories_dir).as_posix(), "meta")

        while time.time() < deadline and not committed():
            time.sleep(0.1)
        assert committed()
        # While a watcher runs, readers trust it, but what cortex itself just wrote is found at once.
        fresh = _remember(project, "Written while watched: zookeeper quorum")
        assert _ids(project, "zookeeper quorum")[0] == fresh
        from cortex.layout import watcher_ready

        assert watcher_ready(str(Store.locate(project).root))
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped" in err


def test_watch_follows_a_branch_switch_that_empties_the_memories_folder_and_back(project):
    """`git checkout main` from a branch whose memories main lacks removes `memories/`, and the watcher's watch
    with it; `cortex watch` watches the folder made again, so back on `feature` it commits the memory again."""
    commit_all(project, "cortex store")
    git(project, "checkout", "-q", "-b", "feature")
    memory_id = _remember(project, "Feature branch decision: cache invoices with Redis", type="decision")
    commit_all(project, "feature decision")
    rel = _path(project, memory_id).relative_to(project / ".cortex" / "memories").as_posix()
    store = Store.locate(project)
    proc = subprocess.Popen([*cortex_command(), "watch", "--debounce", "0.1"], cwd=project,
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        import select

        assert select.select([proc.stderr], [], [], 60)[0] and "watching" in proc.stderr.readline()
        git(project, "checkout", "-q", "main")
        assert wait_for(lambda: rel not in _committed(store).files, 30)
        git(project, "checkout", "-q", "feature")
        assert wait_for(lambda: rel in _committed(store).files, 30)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_watch_stops_cleanly_on_sigterm(project):
    proc = subprocess.Popen([*cortex_command(), "watch"], cwd=project, stderr=subprocess.PIPE, text=True)
    import select

    assert select.select([proc.stderr], [], [], 60)[0] and "watching" in proc.stderr.readline()
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped" in err
    from cortex.layout import watcher_ready

    assert not watcher_ready(str(Store.locate(project).root))


def _example_index(tmp_path: Path, example_store: Path) -> tuple[Path, Store, Index]:
    """A project holding a copy of the example store, and its index synced."""
    root = tmp_path / "project"
    shutil.copytree(example_store, root / ".cortex")
    store = Store(root / ".cortex", "project")
    index = Index(store)
    index.sync(full=True)
    return root, store, index


def test_a_kept_searcher_ranks_as_a_fresh_search_after_an_edit_with_filters(tmp_path, example_store):
    """The searcher a process keeps between queries is re-opened after a sync: an edited memory is found by its
    new words, and every query ranks as a search with a searcher of its own (Whoosh's BM25F both times), with
    the type and branch filters applied; Whoosh's query syntax in a question is plain words."""
    from cortex.index import fulltext

    root, store, index = _example_index(tmp_path, example_store)
    index.searcher()  # kept open across the edit
    edited = next((root / ".cortex" / "memories" / "decision").glob("*.md"))
    edited.write_text(edited.read_text(encoding="utf-8").replace("\n\n", "\n\nRevisited: zebrafish queue.\n\n", 1),
                      encoding="utf-8")
    index.sync(full=True)
    ix, searcher = index.fulltext_index(), index.searcher()
    rel = edited.relative_to(root / ".cortex" / "memories").as_posix()
    assert [path for path, _ in fulltext.search(ix, "zebrafish", 20, searcher=searcher)] == [rel]
    decisions = {p.relative_to(root / ".cortex" / "memories").as_posix()
                 for p in (root / ".cortex" / "memories" / "decision").glob("*.md")}
    queries = ["why did we choose arq over celery", "database cache", "queue", "how do users stay logged in",
               "queue AND (celery OR type:* -", "nothing matches zebra"]
    for query in queries:
        for types, branch in [((), None), (("decision", "gotcha"), None), ((), "main"), (("decision",), None)]:
            kept = fulltext.search(ix, query, 20, (), types, branch, searcher=searcher)
            fresh = fulltext.search(ix, query, 20, (), types, branch)
            assert kept == fresh, (query, types, branch)
            if types == ("decision",):
                assert {path for path, _ in kept} <= decisions
    assert {path for path, _ in fulltext.search(ix, "queue", 20, (), ("decision",), searcher=searcher)} & decisions
    assert fulltext.search(ix, "queue", 20, (), (), "no-such-branch", searcher=searcher) == []


def test_a_kept_searcher_of_an_index_with_no_documents_finds_nothing(tmp_path):
    """An index with no documents yet (a store with no memories, or one whose build is still to come) is read
    through Whoosh's EmptyReader: a kept searcher asked twice, and a search of its own, find nothing and raise
    nothing."""
    from cortex.index import fulltext

    ix = fulltext.open_index(tmp_path / "ix", create=True)
    with ix.searcher() as searcher:
        assert fulltext.search(ix, "receipts worker", 10, searcher=searcher) == []
        assert fulltext.search(ix, "receipts worker", 10, ("active",), ("decision",), "main", searcher=searcher) == []
    assert fulltext.search(ix, "receipts worker", 10) == []


def test_centralities_are_kept_for_the_next_process_until_the_store_changes(project):
    """Working out the link centralities decodes every memory's links; they are kept in the cache for the
    committed manifest they came from, read back by the next process, and worked out again after a change."""
    first = remember(project, "Chose SQLite over Postgres for the job queue: one file, no server", type="decision")
    remember(project, "The job queue in SQLite needs WAL mode for concurrent workers", type="gotcha")
    store = Store.locate(project)
    index = Index(store)
    index.sync(full=True)
    computed = index.centralities()
    assert computed and max(computed.values()) == 1.0  # the two were linked when the second was remembered
    assert index.saved_centralities() == computed  # kept in the database
    again = Index(store)
    again.sync(full=True)
    assert again.centralities() == computed == again._computed_centralities()
    third = remember(project, "SQLite job queue: vacuum weekly, the file grows with finished jobs", type="pattern")
    fresh = Index(store)
    fresh.sync(full=True)
    assert fresh.centralities() == fresh._computed_centralities()
    assert third.id in fresh.centralities() or first.id in fresh.centralities()
    assert Index(store).saved_centralities() == fresh.centralities()


def test_a_remember_walks_no_folder_and_leaves_changes_made_behind_cortex_for_the_next_sync(project):
    """`cortex remember` in its own process reads the committed cache without a walk (its own file read into
    it, the new memory linked against the others, committed); a file edited by hand before it is still found
    by the next command's sync, because that commit did not claim a check of every file."""
    from tests.helpers import cortex, cortex_json
    from tests.test_graph import TOPICS

    made = [remember(project, text, type=kind) for text, kind in TOPICS]
    edited = remember(project, "Retry flaky uploads three times with backoff", type="pattern")
    store = Store.locate(project)
    for path in store.memories_dir.rglob("*.md"):  # written a while ago: no sync re-reads them as racily clean
        os.utime(path, (time.time() - 60, time.time() - 60))
    cortex("list", cwd=project)  # the cache committed as it is now
    assert edited.path is not None
    edited.path.write_text(edited.path.read_text(encoding="utf-8").replace(
        "three times", "three times, then page the zebrafish team"), encoding="utf-8")
    fresh = json.loads(cortex("remember", "Invoice totals are summed in integer cents and only formatted as decimals "
                              "in the PDF", "--type", "decision", "--json", cwd=project).stdout)
    linked = {link.to for link in Store.locate(project).get(fresh["id"]).links}
    assert linked & {made[6].id, made[7].id, made[8].id}  # the invoice memories, as a walk before would have found
    assert [hit["id"] for hit in cortex_json("recall", "zebrafish", cwd=project)][:1] == [edited.id]


def test_recall_sees_files_changed_by_hand(project):
    """A one-shot `cortex recall` after files were edited, removed and added by hand answers from them: its
    sync finds each change, and commits it."""
    from tests.helpers import cortex_json

    remember(project, "Chose SQLite over Postgres for the job queue: one file, no server", type="decision")
    edited = remember(project, "Retry flaky uploads three times with backoff", type="pattern")
    gone = remember(project, "The staging bucket is cleaned every night by a cron job", type="gotcha")
    store = Store.locate(project)
    for path in store.memories_dir.rglob("*.md"):  # written a while ago: no sync re-reads them as racily clean
        os.utime(path, (time.time() - 60, time.time() - 60))
    assert [hit["id"] for hit in cortex_json("recall", "staging bucket cron", cwd=project)][:1] == [gone.id]

    path = edited.path
    assert path is not None
    path.write_text(path.read_text(encoding="utf-8").replace("three times", "three times, then page the zebrafish team"),
                    encoding="utf-8")
    assert gone.path is not None
    gone.path.unlink()
    added = store.memories_dir / "gotcha" / "added-by-hand.md"
    added.write_text("---\nid: 0a0b0c0d0e0f\ntype: gotcha\ntitle: Narwhal builds need the arm64 runner\nstatus: active\n"
                     "created: 2026-08-05T11:48:00Z\nupdated: 2026-08-05T11:48:00Z\n---\n"
                     "The narwhal image is built for arm64 only.\n", encoding="utf-8")

    assert [hit["id"] for hit in cortex_json("recall", "zebrafish", cwd=project)][:1] == [edited.id]
    assert gone.id not in [hit["id"] for hit in cortex_json("recall", "staging bucket cron", cwd=project)]
    assert [hit["id"] for hit in cortex_json("recall", "narwhal arm64", cwd=project)][:1] == ["0a0b0c0d0e0f"]


def test_a_watchers_account_of_the_changed_files_stands_for_a_walk(project, monkeypatch):
    """`cortex serve`'s observer names the files that changed: the index reads those, brings the full text and
    vectors in step and commits a newer check time (other processes trust it again), without a stat of every
    file; anything it cannot account for (no manifest yet) is a walk as before."""
    edited = _remember(project, "Deploys go through the staging cluster first", type="pattern")
    removed = _remember(project, "Redis runs in a container on port 6380")
    store = Store.locate(project)
    index = Index(store)
    index.sync(full=True)
    before = _committed(store).synced_ns
    path = _path(project, edited)
    path.write_text(path.read_text(encoding="utf-8").replace("staging cluster", "canary fleet"), encoding="utf-8")
    gone = _path(project, removed)
    gone.unlink()
    added = store.memories_dir / "gotcha" / "written-by-hand-0123456789ab.md"
    added.parent.mkdir(exist_ok=True)
    added.write_text("---\nid: 0123456789ab\ntype: gotcha\ntitle: The VPN drops idle SSH sessions\n---\n"
                     "The VPN drops SSH sessions idle for five minutes.\n", encoding="utf-8")
    seen = time.time_ns()

    def no_walk(*args, **kwargs):
        raise AssertionError("walked every file")

    monkeypatch.setattr(Manifest, "refresh", no_walk)
    index.watched([path, gone, added], seen)
    index.ensure(full=True)
    from cortex.recall import recall_store

    assert [h.memory.id for h in recall_store(store, "canary fleet", index=index, sync=False).hits][:1] == [edited]
    assert "0123456789ab" in [h.memory.id for h in recall_store(store, "VPN idle SSH", index=index, sync=False).hits]
    assert removed not in index.rel_of_id()
    committed = _committed(store)
    assert committed.synced_ns == seen > before
    assert "0123456789ab" in {entry.get("id") for entry in committed.files.values()}
    fresh = Index(store)  # no manifest in memory: the account cannot stand for a walk
    fresh.watched([path], time.time_ns())
    with pytest.raises(AssertionError, match="walked every file"):
        fresh.ensure(full=False)


def test_a_cache_written_incrementally_reads_back_as_one_built_from_nothing(tmp_path, example_store):
    """After files are edited, removed, added, hand-broken and removed again, across several syncs and
    processes, what the next process reads is what a rebuild from the files makes, and the commands that read
    the rows (list, status) say the same as after that rebuild."""
    root = tmp_path / "project"
    shutil.copytree(example_store, root / ".cortex")
    store = Store(root / ".cortex", "project")
    Index(store).rebuild()
    files = sorted((root / ".cortex" / "memories").rglob("*.md"))
    edited, removed, broken = files[1], files[5:9], files[13]
    edited.write_text(edited.read_text(encoding="utf-8").replace("\n\n", "\n\nRevisited on Friday.\n\n", 1),
                      encoding="utf-8")
    for path in removed:
        path.unlink()
    Index(store).sync(full=True)
    broken.write_text("---\nid: [unclosed\n---\nbody\n", encoding="utf-8")
    (root / ".cortex" / "memories" / "decision" / "2026-11-27-new-queue.md").write_text(
        "---\nid: 5e1f0a2b3c4d\ntype: decision\ntitle: The queue moved to arq\nstatus: active\n---\n\n"
        "The queue moved to arq from celery.\n", encoding="utf-8")
    Index(store).sync(full=True)
    files[20].unlink()
    Index(store).sync(full=True)
    kept = _committed(store)
    listed, status = cortex("list", "--all", cwd=root).stdout, cortex("status", cwd=root).stdout
    shutil.rmtree(store.cache_dir)
    Index(store).rebuild()
    rebuilt = _committed(store)
    assert {rel: dict(entry) for rel, entry in kept.files.items()} == \
        {rel: dict(entry) for rel, entry in rebuilt.files.items()}
    assert len(kept.files) == len(files) - len(removed) - 1 + 1
    assert "The queue moved to arq" in listed and broken.name in status  # the new memory; the broken file
    assert cortex("list", "--all", cwd=root).stdout == listed
    assert cortex("status", cwd=root).stdout == status


def test_a_cache_from_before_the_database_is_rebuilt_and_its_files_removed(project):
    """A cache folder of the marshal files cortex kept before (manifest.bin, views, vectors.f32) is derived
    data: the database is made beside it, built from the files, and the old files removed."""
    made = _remember(project, "Deploys go through the staging cluster first")
    cache = Store.locate(project).cache_dir
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    for name in ("manifest.bin", "records.bin", "centrality.bin", "vectors.f32", "sync.lock"):
        (cache / name).write_bytes(b"CXM\x09 an older cache")
    assert _ids(project, "staging cluster")[0] == made
    assert not [p.name for p in cache.iterdir() if p.name.startswith("manifest") or p.suffix in (".bin", ".f32")
                or p.name == "sync.lock"]
