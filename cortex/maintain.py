"""Upkeep after capture, off the Stop hook's clock: links, lifecycle, automatic consolidation.

Capture writes memories and queues their ids here (`state/maintain.json`);
the Stop hook then starts `cortex maintain` detached when there is anything
to do — queued ids, or the day's `cortex gc` not yet run — and returns. The
detached run links the new memories (`cortex.graph.connect`), runs gc once a
day, consolidates flagged pairs when that is due, and, when any memory
changed, regenerates the projections, stages `.cortex/` as the Stop hook
does and refreshes AGENTS.md's section. `cortex capture` and the LLM worker
(already detached) run it inline.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from cortex.files import atomic_write, file_lock
from cortex.store import Store


def _queue_path(store: Store) -> Any:
    return store.state_dir / "maintain.json"


def queue(store: Store, ids: Iterable[str]) -> None:
    ids = [i for i in ids if i]
    if not ids:
        return
    with file_lock(store.state_dir / "maintain.lock"):
        pending = _read(store)
        pending.extend(i for i in ids if i not in pending)
        atomic_write(_queue_path(store), json.dumps(pending), durable=False)


def _read(store: Store) -> list[str]:
    try:
        data = json.loads(_queue_path(store).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [str(i) for i in data] if isinstance(data, list) else []


def due(store: Store) -> bool:
    """Anything to do: ids queued, or gc not run today."""
    from cortex.lifecycle import DAY, now

    if _read(store):
        return True
    try:
        return not 0 <= now() - float((store.state_dir / "gc.stamp").read_text(encoding="utf-8")) < DAY
    except (OSError, ValueError):
        return True


def spawn_due(store: Store) -> None:
    """Start `cortex maintain` for the project store and the global one, each only when it has work."""
    from cortex.store import iter_stores

    for each in iter_stores(store):
        if due(each):
            spawn(each)


def spawn(store: Store) -> None:
    """Start `cortex maintain` fully detached; return at once."""
    from cortex.worker import spawn as spawn_detached

    spawn_detached(store, "maintain")


def _run_lock(store: Store) -> Any:
    """One `cortex maintain` per store at a time: yields True when this process got the lock, False otherwise."""
    from cortex.files import try_lock

    return try_lock(store.state_dir / "maintain-run.lock")


def run(store: Store, record_git: bool = True) -> dict[str, int]:
    """Do the queued upkeep (see the module docstring); returns counts of what changed."""
    from cortex import consolidate, lifecycle
    from cortex.graph import connect_quietly

    counts = {"linked": 0, "archived": 0, "removed": 0, "merged": 0}
    with _run_lock(store) as running:
        if not running:
            return counts  # another `cortex maintain` is at it, and reads the queue again before it stops
        ids: list[str] = []
        while True:
            batch = [i for i in _read(store) if i not in ids]
            if not batch:
                break
            report = connect_quietly(store, batch)
            counts["linked"] += len(report.linked) if report else 0
            with file_lock(store.state_dir / "maintain.lock"):  # only now: a run killed before keeps its queue
                left = [i for i in _read(store) if i not in set(batch)]
                atomic_write(_queue_path(store), json.dumps(left), durable=False)
            ids += batch
        try:
            actions = lifecycle.daily(store) or []
            counts["archived"] = sum(a.kind == "archive" for a in actions)
            counts["removed"] = sum(a.kind == "remove" for a in actions)
        except Exception as exc:
            store.log(f"maintain: gc failed: {exc!r}")
        try:
            counts["merged"] = consolidate.after_capture(store, len(ids))
        except Exception as exc:
            store.log(f"maintain: consolidation failed: {exc!r}")
        if any(counts.values()):
            from cortex import projections

            projections.write(store, projections.build(store))
            if record_git and store.worktree is not None:
                from cortex.gitops import record_cortex_changes

                record_cortex_changes(store.root, str(store.config().get("git.on_stop")))
            try:
                from cortex.hooks import _refresh_agents

                _refresh_agents(store)
            except Exception as exc:
                store.log(f"maintain: AGENTS.md refresh failed: {exc!r}")
            store.log(f"maintain: {counts}")
    return counts
