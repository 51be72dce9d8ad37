"""What `cortex status` and the MCP server report about a store."""

from __future__ import annotations

import contextlib
from typing import Any

from cortex.index import Index
from cortex.store import Store, status_of


def report(store: Store, index: Index) -> dict[str, Any]:
    """The store's counts and problems, search state, cache size and the damaged parts of it this process
    rebuilt, near-duplicates flagged at write time, pairs consolidation kept for a person (they differ), the suspects
    queue's size, and an unfinished consolidation."""
    from cortex.graph import flagged

    if index.damaged_parts():  # its sync read only the manifest: rebuild the damaged parts now, and say so
        index.sync(full=True, progress=False)
    # From the manifest's columns: no `Memory`, `Path` or dict for each of 100,000 entries (paths relative to
    # memories/ until a problem names one).
    out = status_of(store, index.records().column("id", "type", "status", "pinned", "links"),
                    [f"{path}: {reason}" for path, reason in index.problems()])
    from cortex.embedding import model_identity

    # The model's files are enough to say semantic search is on: loading it (~30 % of a status) only when not.
    identity = model_identity(store.config().get("embedding.model"))
    if identity is None:
        identity = getattr(index.encoder(), "identity", None)
    out["semantic"] = {"on": identity is not None, "model": identity,
                       "problem": index.encoder_problem if identity is None else None}
    out["cache"] = {"memories": len(index.manifest.files) if index.manifest else 0,
                    "vectors": len(index.manifest.vector_keys) if index.manifest else 0,
                    "rebuilt": list(index.repaired)}
    out["warnings"] += [f"cache: {line}" for line in index.repaired]
    out["problems"] += [f"{store.cache_dir}: {why}; `cortex reindex` rebuilds it" for why in index.damaged_parts()]
    from cortex import llm

    out["warnings"] += llm.warnings(store)  # a repository's command ignored, its LLM request not allowed here
    out["proposed"] = out["by_status"].get("proposed", 0)  # capture's proposals, waiting in `cortex inbox`
    out["flagged_pairs"] = len(flagged(store))
    from cortex.consolidate import contested

    active = {memory_id for _rel, memory_id, status in index.records().column("id", "status") if status == "active"}
    out["contested"] = [{"id": a, "other": b, "reason": why} for a, b, why in contested(store, active)]
    from cortex import salience, suspects

    queue = suspects.kept(store, index)  # contradictions and drift waiting for a person
    out["suspects"] = queue[0] if queue else 0
    out["suspects_checked"] = "current" if queue and queue[1] else "earlier" if queue else "never"

    out["tiers"] = salience.tiers_report(store)
    if store.label == "global":  # the global store's own repository: remote, ahead/behind, sync conflicts
        from cortex import globalsync

        out["sync"] = globalsync.report(store)
        out["problems"] += globalsync.problems(out["sync"], store.root)
    out["activity"] = activity(store, index)
    if (store.state_dir / "consolidate-checkpoint" / "plan.json").is_file():
        out["problems"].append(f"{store.state_dir / 'consolidate-checkpoint'}: an unfinished consolidation; "
                               f"`cortex consolidate --dry-run` rolls it back")
    return out


def activity(store: Store, index: Index) -> dict[str, Any]:
    """What this clone did lately (`state/metrics.json`, `cortex.metrics`) and what waits: the last capture,
    the queues (LLM capture jobs, memories waiting for links, suggested links), the last briefing's size."""
    import json

    from cortex import metrics
    from cortex.graph import pending_suggestions, queued_links
    from cortex.memory import iso

    counted = metrics.read(store.state_dir)
    capture = counted.get("capture", {})
    last_capture = capture.get("last_at")
    if last_capture is None:  # captures before metrics were kept: the newest transcript cursor
        cursors = [p.stat().st_mtime for p in (store.state_dir / "cursors").glob("*") if p.is_file()] \
            if (store.state_dir / "cursors").is_dir() else []
        last_capture = iso(max(cursors)) if cursors else None
    briefing = counted.get("briefing", {})
    last_briefing = None
    if "last_tokens" in briefing:
        last_briefing = {key: briefing.get(f"last_{key}") for key in ("tokens", "chars", "memories", "ms", "at")}
    else:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            cached = json.loads((store.state_dir / "briefing.json").read_text(encoding="utf-8"))
            last_briefing = {"tokens": int(cached["tokens"]), "chars": len(cached["text"]),
                             "memories": len(cached.get("ids", [])), "ms": None, "at": None}
    queue = store.state_dir / "queue"
    return {
        "last_capture": last_capture,
        "queue": {"llm_jobs": len(list(queue.glob("*.json"))) if queue.is_dir() else 0,
                  "links": len(queued_links(store)),
                  "suggested_links": len(pending_suggestions(store, index))},
        "last_briefing": last_briefing,
        "metrics": counted,
    }
