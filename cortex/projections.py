"""Projections: markdown pages rendered from the memories, committed and reviewed in pull requests.

Byte-deterministic (sorted by code point, dates from the memories, no generation time) so a pull request's
diff shows exactly the decisions that changed. Templates can be overridden in `.cortex/templates/`.
docs/git.md.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cortex.files import atomic_write, read_json
from cortex.memory import Memory
from cortex.store import Store

PAGES = ("decisions.md", "decisions-archive.md", "active-plan.md")
PAGE_TYPES = frozenset({"decision", "architecture", "plan", "progress"})  # the types a page can show
RECORD_TAGS = {"decision", "adr"}  # an architecture memory with one of these tags is a decision record


@dataclass
class Projection:
    name: str
    path: Path
    text: str
    named: frozenset[str] = frozenset()  # the ids of the memories its entries link to (their titles and files)

    def is_current(self) -> bool:
        """The page on disk says what this one says: the same bytes, or what git's union merge makes of them."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError:
            return False
        return text == self.text or _entries(text) == _entries(self.text)


def _entries(text: str) -> list[tuple[str, ...]]:
    """A page as the set of its entries (each heading with the headings above it and its lines, sorted, blank lines
    dropped): what git's union merge of two branches' pages keeps whatever order it puts them in (docs/git.md)."""
    path: list[str] = []
    blocks: list[tuple[str, ...]] = []
    lines: list[str] = []

    def close() -> None:
        blocks.append((*path, "", *sorted(lines)))
        lines.clear()

    for line in text.splitlines():
        if not line.strip():
            continue
        level = len(line) - len(line.lstrip("#"))
        if level and line[level:level + 1] == " ":
            close()
            del path[level - 1:]
            path.extend([""] * (level - 1 - len(path)) + [line])
        else:
            lines.append(line)
    close()
    return sorted(set(blocks))


def _templates_dir() -> Path:
    """The packaged templates (the repository's top-level `templates/`)."""
    from importlib import resources

    return Path(str(resources.files("cortex.templates")))


def _environment(store: Store) -> Any:
    import jinja2

    search = [str(store.root / "templates"), str(_templates_dir())]
    return jinja2.Environment(loader=jinja2.FileSystemLoader(search), autoescape=False, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)


