"""The cache's database: one SQLite file per store, `cache/cache.db` (WAL: readers never wait for a writer).

    files        one row per memory file: stat, content hash, the filter columns (indexed), metadata as JSON
    vectors      (model, text hash) -> float32 blob: the static model's and the contextual model's vectors
    centrality   memory id -> centrality, for the commit named in `state`
    parts        Whoosh file name -> size, mtime, digest, as the last writer left them (damage behind its back)
    pending      paths still to remove from the full-text index
    state        synced_ns, model, dim, generation (bumped by every commit that changes something)

A writer holds the database's write lock (`BEGIN IMMEDIATE`) for its whole sync, so two processes never
interleave; the full text (Whoosh) and the vectors it writes are committed with the rows. Nothing here is
needed by anything but the cache: a database that fails to open or read is deleted and built again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cortex.index.manifest import FIELDS, Entries, Manifest, stored

NAME = "cache.db"
COMMIT = "commit"
SCHEMA = 1  # `PRAGMA user_version`: a database of another schema is built again
WAIT_S = 600.0  # how long a writer that must write (nothing committed yet) waits for another one
READ_WAIT_S = 5.0
# Files of the caches before the database (manifest, kept views, vectors): removed when the database is made.
OLD_FILES = ("manifest.bin", "*.bin", "vectors.f32", "contextual.f32", "contextual.json", "sync.lock")
TABLES = f"""
CREATE TABLE files (path TEXT PRIMARY KEY, {", ".join(FIELDS)});
CREATE INDEX files_id ON files(id);
CREATE INDEX files_type ON files(type, status, branch);
CREATE INDEX files_status ON files(status);
CREATE INDEX files_vhash ON files(vhash);
CREATE TABLE vectors (model TEXT NOT NULL, hash TEXT NOT NULL, vector BLOB NOT NULL, UNIQUE (model, hash));
CREATE TABLE centrality (id TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE parts (name TEXT PRIMARY KEY, size INTEGER, mtime INTEGER, digest TEXT);
CREATE TABLE pending (path TEXT PRIMARY KEY);
CREATE TABLE state (key TEXT PRIMARY KEY, value);
"""


class Damaged(Exception):
    """The database cannot be read (not a database, corrupt): it is built again."""


def damage(exc: BaseException) -> bool:
    """Whether an error of sqlite3 says the file is damaged (not that it is busy, read-only or full)."""
    return isinstance(exc, sqlite3.DatabaseError) and getattr(exc, "sqlite_errorname", "") in (
        "SQLITE_NOTADB", "SQLITE_CORRUPT", "SQLITE_CORRUPT_INDEX", "SQLITE_CORRUPT_SEQUENCE", "SQLITE_CORRUPT_VTAB")


def connect(folder: Path) -> sqlite3.Connection:
    """The store's cache database, made (with its tables) when missing or of another schema. Raises `Damaged`
    for a file that is not a readable database, `sqlite3.OperationalError` when it cannot be opened at all."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / NAME
    conn = sqlite3.connect(path, timeout=READ_WAIT_S, isolation_level=None, check_same_thread=False)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            with contextlib.suppress(sqlite3.OperationalError):  # a read-only folder: read as it is
                conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # a cache lost in a power cut is rebuilt
        if version != SCHEMA:
            _create(conn, folder)
    except sqlite3.DatabaseError as exc:
        conn.close()
        if damage(exc):
            raise Damaged(f"{NAME} was unreadable ({exc})") from exc
        raise
    return conn


def _create(conn: sqlite3.Connection, folder: Path) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA:  # another process made it meanwhile
            conn.execute("COMMIT")
            return
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            conn.execute(f'DROP TABLE "{name}"')
        for statement in TABLES.strip().split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    for pattern in OLD_FILES:
        for old in folder.glob(pattern):
            with contextlib.suppress(OSError):
                old.unlink()


def remove(folder: Path) -> None:
    """Delete the database (a damaged one: the next `connect` makes it again)."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            (folder / (NAME + suffix)).unlink()


@contextlib.contextmanager
def writing(conn: sqlite3.Connection, wait: bool) -> Iterator[bool]:
    """Yield True inside a write transaction (committed at the end, rolled back on an error), or False at once
    when another process is writing and `wait` is False (or the database cannot be written at all)."""
    conn.execute(f"PRAGMA busy_timeout = {int((WAIT_S if wait else 0) * 1000)}")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if damage(exc):
            raise
        yield False  # busy, or read-only: the committed state, changes held in memory
        return
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(READ_WAIT_S * 1000)}")
    try:
        yield True
        conn.execute("COMMIT")
    except BaseException as exc:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError) and getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL":
            path = conn.execute("PRAGMA database_list").fetchone()[2]  # said as any other full disk is
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path) from exc
        raise


def generation(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM state WHERE key = 'generation'").fetchone()
    return int(row[0]) if row else 0


def now_ns(folder: Path) -> int:
    """The file system's time now: a sync that begins its walk then records it, and a file changed after that
    has a time at or after it (the file system's clock, not the process's finer one, which runs ahead of it)."""
    try:
        os.utime(folder)  # the folder's own time: nothing reads it
        return folder.stat().st_mtime_ns
    except OSError:
        return time.time_ns() - 10_000_000  # a read-only cache commits nothing: an estimate will do


def load(conn: sqlite3.Connection) -> Manifest | None:
    """The committed manifest (one read transaction, or the caller's), or None when nothing was committed."""
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        state = dict(conn.execute("SELECT key, value FROM state").fetchall())
        if "generation" not in state:
            return None
        # In table order: ordered by path, SQLite walks the path index and looks up every row.
        rows = conn.execute(f"SELECT path, {', '.join(FIELDS)} FROM files ORDER BY rowid").fetchall()
        model = state.get("model")
        keys = [key for (key,) in conn.execute("SELECT hash FROM vectors WHERE model = ?", (model,))]
        parts = {name: (size, mtime, digest) for name, size, mtime, digest in conn.execute("SELECT * FROM parts")}
        pending = [path for (path,) in conn.execute("SELECT path FROM pending")]
    finally:
        if own:
            conn.execute("COMMIT")
    columns = list(zip(*rows)) if rows else [()] * (len(FIELDS) + 1)
    files = Entries(list(columns[0]), {name: list(columns[n + 1]) for n, name in enumerate(FIELDS)})
    return Manifest(files=files, synced_ns=int(state.get("synced_ns") or 0), model=model,
                    dim=int(state.get("dim") or 0), vector_keys=keys, pending_deletes=pending, parts=parts,
                    generation=int(state["generation"]))


def save(conn: sqlite3.Connection, manifest: Manifest, everything: bool = False) -> None:
    """Write what changed in `manifest` (inside the caller's write transaction) as the next generation."""
    files = manifest.files
    if everything:
        conn.execute("DELETE FROM files")
        changed: Any = list(files)
    else:
        conn.executemany("DELETE FROM files WHERE path = ?", [(rel,) for rel in files.removed])
        changed = sorted(files.changed)
    marks = ", ".join("?" * (len(FIELDS) + 1))
    conn.executemany(f"INSERT OR REPLACE INTO files (path, {', '.join(FIELDS)}) VALUES ({marks})",
                     ((rel, *(stored(name, entry.get(name)) for name in FIELDS))
                      for rel in changed for entry in [files[rel]]))
    files.changed.clear()
    files.removed.clear()
    conn.execute("DELETE FROM pending")
    conn.executemany("INSERT OR IGNORE INTO pending VALUES (?)", [(rel,) for rel in manifest.pending_deletes])
    conn.execute("DELETE FROM parts")
    conn.executemany("INSERT INTO parts VALUES (?, ?, ?, ?)", [(name, *mark) for name, mark in manifest.parts.items()])
    manifest.generation = generation(conn) + 1
    conn.executemany("INSERT OR REPLACE INTO state VALUES (?, ?)", [
        ("synced_ns", manifest.synced_ns), ("model", manifest.model), ("dim", manifest.dim),
        ("generation", manifest.generation)])


def mark_commit(folder: Path, generation: int) -> None:
    """`cache/commit`, rewritten after each commit of the files' rows: its stat is part of what a briefing is
    kept under (`cortex.layout.signature`), as a stat is all a hook looks at."""
    with contextlib.suppress(OSError):
        (folder / COMMIT).write_text(str(generation), encoding="utf-8")


# ---------------------------------------------------------------- vectors


def add_vectors(conn: sqlite3.Connection, model: str, keys: list[str], matrix: Any) -> None:
    """Store one float32 row for each text hash (inside a write transaction, or as one of its own)."""
    import numpy as np

    rows = np.ascontiguousarray(matrix, dtype="<f4")
    conn.executemany("INSERT OR REPLACE INTO vectors (model, hash, vector) VALUES (?, ?, ?)",
                     ((model, key, rows[n].tobytes()) for n, key in enumerate(keys)))


def vectors(conn: sqlite3.Connection, model: str | None, dim: int) -> tuple[Any, dict[str, int]] | None:
    """(matrix, row of each text hash) of a model's vectors, in the index's order (no sort: the rows are found by
    hash); None when it has none (or a row is not `dim` floats long)."""
    import numpy as np

    rows = conn.execute("SELECT hash, vector FROM vectors WHERE model = ?", (model,)).fetchall()
    if not rows or any(len(blob) != dim * 4 for _, blob in rows):
        return None
    matrix = np.frombuffer(b"".join(blob for _, blob in rows), dtype="<f4").reshape(len(rows), dim)
    return matrix, {key: n for n, (key, _) in enumerate(rows)}


def vector_count(conn: sqlite3.Connection, model: str) -> int:
    return int(conn.execute("SELECT count(*) FROM vectors WHERE model = ?", (model,)).fetchone()[0])


# ---------------------------------------------------------------- centralities and ids


def saved_centralities(conn: sqlite3.Connection, of_generation: int | None = None) -> dict[str, float] | None:
    """The centralities kept for the committed generation (or `of_generation`), None when none are."""
    conn.execute("BEGIN")
    try:
        kept = conn.execute("SELECT value FROM state WHERE key = 'centrality'").fetchone()
        current = generation(conn) if of_generation is None else of_generation
        if kept is None or int(kept[0]) != current or current == 0:
            return None
        return dict(conn.execute("SELECT id, value FROM centrality").fetchall())
    finally:
        conn.execute("COMMIT")


def keep_centralities(conn: sqlite3.Connection, of_generation: int, central: dict[str, float]) -> None:
    """Keep centralities for `of_generation` when it is still the committed one; nothing when another process
    is writing (they are worked out again)."""
    with writing(conn, wait=False) as locked:
        if not locked or generation(conn) != of_generation:
            return
        conn.execute("DELETE FROM centrality")
        conn.executemany("INSERT INTO centrality VALUES (?, ?)", central.items())
        conn.execute("INSERT OR REPLACE INTO state VALUES ('centrality', ?)", (of_generation,))


def saved_ids(conn: sqlite3.Connection) -> tuple[dict[str, str], int]:
    """(id -> path of every valid memory whose id no other file holds, the committed synced_ns)."""
    conn.execute("BEGIN")
    try:
        rows = conn.execute("SELECT id, path FROM files WHERE error IS NULL AND id IN "
                            "(SELECT id FROM files WHERE error IS NULL GROUP BY id HAVING count(*) = 1)").fetchall()
        synced = conn.execute("SELECT value FROM state WHERE key = 'synced_ns'").fetchone()
    finally:
        conn.execute("COMMIT")
    return dict(rows), int(synced[0]) if synced else 0
