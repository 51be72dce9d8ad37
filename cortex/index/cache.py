"""The cache of a store: manifest, Whoosh index and vectors, kept in step with the files.

    .cortex/cache/
      manifest.bin      per file: stat, content hash, metadata (the commit point)
      whoosh/           BM25F full-text index
      vectors.f32       embedding rows keyed by text hash

`Index.sync()` is incremental and cheap when nothing changed (one stat per
file); a missing, stale-schema or corrupt cache is rebuilt, never an error.
A part changed behind cortex's back (the manifest keeps the stat of the
Whoosh files and of the vectors as its writer left them), a Whoosh segment
that fails to read, or a vectors file shorter than the manifest says is
rebuilt by the next sync that uses it, and named in `Index.repaired`
(`cortex status` and `cortex verify` report it).
Writers hold `cache/sync.lock`; a reader that finds it taken works on the
last committed state (plus what it parsed itself) instead of waiting.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import marshal
import operator
import os
import shutil
import sys
import time
import warnings
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from cortex.files import atomic_write, file_lock, try_lock
from cortex.index.manifest import CLOCK_SLACK_NS, Entries, Manifest, embed_text, memory_from_meta
from cortex.memory import Memory
from cortex.store import Problem, Scan, Store, duplicate_ids, duplicate_reason


SMALL_BATCH = 16  # up to this many new texts are embedded by the pure-Python encoder
EMBED_CHUNK = 4096  # texts embedded and appended at a time
MEMORIES_AHEAD = 20_000  # a resident server builds every memory's `Memory` ahead in stores up to this size
PARALLEL_BUILD = 2000  # a full-text build of at least this many documents uses two processes (when there are cores)
# The key of the kept records and ids (`_kept`): files sharing an id are all left out (views kept under an
# older rule, where the first file won, are made again).
RECORDS_RULE = "duplicates-skipped"
VECTOR_TOLERANCE = 1e-4  # largest difference `check` accepts between a cached vector and one computed now


@dataclass
class SyncReport:
    changed: int = 0
    removed: int = 0
    embedded: int = 0
    indexed: int = 0  # full-text documents added or removed (a writer's deferred work, or what changed)
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


class Index:
    """The cache of one store."""

    def __init__(self, store: Store, encoder_factory: Callable[[], Any] | None = None,
                 keyword_only: bool = False) -> None:
        self.store = store
        self.dir = store.cache_dir
        self.manifest: Manifest | None = None
        self._encoder_factory = encoder_factory
        self._encoder: Any = None
        self._encoder_tried = keyword_only  # keyword only: the model is never loaded
        self._synced: int | None = None  # the level of the last sync this object made (see `ensure`)
        self._ahead: tuple[int, int, bool, bool] | None = None  # `ensure(ahead=True)`: (child, pipe, full, vectors)
        self.encoder_problem: str | None = None
        self._scan: Scan | None = None
        self._records: Records | None = None
        self._row_map: tuple[list[str], dict[str, int]] = ([], {})  # `_rows_of_keys`: kept across syncs
        self._problems: list[tuple[str, str]] = []  # (path relative to memories/, reason): with the records
        self._central: dict[str, float] | None = None
        self._neighbours: LinkMap | None = None
        self._allowed: dict[Any, Any] = {}
        self._query_encoder: Any = None
        self._rel_of_id: dict[str, str] | None = None
        self._searcher: Any = None
        self.trust_watcher = True  # the watcher itself sets this False
        self._checked_ns: int | None = None  # `watched`: every file known as of this time without a walk
        # False: a manifest-level sync reads without the lock and stays in memory (a resident server's second
        # index, which builds the next briefing: a commit from it would make the warm index reload the manifest
        # and walk every file). A sync that builds or writes Whoosh or the vectors commits as any other.
        self.commits = True
        # Views made from a committed manifest are saved for the next process (`_kept`), except by a process that
        # writes memories itself (`note_written`: its next commit makes them stale at once; `remember` at 100,000
        # memories paid ~0.2 s for files nobody read) and by a resident server, which keeps its own in memory (the
        # next briefing's build, in a process of its own, saves them: `cortex.recall.keep_views`).
        self.keeps_views = True
        # A resident server's first warm-up may take the centralities kept for an earlier manifest (one write
        # moves them little; working them out took ~0.7 s of its start at 100,000 memories after a one-shot
        # `remember`) and work out the current ones once requests pause (`newer_centralities`).
        self.older_centralities_ok = False
        self.centralities_older = False  # what `centralities` gives is of an earlier manifest
        self._ix: Any = None
        self._vectors: Any = None
        self.repaired: list[str] = []  # every damaged part this object's syncs found and rebuilt
        self._vectors_crc: tuple[int, int] | None = None  # (size, CRC-32) of vectors.f32 after this sync's append
        self.vectors_checked = 0  # rows `check` recomputed from the memories' text
        # Since this object's last sync only files it wrote itself changed (`note_written`): the next sync
        # works on the manifest in memory (no reload, no walk) while the committed one is still its own.
        self.rebuilding = False  # `rebuild`: one bulk job, after which this object is dropped
        self._noted_only = False
        self._version: tuple[int, int, int] | None = None  # manifest.bin as this object last loaded or wrote it
        self._committed = False  # the manifest in memory is the committed one (`_version`), nothing else
        self._memories: dict[str, Memory] = {}  # rel -> `memory(rel)`, until the next sync changes something
        self._parsed: dict[str, tuple[str, Memory]] = {}  # rel -> (content hash, `read(rel)`), kept across syncs

    # ------------------------------------------------------------ paths

    @property
    def manifest_path(self) -> Path:
        return self.dir / "manifest.bin"

    @property
    def whoosh_dir(self) -> Path:
        return self.dir / "whoosh"

    @property
    def vectors_path(self) -> Path:
        return self.dir / "vectors.f32"

    @property
    def lock_path(self) -> Path:
        return self.dir / "sync.lock"

    # ------------------------------------------------------------ encoder

    def encoder(self) -> Any:
        """The embedding model, loaded once; None (with `encoder_problem` set) when it cannot load."""
        if not self._encoder_tried:
            self._encoder_tried = True
            from cortex.embedding import EncoderUnavailable, load_encoder

            try:
                factory = self._encoder_factory or (lambda: load_encoder(self.store.config().get("embedding.model")))
                self._encoder = factory()
            except EncoderUnavailable as exc:
                self.encoder_problem = str(exc)
                self._encoder = None
        return self._encoder

    # ------------------------------------------------------------ sync

    def sync(self, full: bool = True, progress: bool = True, vectors: bool = False) -> SyncReport:
        report = self._sync(full, progress, vectors or full)
        for line in report.repaired:
            self.repaired.append(line)
            self.store.log(f"cache: {line}")
        if not report.locked_out:  # locked out: answered from the committed cache; the next `ensure` tries again
            self._synced = max(self._synced or 0, _level(full, vectors))
            self._noted_only = False
            self._checked_ns = None
        if report.changed or report.removed or report.rebuilt or report.embedded or report.indexed or report.locked_out \
                or report.repaired or self._scan is None:  # the searcher too: it would not see what was indexed
            self._forget_views()
        return report

    def ensure(self, full: bool = False, vectors: bool = False, ahead: bool = False, resident: bool = False) -> Index:
        """Sync once: nothing when this object already synced at this level (or deeper) since `stale()`.

        How the calls of one process share one sync: a hook's capture, projections and links all ask for
        the index through `ensure`, and only the first pays the walk over the store.

        With `ahead`, a one-shot reader may answer from the committed cache while a forked child makes the
        sync (`_sync_ahead`); it must then call `confirm()` before it says anything, and answer again when
        that returns False. `resident`: `cortex serve`, whose other threads (its file watchers) never take a lock
        the sync needs, so it may fork beside them; and which takes the child's commit in later
        (`await_ahead`, `successor`), so it answers from a committed cache even when a writer left work there
        for the next full sync (a one-shot would answer twice).
        """
        if self._synced is None or self._synced < _level(full, vectors):
            if not (ahead and self._sync_ahead(full, vectors, resident)):
                self.sync(full=full, progress=False, vectors=vectors)
        return self

    def _sync_ahead(self, full: bool, vectors: bool, resident: bool = False) -> bool:
        """Start the sync in a forked child and take the committed manifest as synced meanwhile; False (the
        committed manifest loaded, the sync still to make) when that cannot be done here.

        A sync without a watcher stats every memory file: ~0.45 s of a one-shot `cortex recall` at 100,000
        memories, spent on one core while the other waits. The child makes exactly the sync this process
        would have made (the walk, and whatever it finds to re-read, index and commit), while this process
        ranks from the committed cache on the other core; `confirm()` then says whether the files were as
        that cache had them. Only in a process with no other thread (a fork copies one thread, and a lock
        another one held would stay held in the child), and not on macOS, whose system libraries do not
        support a fork without exec. `CORTEX_SYNC_AHEAD=0` turns it off."""
        import threading

        if self.manifest is not None or not hasattr(os, "fork") or sys.platform == "darwin" \
                or (threading.active_count() > 1 and not resident) or os.environ.get("CORTEX_SYNC_AHEAD") == "0":
            return False
        seen = _file_version(self.manifest_path)
        manifest = _load_version(self.manifest_path, seen)
        if manifest is None:
            return False  # none committed, or a writer committed while it was read: sync here
        self.manifest, self._version, self._committed = manifest, seen, True  # a sync now reuses it: no reload
        if ((full or vectors) and not resident and _incomplete(manifest)) \
                or (self.trust_watcher and self._watched(manifest, full)):
            return False  # a writer has work to finish first; or a watcher vouches, and the sync is a few stats
        read_end, write_end = os.pipe()
        try:
            with warnings.catch_warnings():  # Python 3.12 warns of any fork beside threads; `resident` says why not
                warnings.simplefilter("ignore", DeprecationWarning)
                child = os.fork()
        except OSError:  # no process to spare: sync here
            os.close(read_end)
            os.close(write_end)
            return False
        if child == 0:  # the child: the sync, its outcome on the pipe, and out without running any exit handler
            code = 1
            try:
                os.close(read_end)
                if resident:  # the server answers from the committed cache meanwhile: its warm-up comes first
                    with contextlib.suppress(OSError):
                        os.nice(5)
                report = self.sync(full=full, progress=False, vectors=vectors)
                outcome = {"changed": bool(report.changed or report.removed or report.rebuilt or report.embedded
                                           or report.indexed or report.repaired),
                           "locked_out": report.locked_out, "version": _file_version(self.manifest_path)}
                data = memoryview(marshal.dumps(outcome))
                while data:
                    data = data[os.write(write_end, data):]
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        self._ahead = (child, read_end, full, vectors)
        self._synced = _level(full, vectors)
        return True

    def confirm(self) -> bool:
        """After `ensure(..., ahead=True)`: wait for the child's sync. True when it found the files as the
        committed cache had them, so what was answered from it stands; False when it did not (or failed): the
        views are forgotten and the index holds the synced cache (the child's commit, or a sync made here), and
        the caller answers again. True when there was no sync ahead."""
        found = self.await_ahead()
        if found is None:
            return True
        self.adopt(found)
        return False

    def adopt(self, found: tuple[tuple[int, int, int] | None, bool, bool]) -> None:
        """What `await_ahead` found: the child's commit taken as this object's sync (or a sync made here when
        it failed), its views forgotten."""
        self._forget_views()
        self._synced = None
        version, full, vectors = found
        manifest = _load_version(self.manifest_path, version)
        if manifest is not None:  # the child's commit is this process's sync: its walk was made for it
            self.manifest, self._version, self._committed = manifest, version, True
            self._synced = _level(full, vectors)
        else:
            self.manifest = None
            self.sync(full=full, progress=False, vectors=vectors)

    def await_ahead(self) -> tuple[tuple[int, int, int] | None, bool, bool] | None:
        """Wait for the child of `ensure(..., ahead=True)`, changing nothing here: None when there was none or
        it found the files as the committed cache had them; else (the version it committed, or None when it
        failed or was locked out, and the sync's full and vectors)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        child, read_end, full, vectors = ahead
        chunks = []
        try:
            while chunk := os.read(read_end, 65536):
                chunks.append(chunk)
        except OSError:
            chunks = []
        finally:
            os.close(read_end)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, 0)
        try:
            outcome = marshal.loads(b"".join(chunks))
        except (EOFError, ValueError, TypeError):
            outcome = None  # the child failed: sync here
        if not isinstance(outcome, dict) or outcome.get("locked_out"):
            outcome = None  # another writer held the cache: sync here, as that sync would have
        version = tuple(outcome["version"]) if outcome and outcome.get("version") else None
        if outcome is not None and not outcome.get("changed"):
            self._version = version or self._version  # the same content (a newer check time, perhaps)
            return None
        return version, full, vectors  # type: ignore[return-value]

    def successor(self, version: tuple[int, int, int] | None, full: bool, vectors: bool) -> Index | None:
        """A new object for this store holding the committed manifest of `version` as synced (what
        `await_ahead` said the child committed), sharing this one's loaded models and parses, views not made
        yet: a resident server warms it while this one still answers, then puts it in this one's place. None
        when that version is no longer the committed one."""
        manifest = _load_version(self.manifest_path, version) if version is not None else None
        if manifest is None:
            return None
        new = Index(self.store, self._encoder_factory)
        new._encoder, new._encoder_tried, new.encoder_problem = self._encoder, self._encoder_tried, self.encoder_problem
        new._query_encoder = self._query_encoder
        new.trust_watcher, new.keeps_views, new.commits = self.trust_watcher, self.keeps_views, self.commits
        new.older_centralities_ok = self.older_centralities_ok
        new._parsed = dict(self._parsed)
        new.manifest, new._version, new._committed = manifest, version, True
        new._synced = _level(full, vectors)
        return new

    def stale(self) -> None:
        """The files may have changed (a watcher saw it): the next `ensure` syncs again."""
        self._synced = None
        self._noted_only = False
        self._checked_ns = None

    def note_written(self, paths: list[Path]) -> None:
        """This process just wrote these memory files: read them into the synced manifest (in memory), so the
        same run sees them without another walk over the store. The next sync commits them to the cache.

        Not synced yet (a `remember`, `forget` or `restore` in its own process): the committed manifest is taken
        as it is, these files read into it, and no walk made. What the process does next (linking a new memory
        to the others) reads the cache as the last sync left it; its commit records its own files without
        moving the time of that sync, so the next process still walks for anything changed behind cortex's
        back (a `remember` at 100,000 memories spent ~0.45 s of its ~1.4 s on that walk)."""
        if not paths:
            return
        if self.manifest is None:
            seen = _file_version(self.manifest_path)
            manifest = _load_version(self.manifest_path, seen)
            if manifest is None:
                return  # nothing committed (or a writer committing just now): the next sync walks, as for any process
            self.manifest, self._version, self._synced = manifest, seen, 1
        from cortex.index.manifest import read_entry

        self._committed = False
        self.keeps_views = False
        for path in paths:
            rel = path.relative_to(self.store.memories_dir).as_posix()
            if path.is_file():
                self.manifest.files[rel] = read_entry(path, None, self.store.max_memory_bytes())
            elif self.manifest.files.pop(rel, None) is not None:
                self.manifest.pending_deletes.append(rel)
        if self._synced is not None:
            self._synced = 1  # the manifest holds them; full text and vectors wait for the next deeper `ensure`
            self._noted_only = True  # ... which starts from this manifest: nothing else changed meanwhile
        self._forget_views()

    def watched(self, paths: list[Path], seen_ns: int) -> None:
        """A watcher that vouches for the store (`cortex serve`) saw exactly these memory files change up to
        `seen_ns`: read them into the manifest and count that as a check of every file at `seen_ns`, so the next
        `ensure` brings the full text and vectors in step without a walk over the store (at 100,000 memories the
        walk after each change held the server's commands up ~0.6 s). Without a synced manifest it is `stale()`:
        the next sync walks."""
        if self.manifest is None or self._synced is None:
            self.stale()
            return
        from cortex.index.manifest import CLOCK_SLACK_NS

        self.note_written(paths)
        self._synced, self._noted_only = 1, True
        self._checked_ns = max(self._checked_ns or 0, seen_ns - CLOCK_SLACK_NS)

    def _forget_views(self) -> None:
        self._scan = self._vectors = self._records = self._central = self._rel_of_id = self._neighbours = None
        self.centralities_older = False
        self._allowed = {}
        self._memories = {}
        self.close_searcher()

    def _sync(self, full: bool, progress: bool, with_vectors: bool) -> SyncReport:
        """Bring the cache in step with the files.

        `full=False` refreshes only the manifest (enough for list/show/status);
        `full=True` also updates Whoosh and the vectors (recall, verify);
        `vectors=True` the manifest and the vectors (comparing memories: the graph, consolidation).
        """
        started = time.monotonic()
        report = SyncReport()
        seen_version = _file_version(self.manifest_path)
        # Only what this object wrote changed since it synced, and nobody committed since: no reload, no walk
        # (`remember` in `cortex serve` at 100,000 memories: 1.6 s of the 3.2 s it took).
        # The manifest in memory stands for the committed one while nobody committed since this object did
        # (no reload: 0.4 s at 100,000); the walk is skipped only when what changed is this object's own writes.
        current = self.manifest is not None and self._version is not None and seen_version == self._version
        reuse = current and self._noted_only
        manifest = self.manifest if current else Manifest.load(self.manifest_path)
        # What was loaded is the committed manifest of `seen_version` only when the file is still that one (a
        # watcher commits often: one it replaced meanwhile holds a newer manifest, and the views kept for
        # `seen_version` would not match it).
        as_seen = current or _file_version(self.manifest_path) == seen_version
        max_bytes = self.store.max_memory_bytes()
        if manifest is None:
            manifest, report.rebuilt = Manifest(), True
        elif self.trust_watcher and self._watched(manifest, with_vectors):
            # A live `cortex watch` keeps the cache in step: skip the stat of every file.
            report.notes.append("cache kept by a watcher (cortex watch or cortex serve)")
            self.manifest, self._version, self._committed = manifest, seen_version, as_seen
            report.seconds = time.monotonic() - started
            return report
        # Wait for a writer only when the committed cache cannot answer: nothing committed, or (for a
        # full sync) files not yet in the full-text index or no vectors at all.
        wait = report.rebuilt or (with_vectors and _incomplete(manifest))
        # An index that does not commit (`commits`) reads without the lock: a writer never waits for it.
        reader = not self.commits and not (full or with_vectors or report.rebuilt)
        with contextlib.nullcontext(False) if reader else try_lock(self.lock_path, wait=wait) as locked:
            if not locked:
                # Someone else is writing (or this index only reads): the committed manifest, changes re-parsed
                # in memory only.
                report.locked_out = True
                changed, removed, _ = manifest.refresh(self.store.memories_dir, max_bytes)  # in memory only
                # Nothing changed: the manifest in memory is the committed one (the views made from it may be
                # kept for it, `_kept`).
                self.manifest, self._committed = manifest, (as_seen and not changed and not removed
                                                            and seen_version is not None)
                if self._committed:
                    self._version = seen_version
                report.seconds = time.monotonic() - started
                return report
            # Another writer may have committed while we waited or looked: work from the latest state.
            if _file_version(self.manifest_path) != seen_version:
                reuse = current = False  # another writer committed meanwhile: its manifest, and the walk
                latest = Manifest.load(self.manifest_path)
                if latest is not None:
                    manifest, report.rebuilt = latest, False
                else:
                    manifest, report.rebuilt = Manifest(), True
            if report.rebuilt:
                # Nothing trustworthy: start over so Whoosh and vectors are rebuilt with the manifest.
                if Manifest.damaged(self.manifest_path):
                    report.repaired.append("manifest.bin was unreadable (truncated, garbage or damaged); rebuilt")
                self._clear()
            committed_ns = manifest.synced_ns
            changed, removed, rehashed = ([], [], 0) if reuse else manifest.refresh(self.store.memories_dir, max_bytes)
            report.changed, report.removed = len(changed), len(removed)
            dirty = bool(rehashed or removed or report.rebuilt or manifest.upgraded)
            if reuse and self._checked_ns is not None and self._checked_ns > manifest.synced_ns:
                manifest.synced_ns, dirty = self._checked_ns, True  # a watcher's account of the files stands for a walk
            if not self.trust_watcher and self._written_since(committed_ns):
                dirty = True  # the watcher commits a newer sync time, so readers trust it again (`_watched`)
            # Vectors first: a rebuild lets go of the model before Whoosh's writer fills its pools (0.51 GB at
            # 100,000 memories the other way round, the model loaded on top of what the writer left).
            if with_vectors:
                dirty = self._sync_vectors(manifest, report, progress) or dirty
            if full:
                dirty = self._sync_fulltext(manifest, report, progress) or dirty
            # The parts as this writer leaves them (only those this sync checked): a later change is damage.
            dirty = self._note_parts(manifest, full, with_vectors) or dirty
            if dirty:
                atomic_write(self.manifest_path, manifest.dump_parts(), durable=False)
            self._version = _file_version(self.manifest_path)
        self.manifest, self._committed = manifest, self._version is not None
        report.seconds = time.monotonic() - started
        return report

    def _watched(self, manifest: Manifest, full: bool) -> bool:
        """True when a watcher (`cortex watch`, `cortex serve`) holds the store, the cache is complete, and cortex
        wrote nothing since its last sync."""
        from cortex.layout import watcher_ready

        if not watcher_ready(str(self.store.root)) or (full and _incomplete(manifest)):
            return False
        return not self._written_since(manifest.synced_ns) and not self._folders_since(manifest.synced_ns)

    def _folders_since(self, synced_ns: int) -> bool:
        """Whether a memory folder changed (a file added, removed or renamed: by hand, by git) after `synced_ns`:
        a dozen stats that close the moment between such a change and the watcher's sync of it."""
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
        """Whether a cortex write (`state/changed`, touched by every one) came after `synced_ns`."""
        try:
            changed = (self.store.state_dir / "changed").stat().st_mtime_ns
        except OSError:
            changed = 0
        return changed >= synced_ns

    def _clear(self) -> None:
        self.close_searcher()
        self._ix = self._vectors = self._scan = None
        for path in (self.whoosh_dir,):
            shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.vectors_path.unlink()

    def _sync_fulltext(self, manifest: Manifest, report: SyncReport, progress: bool) -> bool:
        """Bring Whoosh in step; a damaged index (changed behind cortex's back, or failing to read while it
        is updated: a truncated segment raises struct.error or EOFError) is dropped and built again."""
        damage = self._fulltext_damage(manifest)
        if damage:
            report.repaired.append(f"full-text index {damage}; rebuilt")
            self._drop_fulltext(manifest)
        try:
            return self._update_fulltext(manifest, report, progress)
        except Exception as exc:  # Whoosh raises many kinds on a damaged segment
            if damage:
                raise  # built from nothing and still failing: not damage (a full disk, permissions)
            report.repaired.append(f"full-text index failed to read ({type(exc).__name__}: {exc}); rebuilt")
            self._drop_fulltext(manifest)
        return self._update_fulltext(manifest, report, progress)

    def _fulltext_damage(self, manifest: Manifest) -> str | None:
        """Why the Whoosh files are not what the manifest's writer left (None when they are, or unknown)."""
        import cortex.index.fulltext as fulltext

        if fulltext.marked_damaged(self.whoosh_dir):
            return "failed to read during a search"
        recorded = manifest.parts.get("whoosh")
        if recorded is None:
            return None  # no index committed yet, or a manifest from before parts were recorded
        files = fulltext.part_files(self.whoosh_dir)
        if files is None:
            return "was missing"
        if _changed_behind(files, recorded):
            return "changed outside cortex (a segment truncated, overwritten or removed)"
        return None

    def _drop_fulltext(self, manifest: Manifest) -> None:
        """Remove the Whoosh index: the next update builds it from every file."""
        self.close_searcher()
        self._ix = None
        shutil.rmtree(self.whoosh_dir, ignore_errors=True)
        manifest.pending_deletes = []
        for entry in manifest.files.values():
            entry["ft"] = "error" in entry

    def _update_fulltext(self, manifest: Manifest, report: SyncReport, progress: bool) -> bool:
        import cortex.index.fulltext as fulltext

        todo = [rel for rel, ft in manifest.files.column("ft") if not ft]
        deletes = list(manifest.pending_deletes)
        if not todo and not deletes and self.whoosh_dir.is_dir():
            return False  # opening Whoosh costs ~40 ms: only when there is work (or no index at all)
        ix = self.fulltext_index()
        bulk = False
        if ix is None:
            ix = self._ix = fulltext.open_index(self.whoosh_dir, create=True)
            todo = [rel for rel, entry in manifest.files.items() if "error" not in entry]
            deletes, bulk = [], True
            for entry in manifest.files.values():
                entry["ft"] = "error" in entry
        if not todo and not deletes:
            return False
        bar = Progress("indexing", len(todo)) if progress else None
        indexed = 0

        def documents() -> Any:  # streamed to the writer: 100,000 documents held at once cost ~150 MB
            nonlocal indexed
            for n, rel in enumerate(sorted(todo)):
                entry = manifest.files[rel]
                if "error" in entry:
                    entry["ft"] = True
                    continue
                body = read_body(self.store.memories_dir / rel)
                indexed += 1
                yield fulltext.document(rel, manifest.meta(rel), body)
                if bar and n % 200 == 0:
                    bar(n)

        procs = min(2, os.cpu_count() or 1) if bulk and len(todo) >= PARALLEL_BUILD else 1
        try:
            with collecting(bulk or len(todo) > 1000):
                fulltext.apply(ix, deletes, documents(), bulk=bulk, procs=procs)
        except Exception as exc:
            if procs == 1:
                raise
            # No multiprocessing here (a sandbox without semaphores, ...): build it again in this process.
            self.store.log(f"cache: full-text build in {procs} processes failed ({exc!r}); building in one")
            self._drop_fulltext(manifest)
            ix = self._ix = fulltext.open_index(self.whoosh_dir, create=True)
            indexed = 0
            with collecting():
                fulltext.apply(ix, [], documents(), bulk=True)
        if bar:
            bar.close()
        for rel in todo:
            manifest.files[rel]["ft"] = True
        manifest.pending_deletes = []
        report.indexed = indexed + len(deletes)
        report.notes.append(f"full-text: {indexed} indexed, {len(deletes)} removed")
        return True

    def _sync_vectors(self, manifest: Manifest, report: SyncReport, progress: bool) -> bool:
        import cortex.index.vectors as vectors

        from cortex.embedding import model_identity

        # Know which model made the vectors without loading it: loading costs more than the whole sync.
        identity = model_identity(self.store.config().get("embedding.model"))
        if identity is None:
            encoder = self.encoder()
            if encoder is None:
                return False
            identity = encoder.identity
        reset = False
        damage = self._vectors_damage(manifest) if manifest.model == identity else None
        if damage:
            report.repaired.append(f"{damage}; re-embedded")
        if manifest.model != identity or damage:
            reset = True
            manifest.model, manifest.dim, manifest.vector_keys = identity, 0, []
            with contextlib.suppress(FileNotFoundError):
                self.vectors_path.unlink()
        known = set(manifest.vector_keys)
        first: dict[str, str] = {}  # each text hash without a vector -> the first path holding it (by name)
        for rel, vhash in manifest.files.column("vhash"):  # not sorted first: mostly nothing is missing
            if vhash and vhash not in known and (vhash not in first or rel < first[vhash]):
                first[vhash] = rel
        if not first:
            return reset
        wanted = dict(sorted(first.items(), key=lambda item: item[1]))
        # A handful of changed memories (the usual incremental sync) go through the pure-Python query
        # encoder: same vectors, without loading tokenizers (~60 ms). Batches use the vectorised encoder.
        few = len(wanted) <= SMALL_BATCH and not isinstance(self.query_encoder(), type(None))
        encoder = self.query_encoder() if few else self.encoder()
        if encoder is None:
            return reset
        manifest.dim = int(getattr(encoder, "dim"))
        bar = Progress("embedding", len(wanted)) if progress else None
        recorded = (manifest.parts.get("vectors") or {}).get(self.vectors_path.name)
        committed = len(manifest.vector_keys) * int(encoder.dim) * 4
        crc = 0 if committed == 0 else recorded[2] if recorded and recorded[0] == committed else None
        rows = len(manifest.vector_keys)
        keys = list(wanted)
        for start in range(0, len(keys), EMBED_CHUNK):  # in chunks: texts and token ids of 100,000 at once weigh
            chunk = keys[start:start + EMBED_CHUNK]
            texts = []
            for vhash in chunk:
                rel = wanted[vhash]
                item = memory_from_meta(manifest.meta(rel), self.store.memories_dir / rel)
                item.body = read_body(self.store.memories_dir / rel)
                texts.append(embed_text(item))
            if few:
                import numpy as np

                matrix = np.asarray([encoder.encode_one(text) for text in texts], dtype=np.float32)
            else:
                matrix = encoder.encode(texts)
            crc = vectors.append(self.vectors_path, rows, encoder.dim, matrix, crc)
            rows += int(matrix.shape[0])
            if bar:
                bar(start + len(chunk))
        if bar:
            bar.close()
        if crc is not None:
            self._vectors_crc = (rows * int(encoder.dim) * 4, crc)
        if self.rebuilding and not few:  # `reindex`: the model is not needed again; its memory is (the manifest's write)
            self._encoder, self._encoder_tried = None, False
        manifest.vector_keys.extend(keys)
        report.embedded = len(wanted)
        return True

    def _vectors_damage(self, manifest: Manifest) -> str | None:
        """Why vectors.f32 is not what the manifest's writer left (None when it is, or unknown)."""
        import cortex.index.vectors as vectors

        if not manifest.vector_keys:
            return None
        if not vectors.fits(self.vectors_path, len(manifest.vector_keys), manifest.dim):
            return "vectors.f32 is shorter than the manifest says (truncated or removed)"
        recorded = manifest.parts.get("vectors")
        if recorded is not None and _changed_behind(self._vector_files(), recorded):
            return "vectors.f32 changed outside cortex (rows overwritten)"
        return None

    def _vector_files(self) -> dict[str, Path]:
        return {self.vectors_path.name: self.vectors_path} if self.vectors_path.exists() else {}

    def _note_parts(self, manifest: Manifest, fulltext_checked: bool, vectors_checked: bool) -> bool:
        """Record (size, mtime, CRC-32) of the files of the parts this sync checked or wrote; True when the
        record changed. A CRC is computed only for a file that is new or changed (vectors: carried over the
        append), so a sync that wrote one memory reads no big file."""
        import cortex.index.fulltext as fulltext

        before = dict(manifest.parts)
        if fulltext_checked:
            files = fulltext.part_files(self.whoosh_dir)
            manifest.parts["whoosh"] = _marks(files, manifest.parts.get("whoosh") or {}) if files is not None else None
        if vectors_checked:
            manifest.parts["vectors"] = _marks(self._vector_files(), manifest.parts.get("vectors") or {},
                                               self._vectors_crc)
        self._vectors_crc = None
        return manifest.parts != before

    def damaged_parts(self) -> list[str]:
        """The parts of the committed cache that are not what its writer left, by stat alone (no lock): what
        the next full sync will rebuild. For `cortex status`, whose own sync reads only the manifest."""
        if self.manifest is None:
            return []
        found = [f"full-text index {why}" for why in [self._fulltext_damage(self.manifest)] if why]
        return found + [why for why in [self._vectors_damage(self.manifest)] if why]

    def rebuild(self) -> SyncReport:
        """Drop the cache and build it again from the files."""
        with file_lock(self.lock_path):
            with contextlib.suppress(FileNotFoundError):
                self.manifest_path.unlink()
            self._clear()
        self.rebuilding = True
        try:
            return self.sync(full=True)
        finally:
            self.rebuilding = False

    # ------------------------------------------------------------ reading

    def scan(self) -> Scan:
        """Every memory (bodies not loaded) and every problem, from the synced manifest."""
        if self.manifest is None:
            self.sync(full=False)
        assert self.manifest is not None
        if self._scan is None:
            items, problems = self.manifest.memories(self.store.memories_dir)
            revived = self.records().revived_ids
            for item in items if revived else ():
                if item.id in revived:
                    item.status = "active"
            self._scan = Scan(items, [Problem(path, reason) for path, reason in problems])
        return self._scan

    def records(self) -> Records:
        """Manifest entries of every valid memory by path (relative to memories/): id, status, type,
        branch and links directly, the rest through `Manifest.meta`. Files sharing an id are all left out."""
        if self.manifest is None:
            self.sync(full=False)
        assert self.manifest is not None
        if self._records is None:
            # Kept for the committed manifest (`_kept`): a pass over 100,000 paths, ids and errors is ~0.16 s.
            rels, rows, problems = self._kept(self.dir / "records.bin", RECORDS_RULE, self._sorted_out)
            self._records, self._problems = Records(self.manifest.files, rels, rows), [tuple(p) for p in problems]
            self._records.revive()
        return self._records

    def meta(self, rel: str) -> dict[str, Any]:
        """A record's full metadata (title, tags, dates, …) from the synced manifest."""
        if self.manifest is None:
            self.sync(full=False)
        assert self.manifest is not None
        return self.manifest.meta(rel)

    def _sorted_out(self) -> tuple[list[str], list[int], list[tuple[str, str]]]:
        """The records (`records`: their paths and rows, in path order) and (path, reason) of the problems
        (`problems`), from one pass in path order over three columns."""
        assert self.manifest is not None
        rels: list[str] = []
        rows: list[int] = []
        problems: list[tuple[str, str]] = []
        files = self.manifest.files
        paths, errors, ids = files.paths, files.full_column("error"), files.full_column("id")
        order = sorted((n for n, rel in enumerate(paths) if rel is not None), key=lambda n: paths[n] or "")
        if len(order) > 1:
            # No malformed file and no id twice (the usual store): the pass below, in C (~0.3 s of a server's
            # start at 100,000 memories when no process had kept the records for its manifest).
            pick = operator.itemgetter(*order)
            if pick(errors).count(None) == len(order) and len(set(pick(ids))) == len(order):
                return list(pick(paths)), order, []
        root = self.store.memories_dir
        shared = duplicate_ids((ids[n], paths[n] or "") for n in order if errors[n] is None)
        for n in order:
            rel, error, ident = paths[n] or "", errors[n], ids[n]
            if error is not None:
                problems.append((rel, error))
            elif ident in shared:  # every file holding it is skipped (`cortex.store.duplicate_ids`)
                problems.append((rel, duplicate_reason(ident, root / rel, [root / other for other in shared[ident]])))
            else:
                rels.append(rel)
                rows.append(n)
        return rels, rows, problems

    def problems(self) -> list[tuple[Path, str]]:
        """(path, reason) of every malformed file and duplicate id."""
        self.records()
        return [(self.store.memories_dir / rel, reason) for rel, reason in self._problems]

    def allowed(self, key: Any, keep: Callable[[str, str, str | None], bool]) -> frozenset[str]:
        """The paths of the records whose (status, type, branch) pass a filter, computed once per sync for each
        filter `key`."""
        if key not in self._allowed:
            self._allowed[key] = self._kept(self.dir / f"allowed-{_digest(key)}.bin", (RECORDS_RULE, key),
                                            lambda: self._passing(keep))
        return self._allowed[key]

    def _passing(self, keep: Callable[[str, str, str | None], bool]) -> frozenset[str]:
        """The paths of the records whose (status, type, branch) pass `keep`: asked once for each combination
        there is (a few dozen), the rows picked in C (a call for each of 100,000 records took ~0.25 s)."""
        records = self.records()
        combos = list(zip(records.field("status"), records.field("type"), records.field("branch")))
        verdict = {combo: keep(*combo) for combo in set(combos)}
        return frozenset(itertools.compress(records, map(verdict.__getitem__, combos)))

    def embedded(self, allowed: frozenset[str], row_of: dict[str, int]) -> tuple[list[str], Any, int]:
        """(the allowed records with a row in a vector matrix, in path order; those rows; how many allowed records
        have a text to embed at all), from the records' column of embedded-text hashes: no sort."""
        import numpy as np

        rels: list[str] = []
        rows: list[int] = []
        embeddable = 0
        for rel, vhash in self.records().column("vhash"):
            if vhash and rel in allowed:
                embeddable += 1
                row = row_of.get(vhash)
                if row is not None:
                    rels.append(rel)
                    rows.append(row)
        return rels, np.array(rows, dtype=np.int64), embeddable

    def memoized(self, key: Any) -> bool:
        """Whether `memo` holds `key` for the current sync."""
        return key in self._allowed

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """A value kept until the next sync that changes something (with the filtered views): `make()` once."""
        if key not in self._allowed:
            self._allowed[key] = make()
        return self._allowed[key]

    def query_encoder(self) -> Any:
        """The fastest encoder for one query: the pure-Python reader when the model allows it."""
        if self._query_encoder is None:
            from cortex.embedding import EncoderUnavailable, QueryEncoder, model_folder

            folder = model_folder(self.store.config().get("embedding.model"))
            try:
                self._query_encoder = QueryEncoder(folder, self.dir) if folder is not None else self.encoder()
            except EncoderUnavailable:
                self._query_encoder = self.encoder()
        return self._query_encoder

    def dense_view(self, key: Any, allowed: frozenset[str]) -> tuple[list[str], Any] | None:
        """(the allowed paths with a static vector, what `vectors.cosines` multiplies for them), made once per sync
        for each filter `key` and kept with the committed manifest, whose vector keys it comes from (~0.1 s at
        100,000 memories); None when there are no vectors."""
        import numpy as np

        import cortex.index.vectors as vectors_module

        vectors = self.vector_matrix()
        if vectors is None:
            return None
        cache_key = ("dense", key)
        if cache_key not in self._allowed:
            matrix, row_of = vectors

            def embedded() -> tuple[list[str], bytes]:
                rels, rows, _ = self.embedded(allowed, row_of)
                return rels, rows.tobytes()

            rels, rows = self._kept(self.dir / f"dense-{_digest(key)}.bin", key, embedded)
            self._allowed[cache_key] = (rels, vectors_module.rows_view(matrix, np.frombuffer(rows, dtype=np.int64)))
        return self._allowed[cache_key]

    def dense_search(self, query: str, key: Any, allowed: frozenset[str], limit: int) -> list[tuple[str, float]] | None:
        """The `limit` allowed (path, cosine) nearest the query, best first; None when there are no vectors."""
        import numpy as np

        import cortex.index.vectors as vectors_module

        view = self.dense_view(key, allowed)
        if view is None:
            return None
        rels, sub = view
        if not rels:
            return []
        encoder = self.query_encoder()
        if encoder is None:
            return None
        scores = vectors_module.cosines(sub, np.asarray(encoder.encode_one(query), dtype=np.float32))
        top = min(limit, len(rels))
        best = np.argpartition(-scores, top - 1)[:top]
        return [(rels[i], float(scores[i])) for i in sorted(best, key=lambda i: (-scores[i], rels[i]))]

    def unbuilt(self) -> bool:
        """Memories in the manifest but none in the full-text index yet (a fresh clone's first SessionStart builds
        its briefing from the files' metadata alone; the sync that follows indexes and embeds them). Vectors are
        not asked for: a store may have none by design (the model missing, semantic search off)."""
        manifest = self.manifest
        return manifest is not None and bool(manifest.files) and not any(ft for _, ft in manifest.files.column("ft"))

    def memory(self, rel: str) -> Memory:
        """The memory at `rel` (relative to memories/) from the synced manifest, body not loaded; built once
        per sync (a resident process ranks the same candidates query after query)."""
        found = self._memories.get(rel)
        if found is None:
            assert self.manifest is not None
            found = self._memories[rel] = self._revived(rel, memory_from_meta(self.manifest.meta(rel),
                                                                                self.store.memories_dir / rel))
        return found

    def _revived(self, rel: str, item: Memory) -> Memory:
        """`item` with status active when it is the memory of a supersession cycle every reader takes as active."""
        if rel in self.records().revived:
            item.status = "active"
        return item

    def memories_ahead(self, most: int = MEMORIES_AHEAD) -> int:
        """Build `memory(rel)` for every valid memory of a store of at most `most`, in one decode of the metadata
        (a resident server, beside the requests: a fresh server's first prompts built ~60 new candidates each,
        ~2 ms of each at 10,000 memories; ~0.15 s and ~6 MB in all at 10,000). Into the map of the manifest as
        it is now: a sync meanwhile gives the index a new one, and these go with the old. Returns how many."""
        manifest, built = self.manifest, self._memories
        if manifest is None:
            return 0
        records = self.records()
        if len(records) > most:
            return 0
        rels = [rel for rel in records if rel not in built]
        if not rels:
            return 0
        root = self.store.memories_dir
        for rel, meta in zip(rels, manifest.metas(rels)):
            built.setdefault(rel, self._revived(rel, memory_from_meta(meta, root / rel)))
        return len(rels)

    def read(self, rel: str) -> Memory:
        """The memory file at `rel`, parsed, body included (`Store.read`; raises as it does). A copy of the last
        parse while the manifest's content hash for it is the same: recall shows the same few files often."""
        assert self.manifest is not None
        files = self.manifest.files
        # One field: an entry's dict decodes its chunk of every column (~100 ms for the first prompts of a
        # server at 100,000 memories, whose hits fall in chunks not read yet).
        digest = (files.value(rel, "hash") if rel in files else None) or ""
        cached = self._parsed.get(rel)
        if cached is not None and digest and cached[0] == digest:
            return self._revived(rel, replace(cached[1]))
        item = self._revived(rel, self.store.read(self.store.memories_dir / rel))
        if digest:
            if len(self._parsed) >= 4096:  # a bound for a long-lived process
                self._parsed.clear()
            self._parsed[rel] = (digest, item)
            return replace(item)
        return item

    def rel_of_id(self) -> dict[str, str]:
        if self._rel_of_id is None:
            self._rel_of_id = self._kept(self.dir / "ids.bin", RECORDS_RULE, lambda: dict(zip(
                self.records().field("id"), self.records())))  # no tuple made for each of 100,000 records
        return self._rel_of_id

    def searcher(self) -> Any:
        """A Whoosh searcher kept open between queries (re-opened after a sync changed the index)."""
        if self._searcher is None:
            ix = self.fulltext_index()
            if ix is None:
                return None
            try:
                self._searcher = ix.searcher()
            except Exception:  # a segment that will not open (or a writer replacing it just now): look again
                try:
                    self._searcher = ix.searcher()
                except Exception as exc:
                    import cortex.index.fulltext as fulltext

                    if not isinstance(exc, OSError):  # a missing file is a writer's commit racing us, not damage
                        fulltext.mark_damaged(self.whoosh_dir)  # the next sync rebuilds it
                    self._ix = None
                    return None
        return self._searcher

    def close_searcher(self) -> None:
        if self._searcher is not None:
            try:
                self._searcher.close()
            except Exception:
                pass
            self._searcher = None

    def neighbours(self) -> LinkMap:
        """id -> (rel, other id, strength) of every link that touches it: its own, and `relates_to` links other
        memories made to it (automatic links are written in the newer memory's file only; the relation reads
        both ways). A link written on both ends, as older stores have it, counts once. Computed once per sync."""
        if self._neighbours is None:
            self._neighbours = self._link_map(None)
        return self._neighbours

    def hops(self, strong: float) -> Mapping[str, list[tuple[str, str, float | None]]]:
        """`neighbours` for `graph.expand`: only the links it follows (source_of, and relates_to of at least
        `strong`, both ways), once per sync, and kept in `cache/hops.bin` for the committed manifest (as
        `centralities` are): the map is small, but making it reads every memory's links, ~0.3 s of a one-shot
        `recall` at 100,000 memories."""
        return self.memo(("hops", strong), lambda: LinkMap(self._kept(self.dir / "hops.bin", strong,
                                                                       lambda: self.hops_made(strong)._raw)))

    def hops_made(self, strong: float) -> LinkMap:
        """What `hops` keeps, worked out from the manifest and kept nowhere (a resident server makes it beside
        the requests, then keeps it: `memo`)."""
        return self._link_map(lambda rel, strength: rel == "source_of" or (
            rel == "relates_to" and strength is not None and strength >= strong))

    def _kept(self, path: Path, key: Any, compute: Callable[[], Any]) -> Any:
        """`compute()`, or what an earlier process saved of it in `path` for the committed manifest as it is and
        the same `key`; saved there for the next one. A manifest not yet committed is never saved for. The file
        is (manifest version, key, CRC-32 of the value's bytes, the value marshalled): a damaged one is made
        again, never read."""
        if self._committed:
            saved = _read_kept(path, self._version, key)
            if saved is not None:
                return saved[0]
        value = compute()
        if self._committed and self._version is not None and self.keeps_views:
            _write_kept(path, self._version, key, value)
        return value

    def _link_map(self, follows: Callable[[str, float | None], bool] | None) -> LinkMap:
        """The links (of the relations and strengths `follows` takes, or all) of every record, in path order, from
        the manifest's id and links columns read by row (most rows have no links: nothing is made for them); a
        link to a missing memory is a problem for `status`, not a neighbour."""
        assert self.manifest is not None
        rows = self.records().rows
        ids, links_of = self.manifest.files.full_column("id"), self.manifest.files.full_column("links")
        known = {ids[n] for n in rows}
        out: dict[str, dict[tuple[str, str], float | None]] = {}
        for n in rows:
            links = links_of[n]
            if not links:
                continue
            ident = ids[n]
            for rel, to, strength in links:
                if to not in known or (follows is not None and not follows(rel, strength)):
                    continue
                out.setdefault(ident, {}).setdefault((rel, to), strength)
                if rel == "relates_to":
                    out.setdefault(to, {}).setdefault((rel, ident), strength)
        return LinkMap(out)

    @property
    def centrality_path(self) -> Path:
        return self.dir / "centrality.bin"

    def centralities(self) -> dict[str, float]:
        """Links that reach a memory, weighted by strength, normalised to 0..1 (computed once per sync): a
        `relates_to` counts for both its ends, once per pair; any other relation for its target.

        Working them out decodes every memory's links (~30 ms at 10,000 memories), so they are kept in
        `cache/centrality.bin` for the committed manifest they came from: the next process (a hook, `recall`)
        reads them while manifest.bin is unchanged."""
        if self._central is None and self.older_centralities_ok and self._committed \
                and _read_kept(self.centrality_path, self._version, None) is None:
            older = _read_kept(self.centrality_path, None, None, any_version=True)
            if older is not None and isinstance(older[0], dict):
                self._central, self.centralities_older = older[0], True
        if self._central is None:
            self._central = self._kept(self.centrality_path, None, self._computed_centralities)
        return self._central

    def newer_centralities(self) -> dict[str, float]:
        """The centralities of the manifest this object holds, worked out without keeping anything in it: a
        resident server makes them beside the prompts, then takes them (`take_centralities`)."""
        return self._computed_centralities(self._link_map(None))

    def take_centralities(self, central: dict[str, float]) -> None:
        """Use centralities `newer_centralities` made from the manifest this object still holds (the caller
        checked, holding what every user of it holds); saved for the next process as `centralities` saves them."""
        self._central, self.centralities_older = central, False
        if self._committed and self._version is not None:
            _write_kept(self.centrality_path, self._version, None, central)

    def saved_centralities(self) -> dict[str, float] | None:
        """The centralities kept for the committed manifest (`centralities`), read without loading it or
        looking at the files; None when none are kept for the manifest as it is now. What `cortex show` explains
        a ranking with: syncing 100,000 memories for that took 1.1 s of its 1.3."""
        current = _file_version(self.manifest_path)
        saved = _read_kept(self.centrality_path, current, None) if current is not None else None
        return saved[0] if saved is not None and isinstance(saved[0], dict) else None

    def saved_rel_of_id(self) -> dict[str, str] | None:
        """`rel_of_id` as kept for the committed manifest, read without loading it or looking at the files; None
        when none is kept, or a memory folder changed since shortly before the manifest it was kept for was written
        (a file added, removed or renamed: by hand, by git). What `cortex show` checks an id with."""
        saved = _read_kept(self.dir / "ids.bin", None, RECORDS_RULE, any_version=True)
        if saved is None or not isinstance(saved[0], dict) or not isinstance(saved[1], (tuple, list)) \
                or self._folders_since(saved[1][1] - CLOCK_SLACK_NS):  # kept for a manifest written at saved[1][1]
            return None
        return saved[0]

    def _computed_centralities(self, neighbours: Any = None) -> dict[str, float]:
        degree: dict[str, float] = {}
        # not each list sorted (~0.4 s at 100,000)
        for memory_id, rel, other, strength in (neighbours or self.neighbours()).links():
            weight = 1.0 if strength is None else strength
            if rel == "relates_to":
                degree[memory_id] = degree.get(memory_id, 0.0) + weight
            else:
                degree[other] = degree.get(other, 0.0) + weight
        top = max(degree.values(), default=0.0)
        return {k: v / top for k, v in degree.items()} if top > 0 else {}

    def fulltext_index(self) -> Any:
        """The Whoosh index (opened once), or None when it is missing or broken."""
        import cortex.index.fulltext as fulltext

        if self._ix is None:
            self._ix = fulltext.open_index(self.whoosh_dir)
        return self._ix

    def vector_matrix(self) -> tuple[Any, dict[str, int]] | None:
        """(matrix, row of each text hash) for the committed vectors, or None without vectors."""
        import cortex.index.vectors as vectors

        if self.manifest is None or not self.manifest.vector_keys:
            return None
        if self._vectors is None:
            matrix = vectors.load(self.vectors_path, len(self.manifest.vector_keys), self.manifest.dim)
            if matrix is None:
                return None
            self._vectors = (matrix, self._rows_of_keys(self.manifest.vector_keys))
        return self._vectors

    def _rows_of_keys(self, keys: list[str]) -> dict[str, int]:
        """Row of each text hash. Rows are only ever appended (a new model starts a new list): the map made for
        the rows before is extended, not made again (0.1 s at 100,000 memories, after every write)."""
        known, made = self._row_map
        if len(known) > len(keys) or keys[:len(known)] != known:
            known, made = [], {}
        made = dict(made) if known else {}
        made.update((key, row) for row, key in enumerate(keys[len(known):], start=len(known)))
        self._row_map = (list(keys), made)
        return made

    def digest(self) -> dict[str, Any]:
        """A digest of the cache's logical content: each memory's id, path, content hash and embedded-text hash,
        and the model identity when there are vectors. Equal for equal files however the cache was built
        (vectors from the batch and the one-text encoder differ in the 8th decimal); whether the vectors
        themselves match their text is `check`'s job."""
        if self.manifest is None:
            self.sync(full=True)
        assert self.manifest is not None
        rows = self.vector_matrix()
        h = hashlib.sha256()
        if rows is not None:
            h.update(f"model\0{self.manifest.model}\0{self.manifest.dim}\0".encode())
        count = 0
        for rel, entry in sorted(self.manifest.files.items()):
            if "error" in entry:
                continue
            count += 1
            embedded = rows is not None and entry.get("vhash") in rows[1]
            h.update(f"{entry['id']}\0{rel}\0{entry['hash']}\0{entry.get('vhash') if embedded else ''}\0".encode())
        return {"digest": h.hexdigest(), "memories": count, "vectors": rows is not None}

    def check(self) -> list[str]:
        """Compare the cache with the files by content; returns the differences (none when in step).

        Every file is hashed, the full-text index read through, and every vector recomputed from its memory's
        text with the model and compared (`VECTOR_TOLERANCE`); `vectors_checked` says how many."""
        from cortex.index.manifest import read_entry
        from cortex.store import walk_memory_files

        assert self.manifest is not None
        differences = []
        files, odd = walk_memory_files(str(self.store.memories_dir)) if self.store.memories_dir.is_dir() else ([], [])
        on_disk = {prefix + name for _, name, prefix, _ in files} | {rel for rel, _ in odd}
        for rel in sorted(on_disk - set(self.manifest.files)):
            differences.append(f"not in cache: {rel}")
        for rel in sorted(set(self.manifest.files) - on_disk):
            differences.append(f"in cache but gone: {rel}")
        max_bytes = self.store.max_memory_bytes()
        for rel in sorted(on_disk & set(self.manifest.files)):
            if read_entry(self.store.memories_dir / rel, None, max_bytes)["hash"] != self.manifest.files[rel]["hash"]:
                differences.append(f"stale in cache: {rel}")
        differences += self._check_fulltext()
        differences += self._check_vectors()
        return differences

    def _check_fulltext(self) -> list[str]:
        import cortex.index.fulltext as fulltext

        assert self.manifest is not None
        ix = fulltext.open_index(self.whoosh_dir)
        if ix is None:
            return ["full-text index missing or unreadable"]
        damage = fulltext.readable(ix)
        if damage:
            return [f"full-text index unreadable ({damage})"]
        with ix.searcher() as searcher:
            indexed = {fields["path"] for fields in searcher.all_stored_fields()}
        expected = {rel for rel, entry in self.manifest.files.items() if "error" not in entry}
        if indexed != expected:
            return [f"full-text index holds {len(indexed)} files, expected {len(expected)}"]
        return []

    def _check_vectors(self) -> list[str]:
        """Recompute every memory's vector from its text and compare it with the cached row."""
        import numpy as np

        assert self.manifest is not None
        self.vectors_checked = 0
        encoder = self.encoder()
        wanted: dict[str, str] = {}  # text hash -> one file with that text
        for rel, entry in sorted(self.manifest.files.items()):
            if entry.get("vhash") and "error" not in entry:
                wanted.setdefault(entry["vhash"], rel)
        if encoder is None or not wanted:
            return []
        rows = self.vector_matrix()
        if rows is None:
            return ["vectors missing"]
        matrix, row_of = rows
        missing = [vhash for vhash in wanted if vhash not in row_of]
        if missing:
            return [f"{len(missing)} memories have no vector"]
        if self.manifest.model != getattr(encoder, "identity", self.manifest.model):
            return [f"vectors are from model {self.manifest.model}, not {encoder.identity}"]
        texts = []
        for rel in wanted.values():
            item = memory_from_meta(self.manifest.meta(rel), self.store.memories_dir / rel)
            item.body = read_body(self.store.memories_dir / rel)
            texts.append(embed_text(item))
        fresh = np.asarray(encoder.encode(texts), dtype=np.float32)
        cached = np.asarray(matrix[[row_of[vhash] for vhash in wanted]], dtype=np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            worst = np.nan_to_num(np.abs(fresh - cached), nan=np.inf).max(axis=1) if len(texts) else np.zeros(0)
        self.vectors_checked = len(texts)
        bad = [rel for rel, diff in zip(wanted.values(), worst) if not diff <= VECTOR_TOLERANCE]
        if not bad:
            return []
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        return [f"{len(bad)} of {len(texts)} vectors differ from their memory's text by more than "
                f"{VECTOR_TOLERANCE:g} (damaged vectors.f32 rows): {shown}"]


class LinkMap(Mapping[str, list[tuple[str, str, Any]]]):
    """`Index.neighbours`: each memory's links as a sorted list, sorted when first asked for. A `remember` at
    100,000 memories asks for one memory's links, and sorting all ~46,000 lists took 0.19 s of it."""

    __slots__ = ("_raw", "_sorted")

    def __init__(self, raw: dict[str, dict[tuple[str, str], Any]]) -> None:
        self._raw: dict[str, dict[tuple[str, str], Any]] = raw
        self._sorted: dict[str, list[tuple[str, str, Any]]] = {}

    def __getitem__(self, memory_id: str) -> list[tuple[str, str, Any]]:
        links = self._sorted.get(memory_id)
        if links is None:
            links = self._sorted[memory_id] = [(rel, other, strength)
                                               for (rel, other), strength in sorted(self._raw[memory_id].items())]
        return links

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self._raw

    def links(self) -> Iterator[tuple[str, str, str, Any]]:
        """(memory id, relation, other id, strength) of every link, in no order: no list sorted."""
        for memory_id, links in self._raw.items():
            for (rel, other), strength in links.items():
                yield memory_id, rel, other, strength


def _crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def _changed_behind(files: dict[str, Path], recorded: dict[str, Any]) -> bool:
    """Whether `files` are not those recorded: a name or a size differs, or the content where only the mtime
    does (a copy or a touch is not damage)."""
    if set(files) != set(recorded):
        return True
    for name, path in files.items():
        size, mtime, crc = recorded[name]
        try:
            info = path.stat()
            if info.st_size != size or (info.st_mtime_ns != mtime and _crc(path) != crc):
                return True
        except OSError:
            return True
    return False


def _marks(files: dict[str, Path], recorded: dict[str, Any],
           known: tuple[int, int] | None = None) -> dict[str, tuple[int, int, int]]:
    """name -> (size, mtime_ns, CRC-32); the CRC is taken from `recorded` when size and mtime did not change,
    or from `known` (size, CRC) for a file this process just wrote."""
    out = {}
    for name, path in files.items():
        try:
            info = path.stat()
            old = recorded.get(name)
            if old is not None and old[0] == info.st_size and old[1] == info.st_mtime_ns:
                crc = old[2]
            elif known is not None and known[0] == info.st_size:
                crc = known[1]
            else:
                crc = _crc(path)
        except OSError:
            continue  # gone: the next check finds the record and the files differ
        out[name] = (info.st_size, info.st_mtime_ns, crc)
    return out


class Records(Mapping[str, dict[str, Any]]):
    """The manifest's valid entries by path, in path order (`Index.records`): an entry's dict is made when it
    is asked for, and `column` reads a few fields of every record without making any."""

    def __init__(self, files: Entries, rels: list[str], rows: list[int]) -> None:
        """`rels`: the path of each record, in path order; `rows`: its row in `files`."""
        self._files, self._rels, self._rows = files, rels, rows
        self._set: frozenset[str] | None = None
        # The records read as active although their files say superseded (`cortex.memory.revived_in_cycles`).
        self.revived: frozenset[str] = frozenset()
        self.revived_ids: frozenset[str] = frozenset()

    def revive(self) -> None:
        """Find the supersession cycles among the records and the one memory of each that reads as active."""
        links = self.field("links")
        replaces: dict[str, list[str]] = {}
        rel_of: dict[str, str] = {}
        for n, listed in enumerate(links):
            if listed and any(link[0] == "supersedes" for link in listed):
                rel = self._rels[n]
                ident = self._files.value(rel, "id")
                replaces[ident] = [link[1] for link in listed if link[0] == "supersedes"]
                rel_of[ident] = rel
        if not replaces:
            return
        from cortex.memory import revived_in_cycles

        found = revived_in_cycles(replaces, {i: self._files.value(r, "status") for i, r in rel_of.items()},
                                  {i: self._files.value(r, "updated") for i, r in rel_of.items()})
        self.revived_ids = frozenset(found)
        self.revived = frozenset(rel_of[ident] for ident in found)

    def _status(self, rel: str, value: Any) -> Any:
        return "active" if rel in self.revived else value

    @property
    def _keys(self) -> frozenset[str]:  # made when first asked: `column` and iteration need only the list
        if self._set is None:
            self._set = frozenset(self._rels)
        return self._set

    def __getitem__(self, rel: str) -> dict[str, Any]:
        if rel not in self._keys:
            raise KeyError(rel)
        entry = self._files[rel]
        return dict(entry, status="active") if rel in self.revived else entry

    def __contains__(self, rel: object) -> bool:
        return rel in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._rels)

    def __len__(self) -> int:
        return len(self._rels)

    @property
    def rows(self) -> list[int]:
        """The row in the manifest's columns (`Entries.full_column`) of each record, in path order."""
        return self._rows

    def value(self, rel: str, name: str) -> Any:
        """One field of one record (None when it has none), without making its dict."""
        if rel not in self._keys:
            raise KeyError(rel)
        value = self._files.value(rel, name)
        return self._status(rel, value) if name == "status" and self.revived else value

    def field(self, name: str) -> Sequence[Any]:
        """One field of every record (None where it has none), in path order."""
        if name == "status" and self.revived:
            return [self._status(rel, value) for rel, value in self.column("status")]
        if len(self._rows) < 2:
            return [self._files.value(rel, name) for rel in self._rels]
        return operator.itemgetter(*self._rows)(self._files.full_column(name))

    def column(self, *names: str) -> list[tuple[Any, ...]]:
        """(path, value of each named field, None where it has none) of every record, in path order."""
        if len(self._rows) < 2:
            rows = [(rel, *(self._files.value(rel, name) for name in names)) for rel in self._rels]
        else:
            pick = operator.itemgetter(*self._rows)  # rows stay where they are while these records hold
            rows = list(zip(self._rels, *(pick(self._files.full_column(name)) for name in names)))
        if self.revived and "status" in names:  # the one memory of a supersession cycle read as active
            at = names.index("status") + 1
            rows = [row[:at] + ("active",) + row[at + 1:] if row[0] in self.revived else row for row in rows]
        return rows


def _load_version(path: Path, version: tuple[int, int, int] | None) -> Manifest | None:
    """The manifest at `path` when it is the file of `version` before and after it was read (a commit replaces
    the file, so the times of a new one never match), else None: what is loaded is then known to be the
    committed manifest of `version`, whose kept views (`Index._kept`) it may read and save."""
    if version is None or _file_version(path) != version:
        return None
    manifest = Manifest.load(path)
    return manifest if manifest is not None and _file_version(path) == version else None


def _write_kept(path: Path, version: tuple[int, int, int], key: Any, value: Any) -> bool:
    """Save a view for `Index._kept` (the head: version, key, CRC-32 and length of the marshalled value)."""
    try:
        blob = marshal.dumps(value)
        head = marshal.dumps((version, key, zlib.crc32(blob), len(blob)))
        atomic_write(path, len(head).to_bytes(4, "little") + head + blob, durable=False)
        return True
    except (OSError, ValueError):  # a read-only cache, or something marshal cannot write: worked out each time
        return False


def _read_kept(path: Path, version: tuple[int, int, int] | None, key: Any, any_version: bool = False
               ) -> tuple[Any, ...] | None:
    """(the value,) saved by `Index._kept` in `path` for this manifest version (or, with `any_version`, whichever
    it was saved for) and key; None when the file is missing, for another version or key (told from its short
    head, without reading the rest), damaged (its CRC-32) or of an older format."""
    try:
        with open(path, "rb") as handle:
            size = int.from_bytes(handle.read(4), "little")
            if not 0 < size <= 4096:
                return None
            saved_version, saved_key, crc, length = marshal.loads(handle.read(size))
            if (tuple(saved_version) != version and not any_version) or saved_key != key:
                return None
            blob = handle.read(length + 1)
        if len(blob) != length or zlib.crc32(blob) != crc:
            return None
        return (marshal.loads(blob), saved_version) if any_version else (marshal.loads(blob),)
    except Exception:  # missing, unreadable, an older format
        return None


def _digest(key: Any) -> str:
    """A short name for a view's key (`Index._kept` files: `allowed-<digest>.bin`)."""
    return hashlib.sha1(repr(key).encode()).hexdigest()[:12]


def _level(full: bool, vectors: bool) -> int:
    """Sync depth: 1 the manifest, 2 with vectors, 3 with the full-text index and vectors."""
    return 3 if full else 2 if vectors else 1


def _incomplete(manifest: Manifest) -> bool:
    if manifest.pending_deletes or (manifest.files and not manifest.vector_keys):
        return True
    return any(not ft for _, ft in manifest.files.column("ft"))


def _file_version(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


@contextlib.contextmanager
def collecting(on: bool = True) -> Any:
    """The cyclic garbage collector on for a bulk job (a command runs without it: `cortex.__main__.run`):
    Whoosh's writer leaves cycles behind, and at 100,000 documents they took a rebuild from 0.76 to 1.1 GB."""
    import gc

    was = gc.isenabled()
    if on and not was:
        gc.freeze()  # what is loaded already (the manifest: 10^5 dicts) is never garbage: no pass walks it
        gc.enable()
    try:
        yield
    finally:
        if on and not was:
            gc.disable()
            gc.unfreeze()


def read_body(path: Path) -> str:
    from cortex import memory as fmt

    try:
        return fmt.split_front_matter(path.read_text(encoding="utf-8"), path)[1]
    except Exception:
        return ""


class Indexes:
    """Warm indexes, one per store, shared by every call of one process.

    The one-shot hook, `cortex serve` and the MCP server hand one of these to the library's entry points
    (`cortex.events`), so the same code serves all three: a hook's holder syncs each store once; a resident
    process marks a store `stale` when its watcher sees a change, and the next call syncs it again.
    """

    serving: Indexes | None = None  # while `cortex serve` runs a command for a client: its warm indexes

    def __init__(self) -> None:
        self._by_root: dict[str, Index] = {}

    def get(self, store: Store) -> Index:
        key = str(store.root)
        index = self._by_root.get(key)
        if index is None:
            index = self._by_root[key] = Index(store)
        return index

    def synced(self, store: Store, full: bool = False, vectors: bool = False, ahead: bool = False,
               resident: bool = False) -> Index:
        return self.get(store).ensure(full=full, vectors=vectors, ahead=ahead, resident=resident)

    def put(self, store: Store, index: Index) -> None:
        """`index` in the place of the store's current one (whose searcher the caller closes)."""
        self._by_root[str(store.root)] = index

    def confirm(self) -> bool:
        """`Index.confirm` of every index (each waited for): False when any store's files had changed."""
        return all([index.confirm() for index in self._by_root.values()])

    def stale(self, store: Store) -> None:
        index = self._by_root.get(str(store.root))
        if index is not None:
            index.stale()

    def close(self) -> None:
        for index in self._by_root.values():
            index.close_searcher()
        self._by_root.clear()


def answer_ahead(stores: list[Store], answer: Callable[[Indexes], Any], full: bool = True) -> Any:
    """`answer(indexes)` for a one-shot command or hook: made from the committed caches while forked children
    sync the stores (`Index.ensure(ahead=True)`), and made again from the synced caches when they found files
    changed. Reads counted meanwhile (`Store.record_access`) are those of the answer given."""
    from cortex.store import defer_access, drop_access, flush_access

    indexes = Indexes()
    for store in stores:
        indexes.synced(store, full=full, ahead=True)
    defer_access()
    try:
        result = answer(indexes)
        if not indexes.confirm():
            drop_access()
            result = answer(indexes)
    except BaseException:
        drop_access()
        raise
    finally:
        flush_access(stop=True)
    return result

