"""The store API: files on disk, project and global, safe writes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cortex.errors import AmbiguousId, MemoryNotFound, NotInitialised
from cortex.memory import Memory
from cortex.store import Store
from tests.helpers import checkout_new_branch


def _new(store: Store, title: str, **fields) -> Memory:
    body = fields.pop("body", f"{title}.\n")
    return store.create(Memory(id="", type=fields.pop("type", "decision"), title=title, body=body, **fields))


def test_create_writes_one_file_per_memory_under_its_type(repo):
    store = Store.init(repo / ".cortex")
    made = _new(store, "Use SQLite, not Postgres", tags=["storage"], files=["app.py"], priority=8)
    assert made.path == repo / ".cortex" / "memories" / "decision" / f"use-sqlite-not-postgres-{made.id}.md"
    assert made.branch == "main" and made.created == made.updated and made.created.endswith("Z")
    assert store.get(made.id).title == "Use SQLite, not Postgres"
    assert store.get(made.id[:6]).id == made.id


def test_branch_comes_from_the_checked_out_branch(repo):
    store = Store.init(repo / ".cortex")
    checkout_new_branch(repo, "feature/auth")
    assert _new(store, "Tokens expire after an hour", type="context").branch == "feature/auth"


def test_ambiguous_and_unknown_ids(repo):
    store = Store.init(repo / ".cortex")
    a = store.create(Memory(id="abcd00000001", type="context", title="one"))
    store.create(Memory(id="abcd00000002", type="context", title="two"))
    with pytest.raises(AmbiguousId):
        store.get("abcd")
    with pytest.raises(MemoryNotFound):
        store.get("ffff")
    with pytest.raises(MemoryNotFound):
        store.get("not-an-id")
    assert store.get("abcd00000001").id == a.id


def test_a_renamed_file_is_still_found_by_the_id_inside(repo):
    store = Store.init(repo / ".cortex")
    made = _new(store, "Renamed by a person")
    made.path.rename(made.path.parent / "my-own-name.md")
    assert store.get(made.id[:5]).title == "Renamed by a person"


def test_list_filters(repo):
    store = Store.init(repo / ".cortex")
    _new(store, "decision one", tags=["db"])
    g = _new(store, "a gotcha", type="gotcha", pinned=True)
    old = _new(store, "old one")
    store.archive(old.id)
    assert {m.title for m in store.list()} == {"decision one", "a gotcha"}
    assert [m.id for m in store.list(types=["gotcha"])] == [g.id]
    assert [m.id for m in store.list(statuses=["archived"])] == [old.id]
    assert len(store.list(statuses=())) == 3


def test_update_changes_fields_and_stamps_updated(repo):
    store = Store.init(repo / ".cortex")
    made = _new(store, "Cache keys include the schema version", created="2026-01-01T00:00:00Z")
    changed = store.update(made.id, {"priority": 9, "tags": ["cache"]})
    assert changed.priority == 9 and changed.tags == ["cache"]
    assert changed.updated > made.updated and changed.created == "2026-01-01T00:00:00Z"


def test_invalid_update_writes_nothing(repo):
    store = Store.init(repo / ".cortex")
    made = _new(store, "Keep me intact")
    before = made.path.read_bytes()
    with pytest.raises(Exception, match="priority"):
        store.update(made.id, {"priority": 42})
    assert made.path.read_bytes() == before


def test_archive_and_supersede(repo):
    store = Store.init(repo / ".cortex")
    old, new = _new(store, "Use Postgres"), _new(store, "Use SQLite")
    archived = store.archive(old.id)
    assert archived.status == "archived" and archived.path.exists()
    old_after, new_after = store.supersede(old.id, new.id)
    assert old_after.status == "superseded"
    assert [(link.rel, link.to) for link in new_after.links] == [("supersedes", old.id)]
    store.supersede(old.id, new.id)  # twice: still one link
    assert len(store.get(new.id).links) == 1


def test_malformed_files_are_problems_not_failures(repo):
    store = Store.init(repo / ".cortex")
    good = _new(store, "Good memory")
    bad = store.memories_dir / "gotcha" / "broken-aaaaaaaaaaaa.md"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("---\nid: aaaaaaaaaaaa\ntype: gotcha\ntitle: x\npriority: 99\n---\n", encoding="utf-8")
    conflicted = store.memories_dir / "decision" / "c-bbbbbbbbbbbb.md"
    conflicted.write_text("<<<<<<< HEAD\n---\nid: bbbbbbbbbbbb\n=======\n>>>>>>> feature\n", encoding="utf-8")
    scan = store.scan()
    assert [m.id for m in scan.memories] == [good.id]
    reasons = {p.path.name: p.reason for p in scan.problems}
    assert "priority: 99 is outside 1..10" in reasons[bad.name]
    assert "conflict markers" in reasons[conflicted.name]
    assert bad.read_text(encoding="utf-8").endswith("priority: 99\n---\n")  # left untouched


def test_reading_never_writes_tracked_files(repo):
    store = Store.init(repo / ".cortex")
    made = _new(store, "Read me often")
    before = {p: p.read_bytes() for p in store.walk()[0]}
    for _ in range(3):
        store.get(made.id)
        store.record_access([made.id])
        store.list()
    assert {p: p.read_bytes() for p in store.walk()[0]} == before
    assert store.access_counts() == {made.id: 3}


def test_locate_walks_up_and_never_mistakes_the_global_store(repo, isolated_env):
    Store.init(repo / ".cortex")
    sub = repo / "src" / "deep"
    sub.mkdir(parents=True)
    assert Store.locate(sub).root == repo / ".cortex"
    outside = isolated_env / "elsewhere"
    outside.mkdir()
    Store.locate(use_global=True)  # creates ~/.cortex under the fake home
    with pytest.raises(NotInitialised, match="run `cortex init`"):
        Store.locate(outside)


def test_global_store_marks_memories_global(isolated_env):
    store = Store.locate(use_global=True)
    made = _new(store, "Prefer ripgrep over grep", type="pattern")
    assert store.root == (isolated_env / ".cortex").resolve()
    assert made.scope == "global" and made.branch is None


def test_non_git_folder_works_without_branch(tmp_path):
    store = Store.init(tmp_path / "plain" / ".cortex")
    assert _new(store, "No git here").branch is None
    assert store.worktree is None and store.current_branch() is None


def test_two_processes_writing_at_once_lose_nothing(repo):
    Store.init(repo / ".cortex")
    code = (
        "import sys\nfrom cortex.store import Store\nfrom cortex.memory import Memory\n"
        "s = Store.locate()\n"
        "for i in range(25):\n"
        "    s.create(Memory(id='', type='context', title=f'{sys.argv[1]} note {i}'))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, name], cwd=repo) for name in ("alpha", "beta")]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    scan = Store.locate(repo).scan()
    assert len(scan.memories) == 50 and not scan.problems
    leftovers = [p for p in (repo / ".cortex").rglob("*.tmp")]
    assert leftovers == []


def test_the_store_refuses_to_write_secrets(repo):
    from cortex.errors import SecretDetected

    store = Store.init(repo / ".cortex")
    for text in ("token ghp_1234567890abcdefghijklmnopqrstuvwxyzAB leaked", "PASSWORD=hunter2hunter2",
                 "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234567890\n-----END RSA PRIVATE KEY-----"):
        with pytest.raises(SecretDetected, match="looks like a secret"):
            _new(store, "Credentials note", body=text)
    assert store.walk()[0] == []
    made = _new(store, "Harmless", body="Rotate keys every 90 days; the commit 4a4529c5d1e2 did it.")
    with pytest.raises(SecretDetected):
        store.update(made.id, {}, body="api_key: sk_live_abcdefghijklmnop1234\n")
    assert "api_key" not in made.path.read_text(encoding="utf-8")
