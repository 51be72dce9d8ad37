"""The manifest: what the cache knows about each memory file.

`cache/manifest.bin` maps each file (path relative to `memories/`) to its
stat (mtime_ns, size), content hash, the hash of the text that was embedded,
the fields recall filters on (id, status, type, branch, links) and those
`cortex list` shows (title, priority, pinned, tags), its parsed
metadata as a JSON string decoded only when needed (or the reason the file
is malformed) and whether the full-text index holds this version. It is the
cache's commit point: written last, atomically, after Whoosh and the vectors.

It is stored with `marshal` (this Python's own format, tagged with its
magic number) after a CRC-32 of the payload: loading 10,000 entries takes
~25 ms against ~110 ms for JSON, and a hook pays that on every run. A cache
from another Python, a truncated, garbage or bit-flipped file is simply
rebuilt. It also records the stat of the Whoosh files and of the vectors as
this writer left them (`parts`), so a part changed behind cortex's back is
noticed by a stat and rebuilt.

A symbolic link, a `.md` that is not a regular file and a file over
`store.max_memory_bytes` are entries with an `error` (reported by status,
never read past the stat).

`refresh()` brings it in step with the files by stat alone, re-reading only
files whose (mtime, size) changed — or whose mtime is so recent that an edit
within the same clock tick could hide (git's "racy" rule).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import os
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from cortex.errors import MalformedMemory
from cortex.memory import Link, Memory
from cortex.store import MAX_MEMORY_BYTES, parse_bytes, read_memory_bytes, too_large, walk_memory_files

# 6: issue 21 (the duplicate check, the pages and `cortex serve` read the cache); 7: list's fields; 8: the
# prior's and the briefing's fields
SCHEMA = 8
MAGIC = b"CXM" + bytes([SCHEMA]) + importlib.util.MAGIC_NUMBER
UPGRADABLE = b"CXM" + bytes([6]) + importlib.util.MAGIC_NUMBER  # schema 6 (one marshalled dict): fields added in place
CHUNKED = b"CXM" + bytes([7]) + importlib.util.MAGIC_NUMBER  # schema 7 (today's layout): fields added in place
LIST_FIELDS = ("title", "priority", "pinned", "tags")  # and `session` (`source.session`: recall's session lift)
BRIEF_FIELDS = ("confidence", "created", "updated", "files")  # the ranking prior and the briefing's checks
CHUNK = 5000  # entries per marshalled piece of the manifest file
RACY_NS = 2_000_000_000  # files modified within 2 s of the last sync are re-hashed next time
# A sync's time is when its walk began, less this: a file or folder changed during the walk (perhaps after the
# walk looked at it) then has a time at or after the sync's, even with the kernel's file times, which lag the
# clock by up to a tick, so a reader that trusts a watcher's sync (`Index._watched`) walks instead.
CLOCK_SLACK_NS = 50_000_000


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


@dataclass
class Manifest:
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    synced_ns: int = 0
    model: str | None = None  # identity of the model the vectors came from
    dim: int = 0
    vector_keys: list[str] = field(default_factory=list)  # row i holds the vector of text hash vector_keys[i]
    pending_deletes: list[str] = field(default_factory=list)  # paths still to remove from Whoosh
    parts: dict[str, Any] = field(default_factory=dict)  # part name -> its stat as the last writer left it
    upgraded: bool = False  # read from an older schema and given its missing fields: the next sync writes it back

    @classmethod
    def load(cls, path: Path) -> Manifest | None:
        """The committed manifest, or None when missing, unreadable, damaged or of another schema or Python."""
        try:
            raw = path.read_bytes()
            if raw.startswith(UPGRADABLE):
                return cls._upgraded(raw)
            if raw.startswith(CHUNKED):
                older = cls._chunked(raw)
                return None if older is None else older._filled()
            return cls._chunked(raw) if raw.startswith(MAGIC) else None
        except Exception:  # missing, truncated, garbage: all mean "rebuild"
            return None

    @classmethod
    def _chunked(cls, raw: bytes) -> Manifest | None:
        """A manifest in the chunked layout (this schema's or 7's), or None when its CRC does not match."""
        body = memoryview(raw)[len(MAGIC):-4]
        if zlib.crc32(body) != int.from_bytes(raw[-4:], "little"):
            return None
        pieces = _pieces(body)
        data = next(pieces)
        files: dict[str, dict[str, Any]] = {}
        for _ in range(int(data["chunks"])):
            files.update(next(pieces))
        return cls._of(data, files)

    @classmethod
    def _of(cls, data: dict[str, Any], files: dict[str, dict[str, Any]]) -> Manifest:
        return cls(files=files, synced_ns=int(data["synced_ns"]), model=data["model"], dim=int(data["dim"]),
                   vector_keys=list(data["vector_keys"]), pending_deletes=list(data["pending_deletes"]),
                   parts=dict(data.get("parts") or {}))

    @classmethod
    def _upgraded(cls, raw: bytes) -> Manifest | None:
        """A schema-6 manifest (one marshalled dict after a CRC) with list's fields and the session added from each
        entry's metadata: no rebuild of the full-text index and vectors."""
        start = len(UPGRADABLE) + 4
        if zlib.crc32(raw[start:]) != int.from_bytes(raw[len(UPGRADABLE):start], "little"):
            return None
        data = marshal.loads(raw[start:])
        return cls._of(data, data["files"])._filled()

    def _filled(self) -> Manifest:
        """An older schema's manifest with the fields it lacked filled from each entry's metadata (one decode
        each, once): no rebuild of the full-text index and vectors. The next sync writes it back."""
        for entry in self.files.values():
            if "error" not in entry:
                meta = json.loads(entry["meta"])
                entry.update({key: meta[key] for key in LIST_FIELDS})
                entry.update({key: meta.get(key) for key in BRIEF_FIELDS})
                entry["files"] = list(entry["files"] or [])
                entry["session"] = _session(meta.get("source"))
        self.upgraded = True
        return self

    @staticmethod
    def damaged(path: Path) -> bool:
        """Whether an unloadable manifest file is damage (not just missing, or made by another cortex or Python)."""
        try:
            with open(path, "rb") as handle:
                head = handle.read(len(MAGIC))
        except OSError:
            return False
        return head == MAGIC or not head.startswith(MAGIC[:3])

    def dumps(self) -> bytes:
        return b"".join(self.dump_parts())

    def dump_parts(self) -> Iterator[bytes]:
        """The file, piece by piece: the magic, the header and the entries in marshalled chunks of `CHUNK`, each
        after its length, then the CRC-32 of all that. Written as it is made (`atomic_write` takes the pieces):
        one marshalled payload of 100,000 entries was 90 MB more at the top of a rebuild's memory."""
        crc = 0

        def framed(data: bytes) -> bytes:
            nonlocal crc
            piece = len(data).to_bytes(4, "little") + data
            crc = zlib.crc32(piece, crc)
            return piece

        items = list(self.files.items())
        yield MAGIC
        yield framed(marshal.dumps({
            "synced_ns": self.synced_ns,
            "model": self.model,
            "dim": self.dim,
            "vector_keys": self.vector_keys,
            "pending_deletes": sorted(set(self.pending_deletes)),
            "parts": self.parts,
            "chunks": (len(items) + CHUNK - 1) // CHUNK,
        }))
        for start in range(0, len(items), CHUNK):
            yield framed(marshal.dumps(dict(items[start:start + CHUNK])))
        yield crc.to_bytes(4, "little")

    def meta(self, rel: str) -> dict[str, Any]:
        """The parsed metadata of one valid file."""
        return json.loads(self.files[rel]["meta"])

    # ------------------------------------------------------------ sync by stat

    def refresh(self, memories_dir: Path, max_bytes: int = MAX_MEMORY_BYTES) -> tuple[list[str], list[str], int]:
        """Re-read what changed on disk; returns (changed paths, removed paths, files re-hashed)."""
        started = time.time_ns()
        seen, odd = _walk(memories_dir) if memories_dir.is_dir() else ({}, {})
        changed: list[str] = []
        removed = [rel for rel in self.files if rel not in seen and rel not in odd]
        for rel in removed:
            del self.files[rel]
            self.pending_deletes.append(rel)
        rehashed = 0
        for rel, reason in odd.items():  # symbolic links and the like: a problem, never read
            entry = self.files.get(rel)
            if entry is None or entry.get("error") != reason:
                if entry is not None and "error" not in entry:
                    self.pending_deletes.append(rel)  # a memory replaced by a link leaves the full-text index
                self.files[rel] = {"mtime": 0, "size": 0, "hash": "", "error": reason, "ft": True}
                changed.append(rel)
                rehashed += 1
        racy_before = self.synced_ns - RACY_NS
        for rel, stat in seen.items():
            entry = self.files.get(rel)
            if (
                entry is not None
                and entry["mtime"] == stat.st_mtime_ns
                and entry["size"] == stat.st_size
                and stat.st_mtime_ns < racy_before
            ):
                continue
            new_entry = read_entry(memories_dir / rel, stat, max_bytes)
            rehashed += 1
            if entry is not None and entry.get("hash") == new_entry["hash"]:
                entry["mtime"], entry["size"] = new_entry["mtime"], new_entry["size"]
                continue
            self.files[rel] = new_entry
            changed.append(rel)
        self.synced_ns = started - CLOCK_SLACK_NS
        return changed, removed, rehashed

    # ------------------------------------------------------------ views

    def memories(self, memories_dir: Path) -> tuple[list[Memory], list[tuple[Path, str]]]:
        """Every valid memory (body not loaded) and every (path, reason) problem, in path order."""
        problems: list[tuple[Path, str]] = []
        seen: dict[str, Path] = {}
        valid: list[tuple[str, Path]] = []
        for rel in sorted(self.files):
            entry = self.files[rel]
            path = memories_dir / rel
            if "error" in entry:
                problems.append((path, entry["error"]))
                continue
            if entry["id"] in seen:
                problems.append((path, f"duplicate id {entry['id']} (also in {seen[entry['id']]})"))
                continue
            seen[entry["id"]] = path
            valid.append((rel, path))
        metas = self.metas([rel for rel, _ in valid])
        return [memory_from_meta(meta, path) for meta, (_, path) in zip(metas, valid)], problems

    def metas(self, rels: list[str]) -> list[dict[str, Any]]:
        """The parsed metadata of many valid files, in one decode (~1.7x faster than `meta` for each)."""
        try:
            return json.loads("[" + ",".join(self.files[rel]["meta"] for rel in rels) + "]")
        except ValueError:
            return [json.loads(self.files[rel]["meta"]) for rel in rels]


def _pieces(body: memoryview) -> Iterator[Any]:
    """The marshalled pieces of a manifest's body, each after its 4-byte length."""
    at = 0
    while at < len(body):
        size = int.from_bytes(body[at:at + 4], "little")
        yield marshal.loads(body[at + 4:at + 4 + size])
        at += 4 + size


def _walk(memories_dir: Path) -> tuple[dict[str, os.stat_result], dict[str, str]]:
    """`Store.walk`'s entries with their stat: {relative path: stat} of the memory files, {relative path:
    reason} of the links and other odd entries."""
    files, odd = walk_memory_files(str(memories_dir))
    seen: dict[str, os.stat_result] = {}
    for _, name, prefix, entry in files:
        try:
            seen[prefix + name] = entry.stat(follow_symlinks=False)
        except OSError:
            continue  # vanished while we looked
    return seen, dict(odd)


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
