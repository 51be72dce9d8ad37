"""Every generation of a decision: the memories a memory replaced and those that replaced it (`supersedes`
links, both ways), newest first, for `cortex show` and MCP `cortex_get_memory`."""

from __future__ import annotations

from typing import Any

MOST = 100  # generations walked at most, either way


def generations(index: Any, memory_id: str) -> list[dict[str, Any]]:
    """id, title, status, updated of each generation of `memory_id`, newest first (itself included); just
    itself when nothing replaced it and it replaced nothing."""
    records, rel_of_id = index.records(), index.rel_of_id()
    replaces: dict[str, list[str]] = {}
    replaced_by: dict[str, list[str]] = {}
    for _rel, ident, links in records.column("id", "links"):
        for rel, to, _strength in links or ():
            if rel == "supersedes" and to in rel_of_id and to != ident:
                replaces.setdefault(ident, []).append(to)
                replaced_by.setdefault(to, []).append(ident)
    seen = {memory_id}
    newer, older = _walk(memory_id, replaced_by, seen), _walk(memory_id, replaces, seen)
    out = []
    for ident in [*reversed(newer), memory_id, *older]:
        rel = rel_of_id.get(ident)
        if rel is not None:
            out.append({"id": ident, "title": records.value(rel, "title"), "status": records.value(rel, "status"),
                        "updated": records.value(rel, "updated")})
    return out


def _walk(start: str, step: dict[str, list[str]], seen: set[str]) -> list[str]:
    """The ids reached from `start` along `step`, nearest first, each once."""
    out: list[str] = []
    todo = list(step.get(start, ()))
    while todo and len(out) < MOST:
        ident = todo.pop(0)
        if ident in seen:
            continue
        seen.add(ident)
        out.append(ident)
        todo += step.get(ident, ())
    return out


def lines(history: list[dict[str, Any]], memory_id: str) -> list[str]:
    """The history as `cortex show` prints it (nothing when there is one generation)."""
    if len(history) < 2:
        return []
    out = ["history (newest first):"]
    for row in history:
        here = "  <- this one" if row["id"] == memory_id else ""
        out.append(f"  {row['id']}  {row['status']:<10}  {(row['updated'] or '')[:10]}  {row['title']}{here}")
    return out