def _tidy(text: str) -> str:
    """Control and bidi characters off (a page is read in terminals and reviewed in diffs: `strip_controls`),
    trailing spaces off, at most one blank line in a row, one final newline."""
    from cortex.text import strip_controls

    lines = [line.rstrip() for line in strip_controls(text.replace("\r\n", "\n")).split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
    return text.strip("\n") + "\n"


def split_rejected(body: str) -> tuple[str, list[str]]:
    """Separate "Rejected: a, b" lines (and bullet lists under a "Rejected:" line) from the rationale."""
    keep: list[str] = []
    rejected: list[str] = []
    in_list = False
    for line in body.strip().splitlines():
        stripped = line.strip()
        match = re.match(r"(?i)^(rejected|alternatives? rejected|rejected alternatives?)\s*:\s*(.*)$", stripped)
        if match:
            rest = match.group(2).strip()
            if rest:
                rejected.append(rest.rstrip("."))
                in_list = False
            else:
                in_list = True
            continue
        if in_list and re.match(r"^[-*]\s+", stripped):
            rejected.append(re.sub(r"^[-*]\s+", "", stripped).rstrip("."))
            continue
        in_list = False
        keep.append(line.rstrip())
    return "\n".join(keep).strip(), rejected


def _date(memory: Memory) -> str:
    return (memory.created or memory.updated or "")[:10]


def _link(store: Store, memory: Memory) -> str:
    assert memory.path is not None
    return Path(os.path.relpath(memory.path, store.root)).as_posix()


def is_decision(memory: Memory) -> bool:
    return memory.type == "decision" or (memory.type == "architecture" and bool(RECORD_TAGS & set(memory.tags)))


def _sort_key(memory: Memory) -> tuple[str, str, str]:
    return (memory.created, memory.title, memory.id)


class _Lookup(dict):  # type: ignore[type-arg]
    """id -> Memory for link targets, built from the cache's metadata only when a link asks."""

    def __init__(self, index: Any, loaded: list[Memory]) -> None:
        super().__init__((m.id, m) for m in loaded)
        self.index = index
        self.rel_of = index.rel_of_id()

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or key in self.rel_of

    def __missing__(self, key: str) -> Memory:
        from cortex.index.manifest import memory_from_meta

        rel = self.rel_of[key]
        item = memory_from_meta(self.index.manifest.meta(rel), self.index.store.memories_dir / rel)
        self[key] = item
        return item


PAGE_KINDS = {  # the memory types each page is made from (a page also shows the titles of what they link to)
    "decisions.md": frozenset({"decision", "architecture"}),
    "decisions-archive.md": frozenset({"decision", "architecture"}),
    "active-plan.md": frozenset({"plan", "progress"}),
}


def _load(store: Store, index: Any = None, kinds: frozenset[str] = PAGE_TYPES) -> tuple[list[Memory], dict[str, Memory]]:
    """The memories the pages show, metadata from the cache and bodies from the files; other memories (link
    targets) from the cache on demand."""
    from cortex.guard import redacted
    from cortex.index import Index
    from cortex.index.cache import read_body
    from cortex.index.manifest import memory_from_meta

    index = (index or Index(store)).ensure()
    records = index.records()
    rels = [rel for rel, entry in records.items() if entry["type"] in kinds and entry["status"] != "proposed" and (
        entry["type"] in ("decision", "architecture") or entry["status"] == "active")]  # a proposal: not yet
    out = []
    for rel, meta in zip(rels, index.manifest.metas(rels)):  # one decode for all of them
        if meta["type"] == "architecture" and not RECORD_TAGS & set(meta.get("tags", ())):
            continue
        item = memory_from_meta(meta, store.memories_dir / rel)
        if rel in records.revived:  # the memory of a supersession cycle every reader takes as active
            item.status = "active"
        item.body = redacted(read_body(store.memories_dir / rel))  # a hand-committed secret is not copied into a page
        out.append(item)
    return out, _Lookup(index, out)


def build(store: Store, memories: list[Memory] | None = None, index: Any = None,
          names: Any = PAGES) -> list[Projection]:
    """Render the pages `names` from the memories (read through the cache unless given): a function of the memory
    files alone, so a checkout or a merge never finds a page to rewrite."""
    names = [name for name in PAGES if name in set(names)]
    by_id: dict[str, Memory]
    if memories is None:
        memories, by_id = _load(store, index, frozenset().union(*(PAGE_KINDS[name] for name in names)))
    else:
        by_id = {m.id: m for m in memories}
    superseded_by: dict[str, list[Memory]] = {}
    for m in memories:
        for link in m.links:
            if link.rel == "supersedes":
                superseded_by.setdefault(link.to, []).append(m)

    named: set[str] = set()

    def ref(memory: Memory, rel: str = "") -> dict[str, str]:
        named.add(memory.id)
        return {"id": memory.id, "title": memory.title, "link": _link(store, memory), "rel": rel.replace("_", " ")}

    def decision(m: Memory) -> dict[str, Any]:
        rationale, rejected = split_rejected(m.body)
        related = sorted(
            (ref(by_id[link.to], link.rel) for link in m.links if link.to in by_id and link.rel != "supersedes"),
            key=lambda r: (r["rel"], r["title"], r["id"]),
        )
        supersedes = sorted((ref(by_id[l.to]) for l in m.links if l.rel == "supersedes" and l.to in by_id),
                            key=lambda r: (r["title"], r["id"]))
        return {
            "id": m.id, "title": m.title, "date": _date(m), "branch": m.branch, "kind": m.type,
            "priority": m.priority, "pinned": m.pinned, "link": _link(store, m), "rationale": rationale,
            "rejected": rejected, "related": related, "supersedes": supersedes, "status": m.status,
            "superseded_by": sorted((ref(x) for x in superseded_by.get(m.id, [])), key=lambda r: (r["title"], r["id"])),
        }

    def current() -> dict[str, Any]:
        groups: dict[str, list[dict[str, Any]]] = {}
        for m in sorted((m for m in memories if is_decision(m) and m.status == "active"), key=_sort_key):
            tags = [t for t in m.tags if t not in RECORD_TAGS]  # the first tag, as written, is the group
            groups.setdefault(tags[0] if tags else "general", []).append(decision(m))
        return {"groups": [{"name": name, "decisions": groups[name]} for name in sorted(groups)]}

    def archive() -> dict[str, Any]:
        archived = sorted((m for m in memories if is_decision(m) and m.status != "active"), key=_sort_key)
        return {"decisions": [decision(m) for m in archived]}

    env = _environment(store)
    context = {"decisions.md": current, "decisions-archive.md": archive,
               "active-plan.md": lambda: {"branches": _branches(store, memories)}}
    pages = []
    for name in names:
        named.clear()
        text = _tidy(env.get_template(f"{name}.j2").render(**context[name]()))
        pages.append(Projection(name, store.root / name, text, frozenset(named)))
    return pages


def _branches(store: Store, memories: list[Memory]) -> list[dict[str, Any]]:
    """The active plans and progress notes of each branch they were made on, branches by name."""
    by_branch: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for m in sorted(memories, key=_sort_key):
        if m.type not in ("plan", "progress") or m.status != "active":
            continue
        branch = by_branch.setdefault(m.branch or "", {"plans": [], "progress": []})
        if m.type == "plan":
            branch["plans"].append({"id": m.id, "title": m.title, "date": _date(m), "link": _link(store, m),
                                    "body": m.body.strip()})
        else:
            branch["progress"].append({"id": m.id, "title": m.title, "date": _date(m),
                                       "summary": " ".join(m.body.split())[:200].strip()})
    return [{"name": name or None, **lists} for name, lists in sorted(by_branch.items())]


def write(store: Store, projections: list[Projection], index: Any = None) -> list[Path]:
    """Write the pages that changed; returns their paths. Remembers what it rendered (see `known_current`)."""
    changed = []
    for projection in projections:
        if not projection.is_current():
            atomic_write(projection.path, projection.text)
            changed.append(projection.path)
    _save_stamp(store, projections, index)
    return changed


def _unknown(store: Store, index: Any) -> tuple[Any, list[Projection]]:
    """The synced index, and the pages not known to be current, rendered."""
    from cortex.index import Index

    index = (index or Index(store)).ensure()
    names = [name for name in PAGES if name not in _known(store, index)]
    return index, build(store, index=index, names=names) if names else []


def refresh(store: Store, index: Any = None) -> list[Path]:
    """Regenerate the pages whose memories changed; returns the paths that changed."""
    index, pages = _unknown(store, index)
    return write(store, pages, index) if pages else []


def affected_by(types: Any) -> bool:
    """Whether memories of these types appear on a page (a context or gotcha memory changes none)."""
    return bool(set(types) & PAGE_TYPES)


def stale(store: Store, index: Any = None) -> list[Path]:
    """The pages that do not match the memories (what `cortex project --check` reports)."""
    index, pages = _unknown(store, index)
    if not pages:
        return []
    _save_stamp(store, [p for p in pages if p.is_current()], index)
    return [p.path for p in pages if not p.is_current()]


# A stamp in the cache lets a check with nothing changed skip rendering: per page, a hash of its inputs (its
# types' memories, the memories it links to, templates, version) and its stat as last rendered.

def _inputs_digests(store: Store, index: Any = None) -> dict[str, str] | None:
    import hashlib

    from cortex import __version__
    from cortex.index import Index

    index = (index or Index(store)).ensure()
    if index.manifest is None:
        return None
    common = hashlib.sha1(f"{__version__}\0".encode())
    for folder in (store.root / "templates", _templates_dir()):
        if folder.is_dir():
            for path in sorted(folder.glob("*.j2")):
                stat = path.stat()
                common.update(f"{path}\0{stat.st_mtime_ns}\0{stat.st_size}\0".encode())
    by_kinds = {kinds: common.copy() for kinds in set(PAGE_KINDS.values())}
    for rel, kind, error, digest in sorted(index.manifest.files.column("type", "error", "hash")):
        if kind == "architecture" and not any(f'"{tag}"' in index.manifest.files.value(rel, "meta") for tag in RECORD_TAGS):
            continue  # not a decision record (no `decision`/`adr` tag, nor the word in its metadata): on no page
        for kinds, h in by_kinds.items():
            if error is not None or kind in kinds:
                h.update(f"{rel}\0{digest}\0".encode())
    return {name: by_kinds[kinds].hexdigest() for name, kinds in PAGE_KINDS.items()}


def _page_stat(store: Store, name: str) -> list[int] | None:
    try:
        stat = (store.root / name).stat()
    except OSError:
        return None
    return [stat.st_mtime_ns, stat.st_size, stat.st_ino]


def _read_stamp(store: Store) -> dict[str, Any]:
    stamp = read_json(store.cache_dir / "projections.stamp")
    pages = stamp.get("pages") if isinstance(stamp, dict) else None
    return pages if isinstance(pages, dict) and all(isinstance(v, dict) for v in pages.values()) else {}


def _save_stamp(store: Store, pages: list[Projection], index: Any = None) -> None:
    """Record the pages that are current (the others keep what they had: checked again next time)."""
    import json

    from cortex.index import Index

    current = [page for page in pages if page.is_current()]
    if not current:
        return
    index = (index or Index(store)).ensure()
    digests = _inputs_digests(store, index)
    if digests is None:
        return
    stamp = _read_stamp(store)
    for page in current:
        stamp[page.name] = {"inputs": digests[page.name] + _named_digest(index, page.named),
                            "named": sorted(page.named), "stat": _page_stat(store, page.name)}
    with contextlib.suppress(OSError):
        atomic_write(store.cache_dir / "projections.stamp", json.dumps({"pages": stamp}), durable=False)


def _known(store: Store, index: Any = None) -> set[str]:
    """The pages whose inputs did not change since they were last rendered and found current."""
    stamp = _read_stamp(store)
    if not stamp:
        return set()
    from cortex.index import Index

    index = (index or Index(store)).ensure()
    digests = _inputs_digests(store, index) or {}
    return {name for name in PAGES if name in stamp and name in digests and stamp[name].get("stat") == _page_stat(
        store, name) and stamp[name].get("inputs") == digests[name] + _named_digest(index, stamp[name].get("named"))}


def _named_digest(index: Any, ids: Any) -> str:
    """The state of the memories a page named as linked (a linked gotcha removed or retitled changes the page)."""
    import hashlib

    rel_of = index.rel_of_id() if ids else {}
    h = hashlib.sha1()
    for memory_id in sorted(ids or ()):
        rel = rel_of.get(str(memory_id))
        h.update(f"{memory_id}\0{rel}\0{index.manifest.files.value(rel, 'hash') if rel else ''}\0".encode())
    return ":" + h.hexdigest()


def known_current(store: Store, index: Any = None) -> bool:
    """True when nothing the pages depend on changed since they were last rendered and found current."""
    return _known(store, index) == set(PAGES)
