"""The manifest: what the cache knows about each memory file, in memory.

Each file (path relative to `memories/`) has its stat (mtime_ns, size), content hash, the hash of the text
that was embedded, the fields recall filters on (id, status, type, branch, links), those `cortex list` shows
(title, priority, pinned, tags), its parsed metadata as a JSON string decoded only when needed (or the reason
the file is malformed) and whether the full-text index holds this version. `cortex.index.db` keeps it in the
cache's SQLite database, one row per file; this module reads the files and holds the rows.

A symbolic link, a `.md` that is not a regular file and a file over `store.max_memory_bytes` are entries with
an `error` (reported by status, never read past the stat).

`refresh()` brings it in step with the files by stat alone, re-reading only files whose (mtime, size) changed,
or whose mtime is so recent that an edit within the same clock tick could hide (git's "racy" rule).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cortex.errors import MalformedMemory
from cortex.memory import Link, Memory
from cortex.store import MAX_MEMORY_BYTES, parse_bytes, read_memory_bytes, too_large, walk_memory_stats

LIST_FIELDS = ("title", "priority", "pinned", "tags")  # and `session` (`source.session`: recall's session lift)
BRIEF_FIELDS = ("confidence", "created", "updated", "files")  # the ranking prior and the briefing's checks
RACY_NS = 2_000_000_000  # files modified within 2 s of the last sync are re-hashed next time
# Every entry's fields, in column order (an `error` entry has the first five; a valid one all but `error`).
FIELDS = ("mtime", "size", "hash", "error", "ft", "id", "status", "type", "branch", "links", *LIST_FIELDS, "session",
          *BRIEF_FIELDS, "vhash", "meta")
ERROR_FIELDS = FIELDS[:5]
JSON_FIELDS = frozenset({"links", "tags", "files"})  # lists, kept as JSON text in the database
BOOL_FIELDS = frozenset({"ft", "pinned"})  # SQLite gives them back as 0 and 1


def embed_text(item: Memory) -> str:
    """The text a memory's vector is computed from: title and body, or the body alone when the title is just
    its opening words (as `remember` and capture make it), so the first sentence does not count twice."""
    title = item.title.rstrip("…").strip()
    body = " ".join(item.body.split())
    if title and " ".join(title.split()) and body.replace("**", "").replace("__", "").startswith(" ".join(title.split())):
        return item.body.strip()
    return f"{item.title}\n{item.body}".strip()


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def stored(name: str, value: Any) -> Any:
    """A field's value as the database holds it."""
    return json.dumps(value) if name in JSON_FIELDS and value is not None else value


def _decoded(name: str, raw: list[Any]) -> list[Any]:
    """A JSON or boolean column as Python values."""
    if name in JSON_FIELDS:  # one parse of the whole column, not one per row
        return json.loads("[" + ",".join("null" if value is None else value for value in raw) + "]")
    return [None if value is None else bool(value) for value in raw]


