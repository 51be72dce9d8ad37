"""Projections: markdown pages rendered from the memories, committed and reviewed in pull requests.

    .cortex/decisions.md           every active decision (and architecture records tagged `decision`/`adr`), by tag
    .cortex/decisions-archive.md   superseded and archived decisions, with what replaced them
    .cortex/active-plan.md         the active plans and progress notes, by the branch they were made on

Rendered with Jinja2 from `templates/*.md.j2`; a project overrides one by
placing a file of the same name in `.cortex/templates/`. Byte-deterministic:
the same memories give the same bytes whatever the file order, mtimes,
locale or clock — everything is sorted by plain code-point order, dates come
from the memories, and nothing says when it was generated. So a pull
request's diff of `decisions.md` shows exactly the decisions that changed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cortex.files import atomic_write
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

    def is_current(self) -> bool:
        try:
            return self.path.read_text(encoding="utf-8") == self.text
        except OSError:
            return False


def _templates_dir() -> Path:
    """The packaged templates (the repository's top-level `templates/`)."""
    from importlib import resources

    return Path(str(resources.files("cortex.templates")))


def _environment(store: Store) -> Any:
    import jinja2

    search = [str(store.root / "templates"), str(_templates_dir())]
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(search),
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def _tidy(text: str) -> str:
    """Trailing spaces off, at most one blank line in a row, one final newline."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
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


def _load(store: Store, index: Any = None) -> tuple[list[Memory], dict[str, Memory]]:
    """The memories the pages show, read in full; other memories (link targets) from the cache on demand."""
    from cortex.index import Index
    from cortex.index.manifest import memory_from_meta

    index = (index or Index(store)).ensure()
    out = []
    for rel, entry in index.records().items():
        kind = entry["type"]
        if kind == "architecture":
            if not RECORD_TAGS & set(index.manifest.meta(rel).get("tags", ())):
                continue
        elif kind != "decision" and not (kind in ("plan", "progress") and entry["status"] == "active"):
            continue
        path = store.memories_dir / rel
        try:
            out.append(store.read(path))
        except Exception:  # changed under us since the sync; the next run picks it up
            out.append(memory_from_meta(index.manifest.meta(rel), path))
    return out, _Lookup(index, out)


def build(store: Store, memories: list[Memory] | None = None, index: Any = None) -> list[Projection]:
    """Render the three pages from the memories (read through the cache unless given).

    Every page is a function of the memory files alone — not of the checked-out branch, the clock or the
    file order — so regenerating on a commit whose pages are current writes nothing, and a checkout or a
    merge never finds a page to rewrite.
    """
    by_id: dict[str, Memory]
    if memories is None:
        memories, by_id = _load(store, index)
    else:
        by_id = {m.id: m for m in memories}
    superseded_by: dict[str, list[Memory]] = {}
    for m in memories:
        for link in m.links:
            if link.rel == "supersedes":
                superseded_by.setdefault(link.to, []).append(m)

    def ref(memory: Memory, rel: str = "") -> dict[str, str]:
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

    active = sorted((m for m in memories if is_decision(m) and m.status == "active"), key=_sort_key)
    groups: dict[str, list[dict[str, Any]]] = {}
    for m in active:
        tags = [t for t in m.tags if t not in RECORD_TAGS]  # the first tag, as written, is the group
        groups.setdefault(tags[0] if tags else "general", []).append(decision(m))
    archived = sorted((m for m in memories if is_decision(m) and m.status != "active"), key=_sort_key)
    env = _environment(store)
    context: dict[str, dict[str, Any]] = {
        "decisions.md": {"groups": [{"name": name, "decisions": groups[name]} for name in sorted(groups)]},
        "decisions-archive.md": {"decisions": [decision(m) for m in archived]},
        "active-plan.md": {"branches": _branches(store, memories)},
    }
    return [Projection(name, store.root / name, _tidy(env.get_template(f"{name}.j2").render(**context[name])))
            for name in PAGES]


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


def refresh(store: Store, index: Any = None) -> list[Path]:
    """Regenerate the pages from the memories; returns the paths that changed."""
    from cortex.index import Index

    index = (index or Index(store)).ensure()
    if known_current(store, index):
        return []
    return write(store, build(store, index=index), index)


def affected_by(types: Any) -> bool:
    """Whether memories of these types appear on a page (a context or gotcha memory changes none)."""
    return bool(set(types) & PAGE_TYPES)


def stale(store: Store, index: Any = None) -> list[Path]:
    """The pages that do not match the memories (what `cortex project --check` reports)."""
    from cortex.index import Index

    index = (index or Index(store)).ensure()
    if known_current(store, index):
        return []
    pages = build(store, index=index)
    result = [p.path for p in pages if not p.is_current()]
    if not result:
        _save_stamp(store, pages, index)
    return result


# A stamp in the cache lets a check with nothing changed skip rendering: a hash of what the pages
# depend on (the relevant memories' content hashes, the branch, the templates, cortex's version) and
# the stat of each page as last rendered. Rendering 10,000 memories takes ~0.8 s; the stamp ~0.1 s.

def _inputs_digest(store: Store, index: Any = None) -> str | None:
    import hashlib

    from cortex import __version__
    from cortex.index import Index

    index = (index or Index(store)).ensure()
    if index.manifest is None:
        return None
    h = hashlib.sha1(f"{__version__}\0".encode())
    for folder in (store.root / "templates", _templates_dir()):
        if folder.is_dir():
            for path in sorted(folder.glob("*.j2")):
                stat = path.stat()
                h.update(f"{path}\0{stat.st_mtime_ns}\0{stat.st_size}\0".encode())
    for rel in sorted(index.manifest.files):
        entry = index.manifest.files[rel]
        if "error" in entry or entry["type"] in PAGE_TYPES:
            h.update(f"{rel}\0{entry['hash']}\0".encode())
    return h.hexdigest()


def _page_stats(store: Store) -> dict[str, list[int]]:
    out = {}
    for name in PAGES:
        try:
            stat = (store.root / name).stat()
        except OSError:
            continue
        out[name] = [stat.st_mtime_ns, stat.st_size, stat.st_ino]
    return out


def _save_stamp(store: Store, pages: list[Projection], index: Any = None) -> None:
    import json

    if not all(page.is_current() for page in pages):
        return
    digest = _inputs_digest(store, index)
    if digest is None:
        return
    try:
        atomic_write(store.cache_dir / "projections.stamp", json.dumps({"inputs": digest, "pages": _page_stats(store)}),
                     durable=False)
    except OSError:
        pass


def known_current(store: Store, index: Any = None) -> bool:
    """True when nothing the pages depend on changed since they were last rendered and found current."""
    import json

    try:
        stamp = json.loads((store.cache_dir / "projections.stamp").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return stamp.get("pages") == _page_stats(store) and stamp.get("inputs") == _inputs_digest(store, index)
