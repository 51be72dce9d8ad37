"""Projections: markdown pages rendered from the memories, committed and reviewed in pull requests.

    .cortex/decisions.md           every active decision (and architecture records tagged `decision`/`adr`), by tag
    .cortex/decisions-archive.md   superseded and archived decisions, with what replaced them
    .cortex/active-plan.md         the plan and progress of the current branch

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


def _split_rejected(body: str) -> tuple[str, list[str]]:
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


def _is_decision(memory: Memory) -> bool:
    return memory.type == "decision" or (memory.type == "architecture" and bool(RECORD_TAGS & set(memory.tags)))


def _sort_key(memory: Memory) -> tuple[str, str, str]:
    return (memory.created, memory.title, memory.id)


def _load(store: Store, branch: str | None) -> list[Memory]:
    """Every memory's metadata from the cache; bodies read only for the memories a page shows."""
    from cortex.index import Index

    index = Index(store)
    index.sync(full=False)
    out = []
    for item in index.scan().memories:
        if _is_decision(item) or (item.type in ("plan", "progress") and item.branch == branch and item.status == "active"):
            assert item.path is not None
            try:
                item = store.read(item.path)
            except Exception:
                continue  # changed under us since the sync; the next run picks it up
        out.append(item)
    return out


def build(store: Store, memories: list[Memory] | None = None, branch: str | None = None) -> list[Projection]:
    """Render the three pages from the memories (read from the store unless given)."""
    if branch is None:
        branch = store.current_branch()
    if memories is None:
        memories = _load(store, branch)
    by_id = {m.id: m for m in memories}
    superseded_by: dict[str, list[Memory]] = {}
    for m in memories:
        for link in m.links:
            if link.rel == "supersedes":
                superseded_by.setdefault(link.to, []).append(m)

    def ref(memory: Memory, rel: str = "") -> dict[str, str]:
        return {"id": memory.id, "title": memory.title, "link": _link(store, memory), "rel": rel.replace("_", " ")}

    def decision(m: Memory) -> dict[str, Any]:
        rationale, rejected = _split_rejected(m.body)
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

    active = sorted((m for m in memories if _is_decision(m) and m.status == "active"), key=_sort_key)
    groups: dict[str, list[dict[str, Any]]] = {}
    for m in active:
        tags = [t for t in m.tags if t not in RECORD_TAGS]  # the first tag, as written, is the group
        groups.setdefault(tags[0] if tags else "general", []).append(decision(m))
    archived = sorted((m for m in memories if _is_decision(m) and m.status != "active"), key=_sort_key)
    plans = sorted((m for m in memories if m.type == "plan" and m.status == "active" and m.branch == branch), key=_sort_key)
    progress = sorted((m for m in memories if m.type == "progress" and m.status == "active" and m.branch == branch),
                      key=_sort_key)
    env = _environment(store)
    context: dict[str, dict[str, Any]] = {
        "decisions.md": {"groups": [{"name": name, "decisions": groups[name]} for name in sorted(groups)]},
        "decisions-archive.md": {"decisions": [decision(m) for m in archived]},
        "active-plan.md": {
            "branch": branch,
            "plans": [{"id": m.id, "title": m.title, "date": _date(m), "link": _link(store, m), "body": m.body.strip()}
                      for m in plans],
            "progress": [{"id": m.id, "title": m.title, "date": _date(m),
                          "summary": " ".join(m.body.split())[:200].strip()} for m in progress],
        },
    }
    return [Projection(name, store.root / name, _tidy(env.get_template(f"{name}.j2").render(**context[name])))
            for name in PAGES]


def write(store: Store, projections: list[Projection]) -> list[Path]:
    """Write the pages that changed; returns their paths."""
    changed = []
    for projection in projections:
        if not projection.is_current():
            atomic_write(projection.path, projection.text)
            changed.append(projection.path)
    return changed


def stale(store: Store) -> list[Path]:
    """The pages that do not match the memories (what `cortex project --check` reports)."""
    return [p.path for p in build(store) if not p.is_current()]