class Entries(MutableMapping[str, dict[str, Any]]):
    """The manifest's entries by path, held as columns (the rows the database gave, by field): `column` reads a
    few fields of every entry without making a dict for each (refresh, status, list, the recall filters).
    Entries set since the load are kept whole (`changed`) and are what the next commit writes, with `removed`."""

    def __init__(self, paths: list[str | None] | None = None, columns: dict[str, list[Any]] | None = None) -> None:
        self._paths: list[str | None] = paths if paths is not None else []
        self._raw = columns or {}  # field -> value of each loaded row, as the database holds it
        self._columns: dict[str, list[Any]] = {}  # the same, decoded (made when first asked for)
        self._pos: dict[str, int] | None = None
        self._rows: dict[int, dict[str, Any]] = {}  # row -> entry, for entries handed out or set since the load
        self._holes = 0
        self.changed: set[str] = set()  # paths set since the last commit
        self.removed: set[str] = set()  # paths removed since the last commit

    def _index(self) -> dict[str, int]:
        if self._pos is None:
            self._pos = {rel: i for i, rel in enumerate(self._paths) if rel is not None}
        return self._pos

    def __len__(self) -> int:
        return len(self._paths) - self._holes

    def __iter__(self) -> Iterator[str]:
        return iter([rel for rel in self._paths if rel is not None])

    def __contains__(self, rel: object) -> bool:
        return rel in self._index()

    def __getitem__(self, rel: str) -> dict[str, Any]:
        i = self._index()[rel]
        row = self._rows.get(i)
        if row is None:
            names = ERROR_FIELDS if self._base("error")[i] is not None else [name for name in FIELDS if name != "error"]
            row = self._rows[i] = {name: self._loaded(name, i) for name in names}
        return row

    def __setitem__(self, rel: str, entry: dict[str, Any]) -> None:
        pos = self._index()
        i = pos.get(rel)
        if i is None:
            i = pos[rel] = len(self._paths)
            self._paths.append(rel)
        self._rows[i] = entry
        self.changed.add(rel)
        self.removed.discard(rel)

    def __delitem__(self, rel: str) -> None:
        i = self._index().pop(rel)
        self._paths[i] = None
        self._rows.pop(i, None)
        self._holes += 1
        self.changed.discard(rel)
        self.removed.add(rel)

    def change(self, rel: str, **values: Any) -> None:
        """Set fields of one entry (what the next commit writes)."""
        self[rel] = {**self[rel], **values}

    def value(self, rel: str, name: str, default: Any = None) -> Any:
        """One field of one entry, without making its dict."""
        i = self._index()[rel]
        row = self._rows.get(i)
        if row is not None:
            return row.get(name, default)
        found = self._loaded(name, i)
        return default if found is None else found

    def _loaded(self, name: str, i: int) -> Any:
        """One field of one loaded row: a JSON field's row decoded alone unless its whole column already is."""
        if name in JSON_FIELDS and name not in self._columns:
            raw = self._raw.get(name) or []
            return json.loads(raw[i]) if i < len(raw) and raw[i] is not None else None
        return self._base(name)[i]

    def column(self, *names: str) -> Iterator[tuple[Any, ...]]:
        """(path, value of each named field, None where the entry has none) of every entry, in row order."""
        rows = zip(self._paths, *(self.full_column(name) for name in names))
        return (row for row in rows if row[0] is not None) if self._holes else rows

    def _base(self, name: str) -> list[Any]:
        """A field of every loaded row, decoded once."""
        found = self._columns.get(name)
        if found is None:
            raw = self._raw.get(name) or []
            found = _decoded(name, raw) if name in JSON_FIELDS | BOOL_FIELDS else list(raw)
            self._columns[name] = found
        return found

    def full_column(self, name: str) -> list[Any]:
        """A field of every row (None where the entry has none, or the row is a hole), by row."""
        found = self._base(name)
        if len(found) < len(self._paths):
            found += [None] * (len(self._paths) - len(found))
        for i, row in self._rows.items():
            found[i] = row.get(name)
        return found

    @property
    def paths(self) -> list[str | None]:
        """The path of every row, None for a hole: `full_column`'s rows."""
        return self._paths

    def rows_mentioning(self, name: str, word: str) -> set[int]:
        """The rows whose JSON field `name` may hold `word` (a superset: its text holds it), without decoding
        the rows that cannot."""
        if name in self._columns:
            return set(range(len(self._paths)))
        raw = self._raw.get(name) or []
        found = {i for i, text in enumerate(raw) if text is not None and word in text}
        return found | set(self._rows)  # entries set since the load are decoded dicts: looked at as they are


