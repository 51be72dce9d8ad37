"""No file can take the store down (issue 18): the readers of memory files and of the cache.

A YAML alias bomb, an oversized memory, a symbolic link in `memories/`, a FIFO, a damaged Whoosh segment,
vectors or manifest: each is refused or rebuilt, reported, and everything else keeps working.
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cortex import memory as fmt
from cortex.errors import CortexError, MalformedMemory, MemoryNotFound
from cortex.index import Index
from cortex.memory import Memory
from cortex.store import Store
from tests.helpers import cortex, cortex_command, cortex_json, remember

ALIAS_BOMB = "---\nid: aaaaaaaaaaaa\ntype: context\ntitle: nine nested aliases\nlol: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi")
) + "---\nA billion laughs.\n"
QUERY = "signature check fails when the body was parsed"
STRIPE = "b3dc534099f0"  # the example store's answer to QUERY


def _limited(*args: str, cwd: Path, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`cortex ARGS` with 3 GB of address space and a time limit: the alias bomb took 4.7 GB and minutes."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run([*cortex_command(), *args], cwd=cwd, input=input, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit, env=dict(os.environ))


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _memory_text(memory_id: str, title: str, body: str) -> str:
    return f"---\nid: {memory_id}\ntype: context\ntitle: {title}\n---\n{body}\n"


# ------------------------------------------------------------------ the front matter


def test_an_alias_bomb_is_refused_before_anything_expands():
    """In a process of 2 GB of address space: expanding the aliases would take 4.7 GB."""
    code = ("from cortex import memory\nfrom cortex.errors import MalformedMemory\n"
            f"try:\n    memory.parse({ALIAS_BOMB!r})\nexcept MalformedMemory as exc:\n    print(exc.reason)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["YAML anchors and aliases are not allowed in a memory file"]


@pytest.mark.parametrize("yaml_line, reason", [
    ("base: &x {a: 1}", "anchors and aliases are not allowed"),
    ("x: !!binary aGVsbG8=", "holds a bytes value"),
    ("x: !!set {a, b}", "holds a set value"),
    ("created: 2026-13-45", "month must be in 1..12"),
    ("created: 2026-02-30T10:00:00Z", "day is out of range for month"),
    ('title2: "\\ud800"', "lone surrogate"),
    ("x: " + "[" * 20000 + "]" * 20000, "nested too deeply"),
])
def test_odd_front_matter_is_malformed_never_another_exception(yaml_line, reason):
    text = f"---\nid: aaaaaaaaaaaa\ntype: context\ntitle: t\n{yaml_line}\n---\nbody\n"
    with pytest.raises(MalformedMemory, match=reason.replace("(", r"\(")):
        fmt.parse(text)


def test_a_store_with_an_alias_bomb_keeps_working(tmp_path, example_store):
    _write(example_store / "memories" / "context" / "laughs-aaaaaaaaaaaa.md", ALIAS_BOMB)
    where = ("--dir", str(example_store))
    status = _limited("status", "--json", *where, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert any("laughs-aaaaaaaaaaaa.md: YAML anchors and aliases are not allowed" in p
               for p in json.loads(status.stdout)["problems"])
    assert json.loads(status.stdout)["total"] == 26
    listed = _limited("list", "--json", *where, cwd=tmp_path)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) > 10
    recalled = _limited("recall", QUERY, "--json", *where, cwd=tmp_path)
    assert recalled.returncode == 0 and json.loads(recalled.stdout)[0]["id"] == STRIPE
    assert _limited("briefing", *where, cwd=tmp_path).returncode == 0
    assert _limited("reindex", *where, cwd=tmp_path).returncode == 0
    assert _limited("verify", *where, cwd=tmp_path).returncode == 0


def test_session_start_with_an_alias_bomb_in_the_project(project):
    _write(project / ".cortex" / "memories" / "context" / "laughs-aaaaaaaaaaaa.md", ALIAS_BOMB)
    remember(project, "Deploys go through the staging cluster first", type="pattern", pinned=True)
    result = _limited("hook", "session-start", cwd=project, input=json.dumps({"cwd": str(project)}), timeout=30)
    assert result.returncode == 0
    assert "staging cluster" in result.stdout


# ------------------------------------------------------------------ the size cap


def test_a_memory_over_the_size_cap_is_refused_on_write(project):
    store = Store.locate(project)
    with pytest.raises(CortexError) as refused:
        store.create(Memory(id="", type="context", title="A pasted log", body="x" * 10_000_000))
    message = str(refused.value)
    assert "\n" not in message and "store.max_memory_bytes" in message and "262,144" in message
    assert "10,000," in message  # the size
    assert store.walk()[0] == []
    small = store.create(Memory(id="", type="context", title="A short note", body="fine\n"))
    with pytest.raises(CortexError, match="over store.max_memory_bytes"):
        store.update(small.id, {}, body="y" * 300_000)
    assert store.get(small.id).body == "fine\n"


def test_the_size_cap_is_a_config_key(project):
    store = Store.locate(project)
    config = store.config_path
    config.write_text(config.read_text(encoding="utf-8").replace("max_memory_bytes: 262144", "max_memory_bytes: 4096"),
                      encoding="utf-8")
    store.reload_config()
    with pytest.raises(CortexError, match=r"over store.max_memory_bytes \(4,096\)"):
        store.create(Memory(id="", type="context", title="A long one", body="x" * 5000))
    config.write_text("store:\n  max_memory_bytes: lots\n", encoding="utf-8")
    store.reload_config()
    assert store.max_memory_bytes() == 262144
    assert store.create(Memory(id="", type="context", title="A long one", body="x" * 5000)).body.startswith("xxx")
    assert any("store.max_memory_bytes" in w for w in store.config().warnings)


def test_an_oversized_file_on_disk_is_a_problem_and_is_not_parsed(project):
    remember(project, "The ledger is append-only", link=False)
    huge = _write(project / ".cortex" / "memories" / "context" / "huge-dddddddddddd.md",
                  _memory_text("dddddddddddd", "A fifty megabyte paste", "ledger " * 50_000))
    status = cortex_json("status", cwd=project)
    assert f"{huge}: is {huge.stat().st_size:,} bytes, over store.max_memory_bytes (262,144); split or shorten it, or raise the " \
           f"limit in config.yaml" in status["problems"]
    assert status["total"] == 1
    assert [hit["id"] for hit in cortex_json("recall", "ledger", cwd=project)] != ["dddddddddddd"]
    with pytest.raises(MalformedMemory, match="over store.max_memory_bytes"):
        Store.locate(project).read(huge)


# ------------------------------------------------------------------ symbolic links and odd entries


def test_a_symbolic_link_to_a_file_outside_the_repository_is_never_read_or_replaced(project, tmp_path):
    outside = _write(tmp_path / "elsewhere" / "notes.md",
                     _memory_text("bbbbbbbbbbbb", "Outside the repository", "kubernetes secrets live here"))
    link = project / ".cortex" / "memories" / "context" / "outside-bbbbbbbbbbbb.md"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    remember(project, "Kubernetes deploys use helm charts", link=False)
    assert "bbbbbbbbbbbb" not in [hit["id"] for hit in cortex_json("recall", "kubernetes secrets", cwd=project)]
    assert "bbbbbbbbbbbb" not in [item["id"] for item in cortex_json("list", cwd=project)]
    status = cortex_json("status", cwd=project)
    assert f"{link}: is a symbolic link; memory files must be regular files" in status["problems"]
    forgotten = subprocess.run([*cortex_command(), "forget", "bbbbbbbbbbbb"], cwd=project, capture_output=True,
                               text=True, timeout=120)
    assert forgotten.returncode == 1
    assert link.is_symlink() and "status: archived" not in outside.read_text(encoding="utf-8")
    store = Store.locate(project)
    with pytest.raises(MalformedMemory, match="symbolic link"):
        store.read(link)
    with pytest.raises(MemoryNotFound):
        store.get("bbbbbbbbbbbb")
    assert [p.reason for p in store.scan().problems] == ["is a symbolic link; memory files must be regular files"]


def test_a_symbolic_link_to_a_folder_is_not_walked_and_not_written_through(project, tmp_path):
    folder = tmp_path / "shared-notes"
    _write(folder / "x-cccccccccccc.md", _memory_text("cccccccccccc", "Linked in", "redis cluster notes"))
    memories = project / ".cortex" / "memories"
    memories.mkdir(exist_ok=True)
    (memories / "gotcha").symlink_to(folder, target_is_directory=True)
    store = Store.locate(project)
    assert store.walk()[0] == []
    index = Index(store)
    index.sync()
    assert [(p.name, reason) for p, reason in index.problems()] == [
        ("gotcha", "is a symbolic link; memory files must be regular files")]
    with pytest.raises(CortexError, match="symbolic link"):
        store.create(Memory(id="", type="gotcha", title="Would land outside", body="no\n"))
    assert sorted(p.name for p in folder.iterdir()) == ["x-cccccccccccc.md"]


def test_a_fifo_named_like_a_memory_does_not_block_a_reader(tmp_path, example_store):
    fifo = example_store / "memories" / "context" / "pipe-eeeeeeeeeeee.md"
    os.mkfifo(fifo)
    status = _limited("status", "--json", "--dir", str(example_store), cwd=tmp_path, timeout=60)
    assert f"{fifo}: is not a regular file" in json.loads(status.stdout)["problems"]
    with pytest.raises(MalformedMemory, match="not a regular file"):
        Store.locate(directory=example_store).read(fifo)


# ------------------------------------------------------------------ a damaged cache


def _segment(store_dir: Path) -> Path:
    return next((store_dir / "cache" / "whoosh").glob("*.seg"))


def _recall_ids(store_dir: Path, cwd: Path) -> list[str]:
    return [hit["id"] for hit in cortex_json("recall", QUERY, "--dir", str(store_dir), cwd=cwd)]


@pytest.mark.parametrize("damage", ["truncate", "overwrite"])
def test_a_damaged_whoosh_segment_is_rebuilt_after_a_write(tmp_path, example_store, damage):
    segment = _segment(example_store)
    data = segment.read_bytes()
    segment.write_bytes(data[:-5000] if damage == "truncate" else data[:1000] + b"\xab" * 400 + data[1400:])
    store = Store.locate(directory=example_store)
    remember(store, "Signature checks need the raw request body", link=False)  # one write
    assert STRIPE in _recall_ids(example_store, tmp_path)[:2]  # the new memory is about signatures too
    log = (example_store / "state" / "cortex.log").read_text(encoding="utf-8")
    assert "full-text index" in log and "rebuilt" in log
    verify = cortex_json("verify", "--dir", str(example_store), cwd=tmp_path)
    assert verify["ok"], verify["differences"]


def test_status_rebuilds_a_damaged_whoosh_segment_and_says_so(tmp_path, example_store):
    segment = _segment(example_store)
    segment.write_bytes(segment.read_bytes()[:-5000])
    status = cortex_json("status", "--dir", str(example_store), cwd=tmp_path)
    assert status["cache"]["rebuilt"] and "full-text index" in status["cache"]["rebuilt"][0]
    assert any(w.startswith("cache: full-text index") for w in status["warnings"])
    again = cortex_json("status", "--dir", str(example_store), cwd=tmp_path)
    assert again["cache"]["rebuilt"] == [] and not any("cache" in p for p in again["problems"])
    assert _recall_ids(example_store, tmp_path)[0] == STRIPE


def test_a_segment_that_fails_only_when_searched_is_answered_around_then_rebuilt(tmp_path, example_store):
    store = Store.locate(directory=example_store)
    with sqlite3.connect(store.cache_dir / "cache.db") as conn:
        conn.execute("DELETE FROM parts")  # no record of Whoosh's files: the stat cannot tell
    segment = _segment(example_store)
    segment.write_bytes(segment.read_bytes()[:-5000])
    first = cortex_json("recall", QUERY, "--dir", str(example_store), cwd=tmp_path)
    assert STRIPE in [hit["id"] for hit in first]  # from the vectors, while the index is unreadable
    assert _recall_ids(example_store, tmp_path)[0] == STRIPE  # the next sync rebuilt it
    assert cortex_json("verify", "--dir", str(example_store), cwd=tmp_path)["ok"]


@pytest.mark.parametrize("damage", ["garbage", "truncate"])
def test_a_damaged_cache_database_is_rebuilt_and_reported(tmp_path, example_store, damage):
    database = example_store / "cache" / "cache.db"
    for name in ("cache.db-wal", "cache.db-shm"):
        (example_store / "cache" / name).unlink(missing_ok=True)
    data = database.read_bytes()
    database.write_bytes(os.urandom(len(data)) if damage == "garbage" else data[:len(data) // 2])
    status = cortex_json("status", "--dir", str(example_store), cwd=tmp_path)
    assert any("cache.db" in line and "rebuilt" in line for line in status["cache"]["rebuilt"])
    assert _recall_ids(example_store, tmp_path)[0] == STRIPE
    assert cortex_json("verify", "--dir", str(example_store), cwd=tmp_path)["ok"]


def test_copying_the_cache_is_not_damage(tmp_path, example_store):
    for path in (example_store / "cache").rglob("*"):
        if path.is_file():
            os.utime(path, ns=(time.time_ns(), time.time_ns()))  # as `cp -r` leaves it
    status = cortex_json("status", "--dir", str(example_store), cwd=tmp_path)
    assert status["cache"]["rebuilt"] == []
    assert not (example_store / "state" / "cortex.log").exists()


# ------------------------------------------------------------------ verify and the digest


def _flip(database: Path, rows: list[int]) -> None:
    """One float of each of these vector rows (in the order they were added) changed in place."""
    with sqlite3.connect(database) as conn:
        for row in rows:
            rowid, blob = conn.execute("SELECT rowid, vector FROM vectors ORDER BY rowid LIMIT 1 OFFSET ?",
                                       (row,)).fetchone()
            data = bytearray(blob)
            data[7 * 4 + 3] ^= 0x40  # the exponent of one float
            conn.execute("UPDATE vectors SET vector = ? WHERE rowid = ?", (bytes(data), rowid))


def test_verify_recomputes_the_vectors_and_names_damaged_rows(tmp_path, example_store):
    _flip(example_store / "cache" / "cache.db", [2, 9])
    result = subprocess.run([*cortex_command(), "verify", "--dir", str(example_store)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "2 of 25 vectors differ from their memory's text" in result.stdout  # only recomputing them tells
    assert "run `cortex reindex`" in result.stdout
    assert "25 recomputed and compared" in result.stdout
    subprocess.run([*cortex_command(), "reindex", "--dir", str(example_store)], cwd=tmp_path, check=True,
                   capture_output=True, timeout=120)
    assert cortex_json("verify", "--dir", str(example_store), cwd=tmp_path)["ok"]


def test_an_incremental_cache_and_a_rebuilt_one_have_the_same_digest(project):
    for text in ("Deploys go through the staging cluster first", "Redis keys need a TTL",
                 "The API is versioned in the URL path", "Amounts are integer cents"):
        remember(project, text)  # each embedded on its own, by the pure-Python encoder
    incremental = cortex_json("verify", cwd=project)
    subprocess.run([*cortex_command(), "reindex"], cwd=project, check=True, capture_output=True, timeout=120)
    rebuilt = cortex_json("verify", cwd=project)
    assert incremental["ok"] and rebuilt["ok"] and incremental["vectors"]
    assert incremental["digest"] == rebuilt["digest"]
    assert incremental["vectors_checked"] == rebuilt["vectors_checked"] == 4


def test_an_alias_bomb_in_config_yaml_is_a_one_line_error(project):
    """config.yaml is tracked and arrives with a pull: the same nested aliases must not take the store down."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for n in "bcdefghi":
        previous = chr(ord(n) - 1)
        lines.append(f"{n}: &{n} [*{previous},*{previous},*{previous},*{previous},*{previous},*{previous},*{previous},*{previous},*{previous}]")
    (project / ".cortex" / "config.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = cortex("status", cwd=project, check=False)
    assert result.returncode == 1 and "anchors and aliases are not allowed in config.yaml" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
