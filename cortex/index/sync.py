"""Keeping the cache in step with the files (a part of `cortex.index.Index`).

`sync()` is incremental and cheap when nothing changed (one stat per file); a missing, other-schema or
damaged database is built again, never an error. A Whoosh file changed behind cortex's back (its size is
not what the writer left), or a segment that fails to read, is rebuilt by the next sync that uses it, and
named in `Index.repaired` (`cortex status` and `cortex verify` report it). A writer holds the database's
write lock for its sync; a process that finds it taken answers from the last commit (plus what it parsed
itself) instead of waiting.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cortex.index.db as db
from cortex.index.manifest import Manifest, read_entry


@dataclass
class SyncReport:
    changed: int = 0
    removed: int = 0
    embedded: int = 0
    indexed: int = 0  # full-text documents added or removed
    rebuilt: bool = False
    repaired: list[str] = field(default_factory=list)  # damaged parts found and rebuilt, one line each
    locked_out: bool = False  # another process held the lock: results are from the last committed cache
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


class Progress:
    """A one-line progress bar on stderr, shown only once work has taken more than a second."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.start, self.shown = label, total, time.monotonic(), False

    def __call__(self, done: int) -> None:
        if not sys.stderr.isatty() or time.monotonic() - self.start < 1.0:
            return
        self.shown = True
        width = 30
        filled = int(width * done / max(self.total, 1))
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


def level(full: bool, vectors: bool) -> int:
    """Sync depth: 1 the manifest, 2 with vectors, 3 with the full-text index and vectors."""
    return 3 if full else 2 if vectors else 1


def incomplete(manifest: Manifest) -> bool:
    if manifest.pending_deletes or (len(manifest.files) and not manifest.vector_keys):
        return True
    return any(not ft for _, ft in manifest.files.column("ft"))


