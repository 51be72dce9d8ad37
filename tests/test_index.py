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
from cortex.index.manifest import Manifest
from cortex.store import Store
from tests.helpers import checkout_new_branch, commit_all, cortex, cortex_command, cortex_json, remember


def _ids(cwd: Path, query: str, *args: str, **kwargs) -> list[str]:
    return [hit["id"] for hit in cortex_json("recall", query, *args, cwd=cwd, **kwargs)]


def _remember(cwd: Path, text: str, **fields: object) -> str:
    return remember(cwd, text, **fields).id  # in process; the recalls that must see it are `cortex` processes


def _path(cwd: Path, memory_id: str) -> Path:
    return Store.locate(cwd).get(memory_id).path


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
    before = len(Manifest.load(store.cache_dir / "manifest.bin").vector_keys)
    repo.checkout("refs/heads/feature/graphql")
    report = Index(store).sync()
    assert report.changed == 1 and report.embedded == 0
    assert len(Manifest.load(store.cache_dir / "manifest.bin").vector_keys) == before
    assert feature_id in _ids(project, "graphql dashboard")


def test_a_corrupted_cache_is_rebuilt_silently(tmp_path, example_store):
    store_dir = example_store  # its cache built and in step
    query = ("recall", "signature check fails when the body was parsed", "--dir", str(store_dir))
    first = cortex_json(*query, cwd=tmp_path)[0]["id"]
    cache = store_dir / "cache"
    for damage in (
        lambda: (cache / "manifest.bin").write_bytes(b"{ not a manifest"),
        lambda: (cache / "vectors.f32").write_bytes((cache / "vectors.f32").read_bytes()[:100]),
        lambda: [p.write_bytes(b"garbage") for p in (cache / "whoosh").iterdir()],
        lambda: shutil.rmtree(cache),
        lambda: (cache / "manifest.bin").write_bytes((cache / "manifest.bin").read_bytes()[:-500]),
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
        "import sys, time, random\n"
        "from pathlib import Path\n"
        "from cortex.store import Store\n"
        "from cortex.memory import Memory\n"
        "from cortex.recall import recall\n"
        "s = Store.locate(directory=sys.argv[1])\n"
        "end = time.time() + 4\n"
        "n = 0\n"
        "while time.time() < end:\n"
        "    n += 1\n"
        "    if n % 3 == 0:\n"
        "        s.create(Memory(id='', type='context', title=f'{sys.argv[2]} note {n}', body='sqlite ledger note'))\n"
        "    if n % 5 == 0:\n"
        "        victims = [p for p in s.memory_paths() if sys.argv[2] in p.name]\n"
        "        if victims: victims[0].unlink()\n"
        "    hits = recall([s], 'sqlite ledger', limit=5).hits\n"
        "    assert hits, 'recall found nothing'\n"
        "print(n)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", worker, str(store_dir), name], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for name in ("alpha", "beta")]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert all(int(out.strip()) > 3 for out, _ in outputs)
    result = cortex_json("verify", "--dir", str(store_dir), cwd=tmp_path)
    assert result["ok"], result["differences"]


def test_list_reads_through_the_cache_and_sees_new_files(project):
    first = _remember(project, "First", link=False)  # unlinked: no cache yet, the list makes it
    assert [r["id"] for r in cortex_json("list", cwd=project)] == [first]
    second = _remember(project, "Second", link=False)
    assert {r["id"] for r in cortex_json("list", cwd=project)} == {first, second}
    assert (project / ".cortex" / "cache" / "manifest.bin").is_file()


