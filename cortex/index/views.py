"""What readers ask of the cache, made from the synced manifest once per sync (a part of `cortex.index.Index`):
the records (valid memories by path), problems, filtered paths, `Memory` objects, the link graph and the
centralities (kept in the database for the next process, with the commit they came from).
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import cortex.index.db as db
from cortex.index.manifest import Entries, Manifest, memory_from_meta
from cortex.memory import Memory
from cortex.store import Problem, Scan, duplicate_ids, duplicate_reason


class ViewsPart:
    """The views of one store's cache (a part of `cortex.index.Index`)."""

    store: Any
    manifest: Manifest | None
    _scan: Scan | None
    _records: Records | None
    _problems: list[tuple[str, str]]
    _central: dict[str, float] | None
    _neighbours: LinkMap | None
    _allowed: dict[Any, Any]
    _rel_of_id: dict[str, str] | None
    _memories: dict[str, Memory]
    _parsed: dict[str, tuple[str, Memory]]

    if TYPE_CHECKING:  # provided by the other parts of `Index`
        def sync(self, full: bool = True, progress: bool = True, vectors: bool = False) -> Any:
            ...

        def conn(self) -> sqlite3.Connection:
            ...

        def _folders_since(self, synced_ns: int) -> bool:
            ...

    def _synced_manifest(self) -> Manifest:
        if self.manifest is None:
            self.sync(full=False)
        assert self.manifest is not None
        return self.manifest

    def scan(self) -> Scan:
        """Every memory (bodies not loaded) and every problem, from the synced manifest, in path order."""
        manifest = self._synced_manifest()
        if self._scan is None:
            records, root = self.records(), self.store.memories_dir
            items = [memory_from_meta(meta, root / rel) for rel, meta in zip(records, manifest.metas(list(records)))]
            for item in items if records.revived_ids else ():
                if item.id in records.revived_ids:
                    item.status = "active"
            self._scan = Scan(items, [Problem(path, reason) for path, reason in self.problems()])
        return self._scan

    def records(self) -> Records:
        """Manifest entries of every valid memory by path (relative to memories/): id, status, type, branch and
        links directly, the rest through `Manifest.meta`. Files sharing an id are all left out."""
        manifest = self._synced_manifest()
        if self._records is None:
            rels, rows, self._problems = self._sorted_out(manifest.files)
            self._records = Records(manifest.files, rels, rows)
            self._records.revive()
        return self._records

    def meta(self, rel: str) -> dict[str, Any]:
        """A record's full metadata (title, tags, dates, …) from the synced manifest."""
        return self._synced_manifest().meta(rel)

    def _sorted_out(self, files: Entries) -> tuple[list[str], list[int], list[tuple[str, str]]]:
        """The records (their paths and rows, in path order) and (path, reason) of the problems."""
        rels: list[str] = []
        rows: list[int] = []
        problems: list[tuple[str, str]] = []
        paths, errors, ids = files.paths, files.full_column("error"), files.full_column("id")
        order = sorted((n for n, rel in enumerate(paths) if rel is not None), key=lambda n: paths[n] or "")
        if len(order) > 1:
            pick = operator.itemgetter(*order)  # no malformed file and no id twice (the usual store): in C
            if pick(errors).count(None) == len(order) and len(set(pick(ids))) == len(order):
                return list(pick(paths)), order, []
        root = self.store.memories_dir
        shared = duplicate_ids((ids[n], paths[n]) for n in order if errors[n] is None)
        for n in order:
            rel, error, ident = paths[n], errors[n], ids[n]
            assert rel is not None
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
        """The paths of the records whose (status, type, branch) pass a filter, once per sync for each `key`:
        `keep` is asked once for each combination there is (a few dozen)."""
        if key not in self._allowed:
            records = self.records()
            combos = list(zip(records.field("status"), records.field("type"), records.field("branch")))
            verdict = {combo: keep(*combo) for combo in set(combos)}
            self._allowed[key] = frozenset(itertools.compress(records, map(verdict.__getitem__, combos)))
        return self._allowed[key]  # type: ignore[no-any-return]

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """A value kept until the next sync that changes something (with the filtered views): `make()` once."""
        if key not in self._allowed:
            self._allowed[key] = make()
        return self._allowed[key]

    def memory(self, rel: str) -> Memory:
        """The memory at `rel` (relative to memories/) from the synced manifest, body not loaded; built once
        per sync (a resident process ranks the same candidates query after query)."""
        found = self._memories.get(rel)
        if found is None:
            manifest = self._synced_manifest()
            found = self._memories[rel] = self._revived(rel, memory_from_meta(manifest.meta(rel),
                                                                                self.store.memories_dir / rel))
        return found

    def _revived(self, rel: str, item: Memory) -> Memory:
        """`item` with status active when it is the memory of a supersession cycle every reader takes as active."""
        if rel in self.records().revived:
            item.status = "active"
        return item

    def read(self, rel: str) -> Memory:
        """The memory file at `rel`, parsed, body included (`Store.read`; raises as it does). A copy of the last
        parse while the manifest's content hash for it is the same: recall shows the same few files often."""
        files = self._synced_manifest().files
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
            records = self.records()
            self._rel_of_id = dict(zip(records.field("id"), records))
        return self._rel_of_id

    def saved_rel_of_id(self) -> dict[str, str] | None:
        """`rel_of_id` of the committed cache, read without loading it or looking at the files; None when there
        is none, or a memory folder changed since its last sync (a file added, removed or renamed: by hand, by
        git). What `cortex show` checks an id with."""
        try:
            ids, synced = db.saved_ids(self.conn())
        except sqlite3.Error:
            return None
        if not synced or self._folders_since(synced):
            return None
        return ids

    # ------------------------------------------------------------ links

    def neighbours(self) -> Mapping[str, list[tuple[str, str, float | None]]]:
        """id -> (rel, other id, strength) of every link that touches it: its own, and `relates_to` links other
        memories made to it (the relation reads both ways). Computed once per sync."""
        if self._neighbours is None:
            self._neighbours = self._link_map(None)
        return self._neighbours

    def hops(self, strong: float) -> Mapping[str, list[tuple[str, str, float | None]]]:
        """`neighbours` for `graph.expand`: only the links it follows (source_of, and relates_to of at least
        `strong`, both ways), once per sync."""
        return self.memo(("hops", strong), lambda: self.hops_made(strong))  # type: ignore[no-any-return]

    def hops_made(self, strong: float) -> LinkMap:
        return self._link_map(lambda rel, strength: rel == "source_of" or (
            rel == "relates_to" and strength is not None and strength >= strong))

    def _link_map(self, follows: Callable[[str, float | None], bool] | None) -> LinkMap:
        """The links (of the relations and strengths `follows` takes, or all) of every record; a link to a
        missing memory is a problem for `status`, not a neighbour."""
        files = self._synced_manifest().files
        rows = self.records().rows
        ids, links_of = files.full_column("id"), files.full_column("links")
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

    def centralities(self) -> dict[str, float]:
        """Links that reach a memory, weighted by strength, normalised to 0..1 (once per sync): a `relates_to`
        counts for both its ends, once per pair; any other relation for its target. Kept in the database for
        the commit they came from: the next process reads them while nothing changed."""
        if self._central is None:
            manifest = self._synced_manifest()
            saved = self._saved_centralities(manifest.generation)
            if saved is None:
                saved = self._computed_centralities()
                if manifest.generation and not manifest.files.changed and not manifest.files.removed:
                    try:
                        db.keep_centralities(self.conn(), manifest.generation, saved)
                    except sqlite3.Error:
                        pass  # a read-only cache: worked out each time
            self._central = saved
        return self._central

    def _saved_centralities(self, generation: int | None) -> dict[str, float] | None:
        try:
            return db.saved_centralities(self.conn(), generation)
        except sqlite3.Error:
            return None

    def saved_centralities(self) -> dict[str, float] | None:
        """The centralities kept for the committed cache, read without loading it or looking at the files; None
        when none are kept for it. What `cortex show` explains a ranking with."""
        return self._saved_centralities(None)

    def _computed_centralities(self, neighbours: LinkMap | None = None) -> dict[str, float]:
        degree: dict[str, float] = {}
        links = neighbours if neighbours is not None else self.neighbours()
        assert isinstance(links, LinkMap)
        for memory_id, rel, other, strength in links.links():
            weight = 1.0 if strength is None else strength
            if rel == "relates_to":
                degree[memory_id] = degree.get(memory_id, 0.0) + weight
            else:
                degree[other] = degree.get(other, 0.0) + weight
        top = max(degree.values(), default=0.0)
        return {k: v / top for k, v in degree.items()} if top > 0 else {}


class LinkMap(Mapping[str, list[tuple[str, str, Any]]]):
    """`Index.neighbours`: each memory's links as a sorted list, sorted when first asked for (a `remember` asks
    for one memory's links, not all)."""

    __slots__ = ("_raw", "_sorted")

    def __init__(self, raw: dict[str, dict[tuple[str, str], Any]]) -> None:
        self._raw = raw
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
        replaces: dict[str, list[str]] = {}
        rel_of: dict[str, str] = {}
        mentioning = self._files.rows_mentioning("links", '"supersedes"')  # not every link list decoded
        for rel, row in zip(self._rels, self._rows):
            listed = self._files.value(rel, "links") if row in mentioning else None
            if listed and any(link[0] == "supersedes" for link in listed):
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
