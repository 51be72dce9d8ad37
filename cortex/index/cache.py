"""The cache of a store: a SQLite database and a Whoosh index, kept in step with the files.

    .cortex/cache/
      cache.db          per file: stat, content hash, metadata; vectors; centralities (`cortex.index.db`)
      whoosh/           BM25F full-text index

`Index` is one store's cache, made of its parts by noun: `sync` (the files, the full text), `views` (records,
filters, links, centralities) and `vectors`; `Indexes` holds the warm indexes of one process.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from typing import Any, Callable

from cortex.index.manifest import Manifest, collecting, read_body, read_entry
from cortex.index.sync import SyncPart, SyncReport
from cortex.index.vectors import VectorsPart
from cortex.index.views import LinkMap, Records, ViewsPart
from cortex.memory import Memory
from cortex.store import Scan, Store

__all__ = ["Index", "Indexes", "LinkMap", "Records", "SyncReport", "collecting", "read_body"]


class Index(SyncPart, ViewsPart, VectorsPart):
    """The cache of one store."""

    def __init__(self, store: Store, encoder_factory: Callable[[], Any] | None = None,
                 keyword_only: bool = False) -> None:
        self.store = store
        self.dir = store.cache_dir
        self.manifest: Manifest | None = None
        self._conn: sqlite3.Connection | None = None
        self._encoder_factory = encoder_factory
        self._encoder: Any = None
        self._encoder_tried = keyword_only  # keyword only: the model is never loaded
        self.encoder_problem: str | None = None
        self._synced: int | None = None  # the level of the last sync this object made (see `ensure`)
        self._noted_only = False  # since that sync only files this object wrote changed (`note_written`)
        self._checked_ns: int | None = None  # `watched`: every file known as of this time without a walk
        self.trust_watcher = True  # the watcher itself sets this False
        # False: a manifest-level sync reads without taking the write lock and commits nothing (a resident
        # server's second index, which builds the next briefing). A deeper sync commits as any other.
        self.commits = True
        self.rebuilding = False  # `rebuild`: one bulk job, after which this object is dropped
        self.repaired: list[str] = []  # every damaged part this object's syncs found and rebuilt
        self.vectors_checked = 0  # rows `check` recomputed from the memories' text
        self._ix: Any = None
        self._searcher: Any = None
        self._memories: dict[str, Memory] = {}  # rel -> `memory(rel)`, until the next sync changes something
        self._parsed: dict[str, tuple[str, Memory]] = {}  # rel -> (content hash, `read(rel)`), kept across syncs
        self._forget_views()

    def _forget_views(self) -> None:
        self._scan: Scan | None = None
        self._records: Records | None = None
        self._problems: list[tuple[str, str]] = []
        self._central: dict[str, float] | None = None
        self._neighbours: LinkMap | None = None
        self._rel_of_id: dict[str, str] | None = None
        self._vectors: Any = None
        self._allowed: dict[Any, Any] = {}
        self._memories = {}
        self.close_searcher()

    # ------------------------------------------------------------ the full text

    def fulltext_index(self) -> Any:
        """The Whoosh index (opened once), or None when it is missing or broken."""
        import cortex.index.fulltext as fulltext

        if self._ix is None:
            self._ix = fulltext.open_index(self.whoosh_dir)
        return self._ix

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
        searcher, self._searcher = getattr(self, "_searcher", None), None
        if searcher is not None:
            with contextlib.suppress(Exception):
                searcher.close()

    # ------------------------------------------------------------ verify

    def digest(self) -> dict[str, Any]:
        """A digest of the cache's logical content: each memory's id, path, content hash and embedded-text hash,
        and the model identity when there are vectors. Equal for equal files however the cache was built;
        whether the vectors themselves match their text is `check`'s job."""
        if self.manifest is None:
            self.sync(full=True)
        assert self.manifest is not None
        rows = self.vector_matrix()
        h = hashlib.sha256()
        if rows is not None:
            h.update(f"model\0{self.manifest.model}\0{self.manifest.dim}\0".encode())
        count = 0
        for rel, error, ident, digest, vhash in sorted(self.manifest.files.column("error", "id", "hash", "vhash")):
            if error is not None:
                continue
            count += 1
            embedded = rows is not None and vhash in rows[1]
            h.update(f"{ident}\0{rel}\0{digest}\0{vhash if embedded else ''}\0".encode())
        return {"digest": h.hexdigest(), "memories": count, "vectors": rows is not None}

    def check(self) -> list[str]:
        """Compare the cache with the files by content; returns the differences (none when in step).

        Every file is hashed, the full-text index read through, and every vector recomputed from its memory's
        text with the model and compared (`VECTOR_TOLERANCE`); `vectors_checked` says how many."""
        from cortex.store import walk_memory_files

        assert self.manifest is not None
        files = self.manifest.files
        differences = []
        listed, odd = walk_memory_files(str(self.store.memories_dir)) if self.store.memories_dir.is_dir() else ([], [])
        on_disk = {prefix + name for _, name, prefix, _ in listed} | {rel for rel, _ in odd}
        known = set(files)
        for rel in sorted(on_disk - known):
            differences.append(f"not in cache: {rel}")
        for rel in sorted(known - on_disk):
            differences.append(f"in cache but gone: {rel}")
        max_bytes = self.store.max_memory_bytes()
        for rel in sorted(on_disk & known):
            if read_entry(self.store.memories_dir / rel, None, max_bytes)["hash"] != files.value(rel, "hash"):
                differences.append(f"stale in cache: {rel}")
        return differences + self._check_fulltext() + self.check_vectors()

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
        expected = {rel for rel, error in self.manifest.files.column("error") if error is None}
        if indexed != expected:
            return [f"full-text index holds {len(indexed)} files, expected {len(expected)}"]
        return []


class Indexes:
    """Warm indexes, one per store, shared by every call of one process.

    The one-shot hook, `cortex serve` and the MCP server hand one of these to the library's entry points
    (`cortex.events`), so the same code serves all three: a hook's holder syncs each store once; a resident
    process marks a store `stale` when its watcher sees a change, and the next call syncs it again.
    """

    def __init__(self) -> None:
        self._by_root: dict[str, Index] = {}

    def get(self, store: Store) -> Index:
        key = str(store.root)
        index = self._by_root.get(key)
        if index is None:
            index = self._by_root[key] = Index(store)
        return index

    def synced(self, store: Store, full: bool = False, vectors: bool = False) -> Index:
        return self.get(store).ensure(full=full, vectors=vectors)  # type: ignore[no-any-return]

    def stale(self, store: Store) -> None:
        index = self._by_root.get(str(store.root))
        if index is not None:
            index.stale()

    def close(self) -> None:
        for index in self._by_root.values():
            index.close_searcher()
            index.close_database()
        self._by_root.clear()