def test_watch_keeps_the_cache_in_step_and_refuses_a_second_watcher(project):
    memory_id = _remember(project, "Watched memory about kafka")
    cortex("recall", "kafka", cwd=project)
    # As from a terminal: SIGINT at its default even if this test runs where it is ignored (a background CI job).
    proc = subprocess.Popen([*cortex_command(), "watch", "--debounce", "0.1"], cwd=project,
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        manifest_path = project / ".cortex" / "cache" / "manifest.bin"
        import select

        assert select.select([proc.stderr], [], [], 60)[0], "cortex watch printed nothing for 60 s"
        assert "watching" in proc.stderr.readline()  # ready: the first sync is done
        second = cortex("watch", cwd=project, check=False)
        assert second.returncode == 1 and "already running" in second.stderr
        path = _path(project, memory_id)
        path.write_text(path.read_text(encoding="utf-8").replace("kafka", "pulsar"), encoding="utf-8")
        deadline = time.time() + 30
        while time.time() < deadline and b"pulsar" not in manifest_path.read_bytes():
            time.sleep(0.1)
        assert b"pulsar" in manifest_path.read_bytes()
        # While a watcher runs, readers trust it, but what cortex itself just wrote is found at once.
        fresh = _remember(project, "Written while watched: zookeeper quorum")
        assert _ids(project, "zookeeper quorum")[0] == fresh
        from cortex.watch import watcher_active

        assert watcher_active(Store.locate(project))
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped" in err


def test_watch_stops_cleanly_on_sigterm(project):
    proc = subprocess.Popen([*cortex_command(), "watch"], cwd=project, stderr=subprocess.PIPE, text=True)
    import select

    assert select.select([proc.stderr], [], [], 60)[0] and "watching" in proc.stderr.readline()
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped" in err
    from cortex.watch import watcher_active

    assert not watcher_active(Store.locate(project))


@pytest.mark.parametrize("schema", [6, 7, 8])
def test_a_cache_from_an_older_schema_is_upgraded_in_place_not_rebuilt(project, schema):
    """Schema 6 lacked the fields `cortex list` shows, 7 those the briefing ranks by: they are filled from each
    entry's metadata; 8 held every entry as a dict. The full-text index and vectors (minutes at 100,000
    memories) are kept, and the manifest is written back in columns."""
    import marshal
    import zlib

    from cortex.index import manifest as mf

    remember(project, "Chose SQLite over Postgres for the local cache", type="decision", pinned=True, tags=["db"])
    assert "SQLite" in cortex("recall", "sqlite cache", cwd=project).stdout
    briefing = cortex("briefing", "--fresh", cwd=project).stdout
    path = project / ".cortex" / "cache" / "manifest.bin"
    old = Manifest.load(path)
    vectors = (project / ".cortex" / "cache" / "vectors.f32").read_bytes()
    files = {rel: dict(entry) for rel, entry in old.files.items()}
    for entry in files.values():
        for key in ((*mf.LIST_FIELDS, "session") if schema == 6 else ()) + (mf.BRIEF_FIELDS if schema < 8 else ()):
            entry.pop(key, None)
    header = {"synced_ns": old.synced_ns, "model": old.model, "dim": old.dim, "vector_keys": old.vector_keys,
              "pending_deletes": old.pending_deletes, "parts": old.parts}
    if schema == 6:  # one marshalled dict after its CRC
        payload = marshal.dumps(header | {"files": files})
        path.write_bytes(mf.UPGRADABLE + zlib.crc32(payload).to_bytes(4, "little") + payload)
    else:  # schema 7 and 8: the header, then the entries as dicts in chunks, each after its length, then the CRC
        pieces = [marshal.dumps(header | {"chunks": 1}), marshal.dumps(files)]
        body = b"".join(len(piece).to_bytes(4, "little") + piece for piece in pieces)
        magic = mf.CHUNKED if schema == 7 else mf.ROWS
        path.write_bytes(magic + body + zlib.crc32(body).to_bytes(4, "little"))
    assert path.read_bytes()[:len(mf.MAGIC)] != mf.MAGIC
    report = Index(Store.locate(project)).sync(full=True)
    assert not report.rebuilt and report.embedded == 0
    assert path.read_bytes().startswith(mf.MAGIC)  # written back in the new schema
    assert (project / ".cortex" / "cache" / "vectors.f32").read_bytes() == vectors
    listed = cortex("list", cwd=project).stdout
    assert "Chose SQLite over Postgres" in listed and " p5  * " in listed.replace("decision", "")
    assert cortex("briefing", "--fresh", cwd=project).stdout == briefing


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


def test_a_big_rebuild_in_two_processes_finds_what_one_process_finds(tmp_path, example_store, monkeypatch):
    """A full-text build of many documents runs in two processes (Whoosh's multiprocessing writer): the same
    documents and scores as a build in one."""
    import cortex.index.cache as cache
    from cortex.index import fulltext

    real_apply, asked = fulltext.apply, []

    def apply(*args, **kwargs):  # the real writer; only which one was asked for is noted
        asked.append(kwargs.get("procs", 1))
        return real_apply(*args, **kwargs)

    monkeypatch.setattr(fulltext, "apply", apply)
    monkeypatch.setattr(cache.os, "cpu_count", lambda: 2)
    queries = ["why did we choose arq over celery", "database cache", "queue workers", "logging to stderr"]
    found = {}
    for procs, threshold in (("one", 10**9), ("two", 5)):
        monkeypatch.setattr(cache, "PARALLEL_BUILD", threshold)
        root = tmp_path / procs / ".cortex"
        shutil.copytree(example_store, root)
        store = Store(root, "project")
        index = Index(store)
        index.rebuild()
        found[procs] = [fulltext.search(index.fulltext_index(), query, 20) for query in queries]
        log = store.state_dir / "cortex.log"
        assert "building in one" not in (log.read_text(encoding="utf-8") if log.exists() else "")
    assert asked == [1, 2]  # the second build was the two-process one, and it did not fall back
    assert sum(1 for hits in found["one"] if hits) >= 3
    for one, two in zip(found["one"], found["two"]):
        assert sorted(path for path, _ in one) == sorted(path for path, _ in two)
        assert sorted(round(score, 6) for _, score in one) == sorted(round(score, 6) for _, score in two)


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
    saved = store.cache_dir / "centrality.bin"
    assert saved.exists()
    again = Index(store)
    again.sync(full=True)
    assert again.centralities() == computed == again._computed_centralities()
    third = remember(project, "SQLite job queue: vacuum weekly, the file grows with finished jobs", type="pattern")
    fresh = Index(store)
    fresh.sync(full=True)
    assert fresh.centralities() == fresh._computed_centralities()
    assert third.id in fresh.centralities() or first.id in fresh.centralities()
    saved.write_bytes(b"garbage")  # damaged: worked out again, and saved again
    damaged = Index(store)
    damaged.sync(full=True)
    assert damaged.centralities() == fresh.centralities()


def test_the_hop_map_is_kept_for_the_next_process_until_the_store_changes(project, monkeypatch):
    """Recall follows strong links from its hits; the map of those links is made from every memory's links once
    and kept in the cache for the committed manifest: the next process reads it instead of the links column, and
    a new link made after that is followed."""
    from cortex.memory import Link

    hub = remember(project, "Chose SQLite over Postgres for the job queue: one file, no server", type="decision")
    near = remember(project, "WAL mode keeps readers unblocked", type="gotcha", links=[Link("relates_to", hub.id, 0.9)])
    store = Store.locate(project)
    for path in store.memories_dir.rglob("*.md"):  # written a while ago: no sync re-reads them as racily clean
        os.utime(path, (time.time() - 60, time.time() - 60))
    index = Index(store)
    index.sync(full=True)
    made = {key: list(index.hops(0.4)[key]) for key in index.hops(0.4)}
    assert ("relates_to", near.id, 0.9) in made[hub.id] and ("relates_to", hub.id, 0.9) in made[near.id]
    assert (store.cache_dir / "hops.bin").exists()

    def no_links(*args, **kwargs):
        raise AssertionError("read every memory's links again")

    again = Index(store)
    again.sync(full=True)
    with monkeypatch.context() as patched:
        patched.setattr(Index, "_link_map", no_links)
        assert {key: list(again.hops(0.4)[key]) for key in again.hops(0.4)} == made
    later = remember(project, "Vacuum the queue database weekly", type="pattern", links=[Link("relates_to", hub.id, 0.8)])
    fresh = Index(store)
    fresh.sync(full=True)
    assert ("relates_to", later.id, 0.8) in fresh.hops(0.4)[hub.id]
    (store.cache_dir / "hops.bin").write_bytes(b"garbage")  # damaged: made again
    damaged = Index(store)
    damaged.sync(full=True)
    assert ("relates_to", later.id, 0.8) in damaged.hops(0.4)[hub.id]


def test_the_views_a_recall_reads_are_kept_for_the_next_process_until_the_store_changes(project, monkeypatch):
    """The records, the id map, the filters and the rows of the vectors are made from the manifest's columns
    once and kept in the cache for the committed manifest: a later process recalls the same hits without
    making any of them, and after a change they are made again (the new memory found)."""
    from cortex.recall import recall_store

    remember(project, "Chose SQLite over Postgres for the job queue: one file, no server", type="decision")
    remember(project, "WAL mode keeps readers unblocked", type="gotcha")
    store = Store.locate(project)
    for path in store.memories_dir.rglob("*.md"):  # written a while ago: no sync re-reads them as racily clean
        os.utime(path, (time.time() - 60, time.time() - 60))
    made = [hit.memory.id for hit in recall_store(store, "sqlite job queue", index=Index(store)).hits]
    assert made
    names = {path.name.split("-")[0] for path in store.cache_dir.glob("*.bin")}
    assert {"records.bin", "ids.bin", "allowed", "dense", "hops.bin"} <= names

    def made_again(*args, **kwargs):
        raise AssertionError("made a view the cache keeps")

    with monkeypatch.context() as patched:
        for name in ("_sorted_out", "embedded", "_link_map"):
            patched.setattr(Index, name, made_again)
        assert [hit.memory.id for hit in recall_store(store, "sqlite job queue", index=Index(store)).hits] == made
    records = store.cache_dir / "records.bin"
    damaged = bytearray(records.read_bytes())
    damaged[-3] ^= 0x20  # one bit of a path flipped: still a valid marshal, no longer the same bytes
    records.write_bytes(bytes(damaged))
    assert [hit.memory.id for hit in recall_store(store, "sqlite job queue", index=Index(store)).hits] == made
    assert records.read_bytes() != bytes(damaged)  # made again and saved
    later = remember(project, "The job queue vacuums its SQLite file weekly", type="pattern")
    assert later.id in [hit.memory.id for hit in recall_store(store, "vacuums sqlite weekly", index=Index(store)).hits]


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


def test_recall_ranks_while_a_child_syncs_and_answers_again_when_files_changed(project):
    """A one-shot `cortex recall` ranks from the committed cache while a forked child makes the sync; when the
    child finds files changed by hand (edited, removed, added), the answer is made again from the synced cache,
    and that sync is committed: the next run finds nothing to do."""
    from tests.helpers import cortex_json

    remember(project, "Chose SQLite over Postgres for the job queue: one file, no server", type="decision")
    edited = remember(project, "Retry flaky uploads three times with backoff", type="pattern")
    gone = remember(project, "The staging bucket is cleaned every night by a cron job", type="gotcha")
    store = Store.locate(project)
    for path in store.memories_dir.rglob("*.md"):  # written a while ago: no sync re-reads them as racily clean
        os.utime(path, (time.time() - 60, time.time() - 60))
    assert [hit["id"] for hit in cortex_json("recall", "staging bucket cron", cwd=project)][:1] == [gone.id]
    committed = (store.cache_dir / "manifest.bin").stat().st_mtime_ns

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
    after = (store.cache_dir / "manifest.bin").stat().st_mtime_ns
    assert after > committed  # the child's sync was committed
    manifest = Manifest.load(store.cache_dir / "manifest.bin")
    assert manifest is not None and "zebrafish" in manifest.files.value(path.relative_to(store.memories_dir).as_posix(),
                                                                        "meta")


def test_a_watchers_account_of_the_changed_files_stands_for_a_walk(project, monkeypatch):
    """`cortex serve`'s observer names the files that changed: the index reads those, brings the full text and
    vectors in step and commits a newer check time (other processes trust it again), without a stat of every
    file; anything it cannot account for (no manifest yet) is a walk as before."""
    from cortex.index.manifest import Manifest

    edited = _remember(project, "Deploys go through the staging cluster first", type="pattern")
    removed = _remember(project, "Redis runs in a container on port 6380")
    store = Store.locate(project)
    index = Index(store)
    index.sync(full=True)
    before = Manifest.load(index.manifest_path).synced_ns
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
    committed = Manifest.load(index.manifest_path)
    from cortex.index.manifest import CLOCK_SLACK_NS

    assert committed.synced_ns == seen - CLOCK_SLACK_NS > before
    assert "0123456789ab" in {entry.get("id") for entry in committed.files.values()}
    fresh = Index(store)  # no manifest in memory: the account cannot stand for a walk
    fresh.watched([path], time.time_ns())
    with pytest.raises(AssertionError, match="walked every file"):
        fresh.ensure(full=False)


def test_a_manifest_kept_in_columns_reads_back_as_one_built_from_nothing(tmp_path, example_store, monkeypatch):
    """The manifest is written in columns of `CHUNK` rows, copying the chunks nothing changed and leaving holes
    where files went. After files are edited, removed, added, hand-broken and removed again, across several
    syncs and processes, what the next process reads is what a rebuild from the files makes, and the commands
    that read columns (list, status) say the same as after that rebuild."""
    from cortex.index import manifest as mf

    monkeypatch.setattr(mf, "CHUNK", 4)  # the example's ~40 memories in ten chunks: every path of the code
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
    holed = Manifest.load(store.cache_dir / "manifest.bin")
    assert holed is not None and holed.files.paths.count(None) == len(removed)  # holes left, other chunks copied
    broken.write_text("---\nid: [unclosed\n---\nbody\n", encoding="utf-8")
    (root / ".cortex" / "memories" / "decision" / "2026-11-27-new-queue.md").write_text(
        "---\nid: 5e1f0a2b3c4d\ntype: decision\ntitle: The queue moved to arq\nstatus: active\n---\n\n"
        "The queue moved to arq from celery.\n", encoding="utf-8")
    Index(store).sync(full=True)
    files[20].unlink()
    later = Index(store)
    later.sync(full=True)
    kept = Manifest.load(store.cache_dir / "manifest.bin")
    assert kept is not None and kept.files.paths.count(None) == 0  # a fifth hole in 27 rows: packed
    listed, status = cortex("list", "--all", cwd=root).stdout, cortex("status", cwd=root).stdout

    (store.cache_dir / "manifest.bin").unlink()
    fresh = Index(store)
    fresh.rebuild()
    rebuilt = Manifest.load(store.cache_dir / "manifest.bin")
    assert rebuilt is not None
    assert {rel: dict(entry) for rel, entry in kept.files.items()} == \
        {rel: dict(entry) for rel, entry in rebuilt.files.items()}
    assert len(kept.files) == len(files) - len(removed) - 1 + 1
    assert "The queue moved to arq" in listed and broken.name in status  # the new memory; the broken file
    assert cortex("list", "--all", cwd=root).stdout == listed
    assert cortex("status", cwd=root).stdout == status


def test_memories_built_ahead_are_the_ones_built_one_at_a_time(tmp_path, example_store):
    """A resident server builds every memory's `Memory` in one decode once it is ready (`Index.memories_ahead`):
    each is the one `memory(rel)` builds on its own; a store over the limit is left to build them as asked."""
    from cortex.index import Index

    root, store, index = _example_index(tmp_path, example_store)
    assert index.memories_ahead(most=1) == 0  # over the limit: nothing built ahead
    built = index.memories_ahead()
    records = list(index.records())
    assert built == len(records) > 10
    alone = Index(store)
    alone.sync(full=True)
    for rel in records:
        assert index.memory(rel) == alone.memory(rel), rel
    assert index.memories_ahead() == 0  # all there already
