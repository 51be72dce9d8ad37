"""Layer 4 of capture: an LLM reads the new part of the session, off the hook's clock.

The Stop hook queues a job and starts a detached `cortex worker`; a missing or failing command leaves the
job queued for the next session: offline never loses work. The command comes from `cortex.llm`. docs/capture.md.
"""

from __future__ import annotations

import json
from typing import Any

from cortex.store import Store

PROMPT = """You extract durable project memory from a coding-assistant session.
Return ONLY a JSON array (no prose). Each element:
{"type": one of {types},
 "title": "<= 80 chars", "content": "the memory, with its reason", "confidence": 0..1,
 "priority": 1..10, "scope": "project" or "global", "tags": ["..."],
 "contradicts": ["<id of a memory below that this one contradicts>"] (optional)}
Keep only what a teammate would want next week: decisions and why, rejected alternatives,
gotchas with their fix, conventions. Nothing that git history already shows. Return [] if nothing.

Git context:
{context}

Known memories (id: title), to name in "contradicts":
{known}

Session (newest last):
{slice}
"""


def _parse_answer(text: str) -> list[dict[str, Any]]:
    text = text.strip()
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        raise ValueError("no JSON array in the answer")
    items = json.loads(text[start : end + 1])
    if not isinstance(items, list):
        raise ValueError("the answer is not a list")
    return [item for item in items if isinstance(item, dict)]


def _known(store: Store, limit: int = 60) -> str:
    """The decisions, patterns and gotchas the LLM may say a new memory contradicts (newest first)."""
    items = [m for m in store.list() if m.type in ("decision", "pattern", "gotcha", "architecture")]
    items.sort(key=lambda m: m.updated, reverse=True)
    return "\n".join(f"{m.id}: {m.title}" for m in items[:limit]) or "(none)"


def _proposed_links(item: dict[str, Any], known_ids: set[str]) -> list[Any]:
    """`contradicts` (and a `supersedes`, which automation may not make: it becomes `contradicts`) to known ids."""
    from cortex.graph import automatic_links
    from cortex.memory import Link

    links = []
    for rel in ("contradicts", "supersedes"):
        targets = item.get(rel) or []
        for target in [targets] if isinstance(targets, str) else targets:
            if isinstance(target, str) and target in known_ids:
                links.append(Link(rel, target))
    unique: dict[str, Any] = {}
    for link in automatic_links(links):
        unique.setdefault(link.to, link)
    return list(unique.values())


def process_queue(store: Store, timeout: float = 600.0) -> dict[str, int]:
    """Run every queued job once; successes are removed, failures stay for the next try."""
    from cortex import llm
    from cortex.capture import CaptureReport, queue_dir, sendable, write_candidates
    from cortex.files import atomic_write, file_lock
    from cortex.index import Indexes
    from cortex.memory import CAPTURE_TYPES

    counts = {"done": 0, "failed": 0, "written": 0}
    folder = queue_dir(store)
    if not folder.is_dir() or llm.decide(store).mode == "off":  # not allowed here (any more): the jobs wait
        return counts
    report = CaptureReport()
    with file_lock(store.state_dir / "worker.lock"):
        for job_path in sorted(folder.glob("*.json")):
            try:
                job = json.loads(job_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                job_path.unlink(missing_ok=True)
                continue
            prompt = (PROMPT.replace("{types}", "|".join(CAPTURE_TYPES))
                      .replace("{context}", str(job.get("context", ""))).replace("{known}", _known(store))
                      .replace("{slice}", sendable(str(job.get("slice", "")))))  # a job edited by hand too
            try:
                items = _parse_answer(llm.run(store, prompt, timeout))
            except Exception as exc:
                job["attempts"] = int(job.get("attempts", 0)) + 1
                job["last_error"] = str(exc)[:300]
                atomic_write(job_path, json.dumps(job))
                store.log(f"worker: {job_path.name} failed (attempt {job['attempts']}): {exc}")
                counts["failed"] += 1
                continue
            before = len(report.written)
            write_candidates(store, _candidates(items, {m.id for m in store.list()}), str(job.get("session", "")),
                             report=report)
            written = len(report.written) - before
            counts["written"] += written
            job_path.unlink(missing_ok=True)
            counts["done"] += 1
            store.log(f"worker: {job_path.name}: {len(items)} proposed, {written} written")
    if report.written:
        from cortex import events, maintain
        from cortex.store import iter_stores

        # Already detached: the projections, then links, gc and consolidation here and now (global too).
        indexes = Indexes()
        events.capture_done(store, report, indexes, stage=True, upkeep="none")
        for each in iter_stores(store):
            maintain.run(each, indexes)
    return counts


def _candidates(items: list[dict[str, Any]], known_ids: set[str]) -> list[Any]:
    """The model's proposals as capture candidates (layer `llm`); unknown types and empty texts dropped."""
    from cortex.capture import Candidate
    from cortex.memory import CAPTURE_TYPES, title_from_text

    out = []
    for item in items:
        kind = str(item.get("type", ""))
        content = str(item.get("content") or "").strip()
        if kind not in CAPTURE_TYPES or not content:
            continue
        try:
            confidence = max(0.0, min(1.0, float(item.get("confidence", 0.7))))
            priority = max(1, min(10, int(item.get("priority", 5))))
        except (TypeError, ValueError):
            confidence, priority = 0.7, 5
        tags = [str(t) for t in item.get("tags", []) if isinstance(t, (str, int))][:8]
        title = str(item.get("title") or "").strip() or title_from_text(content)
        candidate = Candidate(kind, title_from_text(title, 100), content + "\n", "llm", confidence, priority, tags)
        candidate.scope = "global" if item.get("scope") == "global" and confidence > 0.8 else "project"
        candidate.links = _proposed_links(item, known_ids)
        out.append(candidate)
    return out