@dataclass
class Manifest:
    files: Entries = field(default_factory=Entries)
    synced_ns: int = 0  # the file-system time the last walk began
    model: str | None = None  # identity of the model the static vectors came from
    dim: int = 0
    vector_keys: list[str] = field(default_factory=list)  # the text hashes with a static vector
    pending_deletes: list[str] = field(default_factory=list)  # paths still to remove from Whoosh
    parts: dict[str, Any] = field(default_factory=dict)  # Whoosh file name -> (size, mtime, digest) its writer left
    generation: int = 0  # the database's commit this was loaded from or written as

    def meta(self, rel: str) -> dict[str, Any]:
        """The parsed metadata of one valid file."""
        return json.loads(self.files.value(rel, "meta"))

    # ------------------------------------------------------------ sync by stat

    def refresh(self, memories_dir: Path, max_bytes: int = MAX_MEMORY_BYTES, started: int = 0
                ) -> tuple[list[str], list[str], int]:
        """Re-read what changed on disk; returns (changed paths, removed paths, files re-hashed). `started`: the
        file-system time the walk begins (`cortex.index.db.now_ns`), recorded as `synced_ns`."""
        seen, odd_list = walk_memory_stats(str(memories_dir)) if memories_dir.is_dir() else ({}, [])
        odd = dict(odd_list)
        files = self.files
        racy_before = self.synced_ns - RACY_NS
        removed: list[str] = []
        stale: list[str] = []  # changed since the last sync by their stat, or too recent to tell
        matched = 0
        for rel, mtime, size in files.column("mtime", "size"):  # three fields, not a dict for each entry
            stat = seen.get(rel)
            if stat is None:
                if rel not in odd:
                    removed.append(rel)
                continue
            matched += 1
            if mtime != stat.st_mtime_ns or size != stat.st_size or stat.st_mtime_ns >= racy_before:
                stale.append(rel)
        for rel in removed:
            del files[rel]
            self.pending_deletes.append(rel)
        if matched < len(seen):
            stale += [rel for rel in seen if rel not in files]  # new files
        changed: list[str] = []
        rehashed = 0
        for rel, reason in odd.items():  # symbolic links and the like: a problem, never read
            entry = files.get(rel)
            if entry is None or entry.get("error") != reason:
                if entry is not None and "error" not in entry:
                    self.pending_deletes.append(rel)  # a memory replaced by a link leaves the full-text index
                files[rel] = {"mtime": 0, "size": 0, "hash": "", "error": reason, "ft": True}
                changed.append(rel)
                rehashed += 1
        for rel in stale:
            stat = seen[rel]
            old_hash = files.value(rel, "hash") if rel in files else None
            new_entry = read_entry(memories_dir / rel, stat, max_bytes)
            rehashed += 1
            if old_hash is not None and old_hash == new_entry["hash"]:
                if files.value(rel, "mtime") != new_entry["mtime"] or files.value(rel, "size") != new_entry["size"]:
                    files.change(rel, mtime=new_entry["mtime"], size=new_entry["size"])
                continue
            files[rel] = new_entry
            changed.append(rel)
        self.synced_ns = started
        return changed, removed, rehashed

    def metas(self, rels: list[str]) -> list[dict[str, Any]]:
        """The parsed metadata of many valid files, in one decode."""
        try:
            return json.loads("[" + ",".join(self.files.value(rel, "meta") for rel in rels) + "]")
        except ValueError:
            return [json.loads(self.files.value(rel, "meta")) for rel in rels]


def read_entry(path: Path, stat: os.stat_result | None = None, max_bytes: int = MAX_MEMORY_BYTES) -> dict[str, Any]:
    """Read and parse one file into a manifest entry (never raises: a bad file is an entry with an `error`)."""
    if stat is not None and stat.st_size > max_bytes:  # never read: reported from the stat alone
        return {"mtime": stat.st_mtime_ns, "size": stat.st_size, "hash": "", "ft": True,
                "error": too_large(stat.st_size, max_bytes)}
    try:
        raw, info = read_memory_bytes(path, max_bytes)
    except MalformedMemory as exc:
        stat = stat or _lstat(path)
        return {"mtime": stat.st_mtime_ns if stat else 0, "size": stat.st_size if stat else -1, "hash": "",
                "error": exc.reason, "ft": True}
    stat = stat or info
    entry: dict[str, Any] = {"mtime": stat.st_mtime_ns, "size": stat.st_size, "hash": hashlib.sha1(raw).hexdigest()}
    try:
        item = parse_bytes(raw, path)
    except MalformedMemory as exc:
        entry.update(error=exc.reason, ft=True)
        return entry
    meta = item.to_dict()
    for key in ("body", "path"):
        meta.pop(key, None)
    intern = sys.intern  # a few distinct values across 100,000 entries: one string object each
    entry.update(
        id=item.id,
        status=intern(item.status),
        type=intern(item.type),
        branch=intern(item.branch) if item.branch else item.branch,
        links=[(link.rel, link.to, link.strength) for link in item.links],
        title=item.title, priority=item.priority, pinned=item.pinned, tags=[intern(tag) for tag in item.tags],  # LIST_FIELDS
        confidence=item.confidence, created=item.created, updated=item.updated, files=list(item.files),  # BRIEF_FIELDS
        session=_session(item.source),
        meta=json.dumps(meta, ensure_ascii=False, separators=(",", ":")),
        vhash=None if item.type == "code" else text_hash(embed_text(item)),  # source code is never embedded
        ft=False,  # not yet in the full-text index
    )
    return entry


def _session(source: Any) -> str | None:
    """The capture session a memory came from (`source.session`), when it names one."""
    session = source.get("session") if isinstance(source, dict) else None
    return session if isinstance(session, str) and session else None


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except OSError:
        return None


def memory_from_meta(meta: dict[str, Any], path: Path) -> Memory:
    values = dict(meta)
    values["links"] = [Link(link["rel"], link["to"], link.get("strength"), link.get("created"))
                       for link in values.get("links", [])]
    values.setdefault("extra", {})
    return Memory(path=path, **values)


@contextlib.contextmanager
def collecting(on: bool = True) -> Any:
    """The cyclic garbage collector on for a bulk job (a command runs without it: `cortex.__main__.run`):
    Whoosh's writer leaves cycles behind that would otherwise grow a large rebuild's memory."""
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
