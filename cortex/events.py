"""The library's entry points for the two things that happen to a memory store, which every edge (CLI, hooks,
`cortex serve`, MCP) calls: **memories changed** (`memories_changed`: links, projections, AGENTS.md, staging,
the upkeep) and **what a prompt gets** (`prompt_context`: recall's one relevance rule within the token budget).
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from cortex.errors import CortexError, QueryRefused
from cortex.files import read_json
from cortex.guard import redacted
from cortex.index import Indexes
from cortex.layout import catch_up_file
from cortex.memory import Link, Memory, title_from_text
from cortex.store import Store, iter_stores
from cortex.text import FRAME_TOKENS, INJECTED_MARK, estimate_tokens, fit_line

UPKEEP = ("detached", "none")


@dataclass
class Changes:
    """What `memories_changed` did that its later steps and callers go on from."""

    linked: int = 0
    pages: list[Path] = field(default_factory=list)
    agents: str | None = None


def memories_changed(store: Store, indexes: Indexes, written: Iterable[Path] = (), *, link: Iterable[str] = (),
                     stage: bool = False, upkeep: str = "detached", types: Iterable[str] | None = None,
                     pages: bool = True, everything: bool = False) -> Changes:
    """Bring everything derived from the memory files in step after `written` changed.

    `link`: ids to link now. `types`: the types of what changed, when known. `stage` (hooks): record in git,
    under `git.on_stop`, only the files this call wrote. `upkeep`: start `cortex maintain` when due (`detached`)
    or not (`none`). `everything`: changes not known file by file (gc, consolidation). `pages=False`: the
    projections left as they are.
    """
    from cortex import agents, projections

    if upkeep not in UPKEEP:
        raise ValueError(f"upkeep: {upkeep!r} is not one of {', '.join(UPKEEP)}")
    changes = Changes()
    written = list(written)
    index = indexes.get(store)  # synced by the first step that reads it: a Stop that wrote nothing walks nothing
    if pages and written and index.manifest is None:
        # The pages are rendered from the cache: walk first (a pull without cortex's hooks may have brought memories).
        index.sync(full=False, progress=False)
    index.note_written(written)
    link = [memory_id for memory_id in link if memory_id]
    if link:
        changes.linked = _link_now(store, index, link)
    if pages and (everything or written and (types is None or projections.affected_by(types) or changes.linked)):
        changes.pages = projections.refresh(store, index)
    if store.label == "project":
        try:  # only after a change: a Stop that wrote nothing writes no tracked file (a union-merged section waits)
            changes.agents = agents.refresh(store, index) if written or everything or changes.linked else None
        except CortexError as exc:  # a malformed AGENTS.md section is the person's to fix; the rest goes on
            store.log(f"AGENTS.md not refreshed: {exc}")
        if stage and written and store.worktree is not None:
            from cortex.gitops import record_cortex_changes

            mine = [*written, *_linked_paths(store, index, link), *changes.pages]
            if changes.agents:
                mine.append(agents.path_for(store))
            record_cortex_changes(store.root, str(store.config().get("git.on_stop")), paths=mine)
    elif store.label == "global" and stage and (written or everything) \
            and str(store.config().get("git.on_stop")) != "off":
        from cortex.globalsync import commit_changes  # the global store is a repository of its own, once synced

        try:
            commit_changes(store, paths=None if everything else written)
        except Exception as exc:  # the next Stop or `cortex sync --global` commits what is left
            store.log(f"global store not committed: {exc!r}")
    if upkeep == "detached":
        from cortex.spawn import detached

        for each in iter_stores(store):
            if upkeep_due(each):
                detached(["maintain", "--dir", str(each.root)], str(each.state_dir), env={"CORTEX_NESTED": "0"})
    if store.label == "project" and (written or everything or changes.linked):
        from cortex.spawn import briefing_ahead  # a running server builds it itself

        briefing_ahead(str(store.root))
    return changes


def _linked_paths(store: Store, index: Any, ids: list[str]) -> list[Path]:
    """The files of the memories `ids` (a link is written in the new memory's own file)."""
    rel_of = index.rel_of_id() if ids else {}
    return [store.memories_dir / rel_of[i] for i in ids if i in rel_of]


def _link_now(store: Store, index: Any, ids: list[str]) -> int:
    """`relates_to` links and near-duplicate flags for new memories; the files the links touched re-read."""
    from cortex.graph import connect_quietly

    report = connect_quietly(store, ids, index)
    if not report or not report.linked:
        return 0
    touched = {memory_id for pair in report.linked for memory_id in pair[:2]}
    index.note_written(_linked_paths(store, index, sorted(touched)))
    return len(report.linked)


def capture_done(store: Store, report: Any, indexes: Indexes, *, stage: bool = False,
                 upkeep: str = "detached") -> Changes:
    """After a capture: each store it wrote to brought in step; with `stage` the new memories are linked before
    they are staged (the upkeep then writes no link into a file already staged)."""
    link: list[str] = []
    if stage and report.written:
        from cortex.graph import queued_links, unqueue_links

        link = [i for i in queued_links(store) if i in set(report.written)]
        unqueue_links(store, link)
    for root, paths in sorted(report.paths.items()):
        if Path(root) != store.root:  # global-scope memories went to the global store
            memories_changed(Store(Path(root), "global"), indexes, paths, stage=stage, upkeep="none")
    # Nothing written here still starts the upkeep when due.
    return memories_changed(store, indexes, report.paths.get(str(store.root), []), link=link, stage=stage,
                            upkeep=upkeep)


def remember(store: Store, text: str, indexes: Indexes | None = None, *, type: str = "context",
             title: str | None = None, priority: int = 5, confidence: float = 0.9, tags: Iterable[str] = (),
             files: Iterable[str] = (), pinned: bool = False, source: dict[str, Any] | None = None,
             summary: str | None = None, created: str | None = None) -> Memory:
    """Save a memory from a person's text (CLI and MCP): written through the store's guard, linked, pages refreshed.
    `created`: when it was learnt, for notes brought in from elsewhere (default now)."""
    if not text.strip():
        raise CortexError("nothing to remember: the text is empty")
    stamp = _learnt_at(created) if created else ""
    made = store.create(Memory(id="", type=type, title=(title or title_from_text(text)).strip(),
                               body=text.strip() + "\n", confidence=confidence, priority=priority, pinned=pinned,
                               tags=list(dict.fromkeys(tags)), files=list(dict.fromkeys(files)),
                               source=source or {"kind": "manual"}, summary=" ".join((summary or "").split()),
                               created=stamp))
    assert made.path is not None
    changes = memories_changed(store, indexes or Indexes(), [made.path], link=[made.id], upkeep="none",
                               types=[type])
    return store.read(made.path) if changes.linked else made  # its links, as written


def _learnt_at(value: str) -> str:
    """A `created` date as written in files (a bare day at midnight UTC); raises `CortexError` naming the field."""
    from cortex.memory import iso_timestamp

    try:
        return iso_timestamp(value.strip())
    except ValueError:
        raise CortexError(f"created: {value!r} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ); "
                          "nothing was written") from None


def forgotten_like(store: Store, text: str, title: str | None = None) -> list[Any]:
    """The traces of forgotten memories that `remember(store, text, title=title)` would write again (same or very
    close text): the edges warn with each (`Trace.said`), and write."""
    from cortex import traces

    return traces.repeated(store, (title or title_from_text(text)).strip(), text.strip())


def forget(store: Store, memory_id: str, indexes: Indexes | None = None, replaced_by: str | None = None,
           reason: str | None = None) -> Memory:
    """Archive a memory, leaving its trace (with `reason`), or mark it superseded by `replaced_by` (it stays in
    the history: no trace); the pages it is on refreshed."""
    from cortex import traces

    if replaced_by:
        old, new = store.supersede(memory_id, replaced_by)
        paths = [old.path, new.path]
    else:
        old = store.archive(memory_id)
        traces.leave(store, old, "archived", reason)
        paths = [old.path]
    memories_changed(store, indexes or Indexes(), [p for p in paths if p is not None], upkeep="none")
    return old


def delete(store: Store, ids: Iterable[str], indexes: Indexes | None = None, reason: str | None = None,
           trace: bool = True) -> list[Memory]:
    """Remove memory files, all or none, each leaving its trace (with `reason`; `trace=False`: a rejected
    proposal, which was never knowledge); links to them stay until gc, and the pages are refreshed at once."""
    from cortex import traces
    from cortex.graph import clear_flags

    removed = store.delete(ids)
    for memory in removed if trace else ():
        traces.leave(store, memory, "deleted", reason)
    clear_flags(store, [m.id for m in removed])
    memories_changed(store, indexes or Indexes(), [m.path for m in removed if m.path is not None], upkeep="none")
    return removed


def link(store: Store, a: str, b: str, rel: str, indexes: Indexes | None = None) -> tuple[Memory, Link | None]:
    """A person's link `a REL b` (`graph.link`), the pages refreshed as after any write; (a, the link or None
    when it was there already)."""
    from cortex import graph

    first, made = graph.link(store, a, b, rel)
    if made is not None and first.path is not None:
        memories_changed(store, indexes or Indexes(), [first.path], upkeep="none", types=[first.type])
    return first, made


def unlink(store: Store, a: str, b: str, rel: str | None = None,
           indexes: Indexes | None = None) -> list[tuple[str, Link]]:
    """Remove the links between two memories (of `rel`, when given: `graph.unlink`), the pages refreshed."""
    from cortex import graph

    removed = graph.unlink(store, a, b, rel)
    owners = dict.fromkeys(owner for owner, _ in removed)
    paths = [path for path in (store.get(owner).path for owner in owners) if path is not None]
    memories_changed(store, indexes or Indexes(), paths, upkeep="none")
    return removed

def proposals(store: Store, indexes: Indexes | None = None) -> list[Memory]:
    """The proposed memories (capture's, waiting for a person), newest first."""
    index = (indexes or Indexes()).synced(store)
    records = index.records()
    found = [index.memory(rel) for rel, entry in records.items() if entry["status"] == "proposed"]
    return sorted(found, key=lambda m: (m.created, m.id), reverse=True)


def proposals_named(store: Store, ids: Iterable[str]) -> list[Memory]:
    """The proposals `ids` name, every one checked before anything changes."""
    items = [store.get(ident) for ident in ids]  # an unknown id fails here
    for item in items:
        if item.status != "proposed":
            raise CortexError(f"{item.id} is not a proposal (it is {item.status}); `cortex inbox` lists them")
    return list({item.id: item for item in items}.values())


def accept(store: Store, ids: Iterable[str], indexes: Indexes | None = None) -> list[Memory]:
    """Proposals made active, all or none; linked and the pages refreshed at once, like `remember`."""
    items = proposals_named(store, ids)
    accepted = [store.update(item.id, {"status": "active"}) for item in items]
    memories_changed(store, indexes or Indexes(), [m.path for m in accepted if m.path is not None],
                     link=[m.id for m in accepted], upkeep="none")
    return [store.get(m.id) for m in accepted]


def reject(store: Store, ids: Iterable[str], indexes: Indexes | None = None) -> list[Memory]:
    """Proposals deleted, after checking each id names a proposal."""
    return delete(store, [item.id for item in proposals_named(store, ids)], indexes, trace=False)


def restore(store: Store, memory_id: str, indexes: Indexes | None = None) -> Memory:
    """Bring an archived or superseded memory back to active (an active one is returned unchanged)."""
    current = store.get(memory_id)
    if current.status == "active":
        return current
    restored = store.restore(current.id)
    assert restored.path is not None
    from cortex import traces

    traces.drop(store, restored.id)  # live again: writing it once more is no resurrection
    memories_changed(store, indexes or Indexes(), [restored.path], upkeep="none")
    return restored


def promote(store: Store, memory_id: str, indexes: Indexes | None = None, archive: bool = False) -> Memory:
    """Copy a project memory into the global store, linked and committed there (`archive`: the original archived)."""
    from cortex.globalsync import promoted_copy

    home = Store.locate(use_global=True)
    if store.root.resolve() == home.root.resolve():
        raise CortexError("promote copies a project memory into the global store; this is the global store")
    indexes = indexes or Indexes()
    created = home.create(promoted_copy(store, memory_id, home))
    assert created.path is not None
    changes = memories_changed(home, indexes, [created.path], link=[created.id], pages=False, upkeep="none",
                               stage=True)
    if archive:
        forget(store, memory_id, indexes, reason=f"promoted to the global store as {created.id}")
    return home.get(created.id) if changes.linked else created


def upkeep_due(store: Store) -> bool:
    """Memories queued for links, or (a store outside git) the day's gc not run yet."""
    from cortex.graph import queued_links
    from cortex.lifecycle import gc_due

    return bool(queued_links(store)) or (store.worktree is None and gc_due(store))


def prompt_context(store: Store, prompt: str, indexes: Indexes, catch_up: dict[str, Any] | None = None) -> str | None:
    """The additionalContext for a prompt: relevant memories not already in the briefing, or None; with `catch_up`
    what changed since the session's briefing comes first. One rule whichever process answers
    (`cortex.recall.mark_relevant` at `prompt.min_match`), at most `prompt.max_memories` within the token budget.
    """
    from cortex.recall import CONTEXTUAL, MATCH_SPREAD, count_reads, mark_relevant, read_hits, recall, use_contextual

    if CONTEXTUAL.mode is None:  # the match needs the contextual model: a one-shot hook loads it, as `recall` does
        use_contextual("inline")
    stores = list(iter_stores(store))
    config = store.config()
    limit = int(config.get("prompt.max_memories"))
    budget = int(config.get("prompt.budget_tokens")) - FRAME_TOKENS  # the hook frames it
    min_match = float(config.get("prompt.min_match"))
    shown = set(read_json(store.state_dir / "briefing.json", {}).get("ids", []))
    from cortex import salience

    shown |= salience.muted(store)  # shown often at prompt time and never used: recall still finds them
    try:
        # Direct hits only, without those already shown, with room for a few that miss the threshold.
        found = recall(stores, prompt, limit=2 * limit, indexes=indexes, links=False, read=False,
                       exclude=frozenset(shown), count=False)
        hits = found.hits
        # Recall's one rule, with the line of what is injected unasked; what the briefing showed is a hit.
        mark_relevant(hits, min_match, MATCH_SPREAD, found.excluded_match, unwritten=found.unwritten or ())
    except QueryRefused:  # "ok", "?": nothing to look for (what changed since the briefing is still said)
        hits = []
    header = INJECTED_MARK + "\nMemories that may bear on this request (cortex):\n"
    used = estimate_tokens(header)
    lines: list[str] = []
    chosen = [hit for hit in hits if hit.relevant and hit.memory.id not in shown][:limit]
    if chosen:
        read_hits(stores, chosen, prompt, indexes)
    injected = []
    for hit in chosen:
        label = f"- [{hit.memory.type}] {hit.memory.title} `{hit.memory.id}`"
        if hit.store != "project":
            label += f" ({hit.store}: {hit.memory.project})" if hit.memory.project else f" ({hit.store})"
        fitted = _fit(lines, used, budget, label, hit.snippet)
        if fitted is None:
            break
        used = fitted
        injected.append(hit)
    count_reads(stores, injected)
    relevant = header + "\n".join(lines) + "\n" if lines else None
    if catch_up is not None:
        relevant = (briefing_catch_up(store, catch_up, indexes) or "") + (relevant or "") or None
    return redacted(relevant) if relevant else None  # the one secret rule (`cortex.guard.redacted`)


def _fit(lines: list[str], used: int, budget: int, label: str, detail: str) -> int | None:
    """Append `label: detail`, or the label alone, within `budget`; the tokens used then, or None."""
    return fit_line(lines, used, budget, ([f"{label}: {detail}"] if detail else []) + [label])


CATCH_UP_MAX = 8  # memories a catch-up names at most (the rest are counted)
CATCH_UP_ORDER = ("decision", "plan", "gotcha", "convention", "pattern")  # first; every other type after


def take_catch_up(store: Store, session: str) -> dict[str, Any] | None:
    """The catch-up marker a session's SessionStart left (its briefing was older than the store), taken once."""
    if not session:
        return None
    path = Path(catch_up_file(str(store.root), session))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        path.unlink()
    except (OSError, ValueError):
        return None
    with contextlib.suppress(OSError):  # the markers of sessions that never sent a prompt, a day old
        for marker in path.parent.glob("*.json"):
            if marker.stat().st_mtime < time.time() - 86400:
                marker.unlink(missing_ok=True)
    return data if isinstance(data, dict) and isinstance(data.get("since_ns"), int) else None


def briefing_catch_up(store: Store, marker: dict[str, Any], indexes: Indexes) -> str | None:
    """What changed in the project store since the session's briefing was saved: active memories edited since,
    decisions and plans first, and those it showed that are gone; None when nothing changed."""
    index = indexes.synced(store, full=True)
    if index.manifest is None:
        return None
    since, branch = int(marker["since_ns"]), store.current_branch()
    rank = {kind: i for i, kind in enumerate(CATCH_UP_ORDER)}
    changed = sorted(((rank.get(kind, len(rank)), -mtime, rel)
                      for rel, mtime, status, kind, where in index.manifest.files.column(
                          "mtime", "status", "type", "branch")
                      if mtime and mtime > since and status == "active" and kind != "code_description"
                      and (not where or where == branch)))
    live = index.rel_of_id()
    gone = [str(i) for i in marker.get("ids") or [] if str(i) not in live
            or index.manifest.files.value(live[str(i)], "status") != "active"]
    then, now = str(marker.get("head") or ""), str(marker.get("now") or "")
    moved = then != now and then not in ("", "None") and now not in ("", "None")
    if not changed and not gone and not moved:
        return None
    budget = int(store.config().get("prompt.budget_tokens")) - FRAME_TOKENS  # the hook frames it
    header = INJECTED_MARK + "\nChanged since the briefing at this session's start (cortex):\n"
    used, lines = estimate_tokens(header), []
    if moved:  # its header and recent commits are of the commit it was made at
        lines.append(f"- HEAD moved since it was made: {then[:7]} → {now[:7]} (`git log --oneline {then[:7]}..{now[:7]}`)")
        used += estimate_tokens(lines[-1] + "\n")
    named = 0
    for _rank, _mtime, rel in changed[:CATCH_UP_MAX]:
        memory = index.memory(rel)
        said = memory.summary.rstrip(". ") not in ("", memory.title.rstrip(". "))  # more than the title again
        fitted = _fit(lines, used, budget, f"- [{memory.type}] {memory.title} `{memory.id}`",
                      memory.summary if said else "")  # the manifest's summary (no body read)
        if fitted is None:
            break
        used, named = fitted, named + 1
    if len(changed) > named:
        lines.append(f"- and {len(changed) - named} more (`cortex list`)")
    if gone:
        lines.append("No longer current (removed, archived or replaced): " + ", ".join(gone))
    return header + "\n".join(lines) + "\n"
