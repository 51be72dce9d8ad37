"""Upkeep after capture, off the Stop hook's clock: links, lifecycle, automatic consolidation.

The Stop hook starts `cortex maintain` detached when ids are queued for links or the day's gc is due;
`cortex capture` and the LLM worker run it inline. Nothing is staged here: the Stop staged what it wrote first.
"""

from __future__ import annotations

from cortex.index import Indexes
from cortex.store import Store


def run(store: Store, indexes: Indexes | None = None, stage: bool = True) -> dict[str, int]:
    """What `cortex maintain` does: link the queued memories; in a store outside git (the global one) gc once a day
    and consolidate flagged pairs when due;
    then bring the projections, AGENTS.md and (with `stage`) git in step. One run per store at a time."""
    from cortex import consolidate, lifecycle
    from cortex.events import memories_changed
    from cortex.files import try_lock
    from cortex.graph import connect_quietly, queued_links, unqueue_links

    indexes = indexes or Indexes()
    counts = {"linked": 0, "archived": 0, "removed": 0, "merged": 0}
    with try_lock(store.state_dir / "maintain-run.lock") as running:
        if not running:
            return counts  # another `cortex maintain` is at it, and reads the queue again before it stops
        ids: list[str] = []
        while True:
            batch = [i for i in queued_links(store) if i not in ids]
            if not batch:
                break
            report = connect_quietly(store, batch, indexes.synced(store))
            counts["linked"] += len(report.linked) if report else 0
            unqueue_links(store, batch)
            ids += batch
            indexes.stale(store)  # the links rewrote files: the next batch syncs again
        unlinked = False
        try:  # in a git worktree gc is the person's command: no upkeep writes a tracked file behind their back
            actions = (lifecycle.daily(store) or []) if store.worktree is None else []
            unlinked = any(a.kind == "unlink" for a in actions)  # links to deleted memories dropped from files
            counts["archived"] = sum(a.kind == "archive" for a in actions)
            counts["removed"] = sum(a.kind == "remove" for a in actions)
        except Exception as exc:
            store.log(f"maintain: gc failed: {exc!r}")
        try:
            # In a git worktree merging is the person's command, like gc: no tracked file changes behind them.
            counts["merged"] = consolidate.after_capture(store, len(ids)) if store.worktree is None else 0
        except Exception as exc:
            store.log(f"maintain: consolidation failed: {exc!r}")
        if any(counts.values()) or unlinked:
            indexes.stale(store)  # links, gc and merges rewrote files: sync again, then every page may change
            memories_changed(store, indexes, stage=stage, upkeep="none", everything=True)
            store.log(f"maintain: {counts}")
    return counts


def fill_contextual(store: Store, indexes: Indexes | None = None) -> None:
    """Embed, with the bundled transformer, the memories that have no contextual vector yet, so the next
    `cortex recall` re-ranks without waiting (`recall.contextual`; off, or the model missing: nothing). Only
    the `cortex maintain` command does it (detached, started by a recall that found vectors missing), at a
    lower priority, on every core: never `cortex capture` or the worker, which run `run` inline."""
    import os

    from cortex import recall

    if store.config().get("recall.contextual") is False:
        return
    indexes = indexes or Indexes()
    try:
        recall.use_contextual("inline")
        os.nice(10)  # a detached background job: the person's commands and hooks come first
        filled = recall.fill_contextual(store, indexes.synced(store))
        if filled:
            store.log(f"maintain: {filled} contextual vectors")
    except Exception as exc:
        store.log(f"maintain: contextual vectors not filled: {exc!r}")


def check_suspects(store: Store) -> None:
    """Bring the suspects queue up to date (`cortex maintain` only, detached: a big store's first check takes a
    while), so `cortex status` reads it instead of comparing memories itself."""
    from cortex import suspects

    try:
        suspects.find(store)
    except Exception as exc:
        store.log(f"maintain: suspects not checked: {exc!r}")