class SyncPart:
    """Syncing one store's cache (a part of `cortex.index.Index`)."""

    store: Any
    dir: Path
    manifest: Manifest | None
    repaired: list[str]
    trust_watcher: bool
    commits: bool
    _synced: int | None
    _noted_only: bool
    _checked_ns: int | None
    _ix: Any
    _conn: sqlite3.Connection | None
    rebuilding: bool

    if TYPE_CHECKING:  # provided by the other parts of `Index`
        def _forget_views(self) -> None:
            ...

        def close_searcher(self) -> None:
            ...

        def fulltext_index(self) -> Any:
            ...

        def sync_vectors(self, conn: sqlite3.Connection, manifest: Manifest, report: Any, progress: Any) -> bool:
            ...

    @property
    def whoosh_dir(self) -> Path:
        return self.dir / "whoosh"

    def conn(self) -> sqlite3.Connection:
        """The store's cache database, opened once; a damaged one is deleted, made again and reported."""
        if self._conn is None:
            try:
                self._conn = db.connect(self.dir)
            except db.Damaged as exc:
                db.remove(self.dir)
                self._note_repaired([f"{exc}; rebuilt"])
                self._conn = db.connect(self.dir)
        return self._conn

    def _note_repaired(self, lines: list[str]) -> None:
        for line in lines:
            self.repaired.append(line)
            self.store.log(f"cache: {line}")

    def sync(self, full: bool = True, progress: bool = True, vectors: bool = False) -> SyncReport:
        try:
            report = self._sync(full, progress, vectors or full)
        except sqlite3.DatabaseError as exc:
            if not db.damage(exc):
                raise
            self.close_database()  # damaged while in use: made again from the files
            db.remove(self.dir)
            self._note_repaired([f"{db.NAME} was unreadable ({exc}); rebuilt"])
            self.manifest = None
            report = self._sync(full, progress, vectors or full)
        self._note_repaired(report.repaired)
        if not report.locked_out:  # locked out: answered from the committed cache; the next `ensure` tries again
            self._synced = max(self._synced or 0, level(full, vectors))
            self._noted_only = False
            self._checked_ns = None
        if report.changed or report.removed or report.rebuilt or report.embedded or report.indexed \
                or report.locked_out or report.repaired or getattr(self, "_scan", None) is None:
            self._forget_views()
        return report

    def close_database(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def ensure(self, full: bool = False, vectors: bool = False) -> Any:
        """Sync once: nothing when this object already synced at this level (or deeper) since `stale()`. A
        hook's capture, projections and links all ask for the index through `ensure`: only the first walks."""
        if self._synced is None or self._synced < level(full, vectors):
            self.sync(full=full, progress=False, vectors=vectors)
        return self

    def stale(self) -> None:
        """The files may have changed (a watcher saw it): the next `ensure` syncs again."""
        self._synced = None
        self._noted_only = False
        self._checked_ns = None

    def note_written(self, paths: list[Path]) -> None:
        """This process just wrote these memory files: read them into the manifest in memory, so the same run
        sees them without another walk over the store. The next sync commits them; a process that has not
        synced yet takes the committed manifest as it is, and its commit does not move the time of the last
        walk (the next process still walks for anything changed behind cortex's back)."""
        if not paths:
            return
        if self.manifest is None:
            try:
                manifest = db.load(self.conn())
            except sqlite3.Error:
                return
            if manifest is None:
                return  # nothing committed: the next sync walks, as for any process
            self.manifest, self._synced = manifest, 1
        for path in paths:
            rel = path.relative_to(self.store.memories_dir).as_posix()
            if path.is_file():
                self.manifest.files[rel] = read_entry(path, None, self.store.max_memory_bytes())
            elif rel in self.manifest.files:
                del self.manifest.files[rel]
                self.manifest.pending_deletes.append(rel)
        if self._synced is not None:
            self._synced = 1  # the manifest holds them; full text and vectors wait for the next deeper `ensure`
            self._noted_only = True  # ... which starts from this manifest: nothing else changed meanwhile
        self._forget_views()

    def watched(self, paths: list[Path], seen_ns: int) -> None:
        """A watcher that vouches for the store (`cortex serve`) saw exactly these memory files change up to
        `seen_ns` (the file system's time): read them into the manifest and count that as a check of every file
        then, so the next `ensure` needs no walk. Without a synced manifest it is `stale()`."""
        if self.manifest is None or self._synced is None:
            self.stale()
            return
        self.note_written(paths)
        self._synced, self._noted_only = 1, True
        self._checked_ns = max(self._checked_ns or 0, seen_ns)

    def _sync(self, full: bool, progress: bool, with_vectors: bool) -> SyncReport:
        """Bring the cache in step with the files: `full=False` the manifest alone (list, show, status);
        `full=True` also Whoosh and the vectors (recall, verify); `with_vectors` the manifest and the vectors."""
        started = time.monotonic()
        report = SyncReport()
        conn = self.conn()
        committed = db.generation(conn)
        current = self.manifest is not None and self.manifest.generation == committed and committed > 0
        reuse = current and self._noted_only
        manifest = self.manifest if current else db.load(conn)
        if manifest is None:
            manifest, report.rebuilt = Manifest(), True
        elif self.trust_watcher and self._watched(manifest, with_vectors):
            report.notes.append("cache kept by a watcher (cortex watch or cortex serve)")
            self.manifest = manifest
            report.seconds = time.monotonic() - started
            return report
        # Wait for a writer only when the committed cache cannot answer: nothing committed, or (for a sync
        # with vectors) files not yet in the full-text index or no vectors at all.
        wait = report.rebuilt or (with_vectors and incomplete(manifest))
        reader = not self.commits and not (full or with_vectors or report.rebuilt)
        if reader:
            return self._locked_out(manifest, report, started)
        with db.writing(conn, wait=wait) as locked:
            if not locked:  # another process is writing: the last commit, changes held in memory
                return self._locked_out(manifest, report, started)
            if db.generation(conn) != manifest.generation:  # another writer committed meanwhile: its manifest
                reuse = False
                manifest = db.load(conn) or Manifest()
                report.rebuilt = manifest.generation == 0
            if report.rebuilt:
                self._clear(conn)
            synced_before = manifest.synced_ns
            changed: list[str] = []
            removed: list[str] = []
            rehashed = 0
            if not reuse:
                changed, removed, rehashed = manifest.refresh(self.store.memories_dir, self.store.max_memory_bytes(),
                                                       db.now_ns(self.dir))
            report.changed, report.removed = len(changed), len(removed)
            if reuse and self._checked_ns is not None and self._checked_ns > manifest.synced_ns:
                manifest.synced_ns = self._checked_ns  # a watcher's account of the files stands for a walk
            # The watcher commits a newer sync time after a cortex write, so readers trust it again (`_watched`).
            dirty = bool(report.rebuilt or rehashed or manifest.files.changed or manifest.files.removed or manifest.pending_deletes
                         or (not self.trust_watcher and self._written_since(synced_before)))
            # Vectors first: a rebuild lets go of the model before Whoosh's writer fills its pools.
            if with_vectors:
                bar = Progress("embedding", len(manifest.files)) if progress else None
                dirty = self.sync_vectors(conn, manifest, report, bar) or dirty
                if bar:
                    bar.close()
            if full:
                dirty = self._sync_fulltext(manifest, report, progress) or dirty
            if dirty:
                db.save(conn, manifest, everything=report.rebuilt)
        if dirty:
            db.mark_commit(self.dir, manifest.generation)
        self.manifest = manifest
        report.seconds = time.monotonic() - started
        return report

    def _locked_out(self, manifest: Manifest, report: SyncReport, started: float) -> SyncReport:
        report.locked_out = True
        manifest.refresh(self.store.memories_dir, self.store.max_memory_bytes(), db.now_ns(self.dir))
        self.manifest = manifest
        report.seconds = time.monotonic() - started
        return report

    def _watched(self, manifest: Manifest, full: bool) -> bool:
        """True when a watcher (`cortex watch`, `cortex serve`) holds the store, the cache is complete, and cortex
        wrote nothing since its last sync."""
        from cortex.layout import watcher_ready

        if not watcher_ready(str(self.store.root)) or (full and incomplete(manifest)):
            return False
        return not self._written_since(manifest.synced_ns) and not self._folders_since(manifest.synced_ns)

    def _folders_since(self, synced_ns: int) -> bool:
        """Whether a memory folder changed (a file added, removed or renamed: by hand, by git) at or after
        `synced_ns`: a dozen stats that close the moment between such a change and the watcher's sync of it."""
        root = self.store.memories_dir
        try:
            if root.stat().st_mtime_ns >= synced_ns:
                return True
            with os.scandir(root) as listing:
                return any(entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime_ns
                           >= synced_ns for entry in listing)
        except OSError:
            return True

    def _written_since(self, synced_ns: int) -> bool:
        """Whether a cortex write (`state/changed`, touched by every one) came at or after `synced_ns`."""
        try:
            changed = (self.store.state_dir / "changed").stat().st_mtime_ns
        except OSError:
            changed = 0
        return changed >= synced_ns

    def _clear(self, conn: sqlite3.Connection) -> None:
        """Start over (inside the write transaction): Whoosh and the static vectors are rebuilt with the rows."""
        self.close_searcher()
        self._ix = None
        shutil.rmtree(self.whoosh_dir, ignore_errors=True)
        conn.execute("DELETE FROM vectors WHERE model NOT LIKE 'contextual:%'")
        for table in ("files", "parts", "pending", "centrality", "state"):
            conn.execute(f"DELETE FROM {table}")

    # ------------------------------------------------------------ full text

    def _sync_fulltext(self, manifest: Manifest, report: SyncReport, progress: bool) -> bool:
        """Bring Whoosh in step; a damaged index (changed behind cortex's back, or failing to read while it
        is updated) is dropped and built again."""
        damage = self._fulltext_damage(manifest)
        if damage:
            report.repaired.append(f"full-text index {damage}; rebuilt")
            self._drop_fulltext(manifest)
        try:
            changed = self._update_fulltext(manifest, report, progress)
        except Exception as exc:  # Whoosh raises many kinds on a damaged segment
            if damage:
                raise  # built from nothing and still failing: not damage (a full disk, permissions)
            report.repaired.append(f"full-text index failed to read ({type(exc).__name__}: {exc}); rebuilt")
            self._drop_fulltext(manifest)
            changed = self._update_fulltext(manifest, report, progress)
        return self._note_parts(manifest) or changed or bool(damage)

    def _fulltext_damage(self, manifest: Manifest) -> str | None:
        """Why the Whoosh files are not what the last writer left (None when they are, or unknown)."""
        import cortex.index.fulltext as fulltext

        if fulltext.marked_damaged(self.whoosh_dir):
            return "failed to read during a search"
        if not manifest.parts:
            return None  # no index committed yet
        files = fulltext.part_files(self.whoosh_dir)
        if files is None:
            return "was missing"
        if _changed_behind(files, manifest.parts):
            return "changed outside cortex (a segment truncated, overwritten or removed)"
        return None

    def _note_parts(self, manifest: Manifest) -> bool:
        import cortex.index.fulltext as fulltext

        files = fulltext.part_files(self.whoosh_dir)
        parts = _marks(files, manifest.parts) if files is not None else {}
        if parts == manifest.parts:
            return False
        manifest.parts = parts
        return True

    def _drop_fulltext(self, manifest: Manifest) -> None:
        """Remove the Whoosh index: the next update builds it from every file."""
        self.close_searcher()
        self._ix = None
        shutil.rmtree(self.whoosh_dir, ignore_errors=True)
        manifest.pending_deletes = []
        manifest.parts = {}
        for rel, ft, error in list(manifest.files.column("ft", "error")):
            if bool(ft) != (error is not None):
                manifest.files.change(rel, ft=error is not None)

    def _update_fulltext(self, manifest: Manifest, report: SyncReport, progress: bool) -> bool:
        import cortex.index.fulltext as fulltext

        from cortex.index.manifest import collecting, read_body

        files = manifest.files
        todo = [rel for rel, ft in files.column("ft") if not ft]
        deletes = list(dict.fromkeys(manifest.pending_deletes))
        if not todo and not deletes and self.whoosh_dir.is_dir():
            return False  # Whoosh is opened only when there is work (or no index at all)
        ix = self.fulltext_index()
        bulk = False
        if ix is None:
            ix = self._ix = fulltext.open_index(self.whoosh_dir, create=True)
            todo = [rel for rel, error in files.column("error") if error is None]
            deletes, bulk = [], True
        if not todo and not deletes:
            return True
        bar = Progress("indexing", len(todo)) if progress else None
        indexed = 0

        def documents() -> Any:  # streamed to the writer: a big store is never held whole
            nonlocal indexed
            for n, rel in enumerate(sorted(todo)):
                if files.value(rel, "error") is not None:
                    continue
                indexed += 1
                yield fulltext.document(rel, manifest.meta(rel), read_body(self.store.memories_dir / rel))
                if bar and n % 200 == 0:
                    bar(n)

        with collecting(bulk or len(todo) > 1000):
            fulltext.apply(ix, deletes, documents(), bulk=bulk)
        if bar:
            bar.close()
        for rel in todo:
            if not files.value(rel, "ft"):
                files.change(rel, ft=True)
        manifest.pending_deletes = []
        report.indexed = indexed + len(deletes)
        report.notes.append(f"full-text: {indexed} indexed, {len(deletes)} removed")
        return True

    def damaged_parts(self) -> list[str]:
        """The parts of the committed cache that are not what its writer left, by stat alone: what the next
        full sync will rebuild. For `cortex status`, whose own sync reads only the manifest."""
        if self.manifest is None:
            return []
        return [f"full-text index {why}" for why in [self._fulltext_damage(self.manifest)] if why]

    def rebuild(self) -> SyncReport:
        """Drop the cache and build it again from the files."""
        self.rebuilding = True
        conn = self.conn()
        with db.writing(conn, wait=True):
            self._clear(conn)  # committed: nothing, so the sync below builds everything (as would anyone's)
        self.manifest = None
        try:
            return self.sync(full=True)
        finally:
            self.rebuilding = False


def _digest(path: Path) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _changed_behind(files: dict[str, Path], recorded: dict[str, Any]) -> bool:
    """Whether `files` are not those recorded: a name or a size differs, or the content where only the mtime
    does (a copy or a touch is not damage)."""
    if set(files) != set(recorded):
        return True
    for name, path in files.items():
        size, mtime, digest = recorded[name]
        try:
            info = path.stat()
            if info.st_size != size or (info.st_mtime_ns != mtime and _digest(path) != digest):
                return True
        except OSError:
            return True
    return False


def _marks(files: dict[str, Path], recorded: dict[str, Any]) -> dict[str, tuple[int, int, str]]:
    """name -> (size, mtime_ns, digest) of Whoosh's files; the digest carried over when size and mtime did not
    change, so a sync that added one memory reads only the segment it wrote."""
    out = {}
    for name, path in files.items():
        try:
            info = path.stat()
            old = recorded.get(name)
            same = old is not None and tuple(old[:2]) == (info.st_size, info.st_mtime_ns)
            out[name] = (info.st_size, info.st_mtime_ns, old[2] if same and old else _digest(path))
        except OSError:
            continue  # gone: the next check finds the record and the files differ
    return out
