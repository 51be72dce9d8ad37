"""Sub-agents: the task each one was given, and a briefing scoped to that task and the files it names.

Only the parent's PreToolUse (`Task`/`Agent`) carries the task, so the hot path queues it and SubagentStart
claims the oldest unclaimed task of its type; SubagentStop judges use (`cortex.salience`). The scoped briefing
has no branch header: the sub-agent has one job. docs/claude-code.md.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from cortex.briefing import Briefing
from cortex.store import Store
from cortex.text import FRAME_TOKENS, INJECTED_MARK, estimate_tokens

GENERAL = ("", "general-purpose")  # what agent_type / subagent_type say for the default sub-agent
MAX_TASK_CHARS = 4000  # of the task prompt used as a query
TASK_AGE = 3600.0  # a recorded task not claimed within this many seconds is not a candidate any more
_PATH = re.compile(r"(?<![\w@:])((?:/|\./)?(?:[\w.-]+/)*[\w-]+\.[A-Za-z0-9]{1,6}|(?:[\w.-]+/)+)(?![\w/])")


def tasks_file(store: Store, session: str) -> Path:
    from cortex.layout import subagent_tasks_file

    return Path(subagent_tasks_file(str(store.root), session))


def claim_task(store: Store, session: str, agent_id: str, agent_type: str, now: float | None = None) -> dict[str, Any] | None:
    """The task recorded by PreToolUse for the sub-agent starting now: the oldest unclaimed one of its type
    (recent), marked as claimed by `agent_id`. None when none was recorded (an older Claude Code)."""
    from cortex.files import file_lock

    now = time.time() if now is None else now
    path = tasks_file(store, session)
    with file_lock(path.with_suffix(".lock")):
        tasks = _records(path)
        if tasks is None:
            return None
        claimed = {str(t.get("claim")) for t in tasks if t.get("claimed_by")}
        wanted = GENERAL if agent_type in GENERAL else (agent_type,)
        for task in tasks:
            if task.get("claimed_by") or str(task.get("tool_use_id")) in claimed:
                continue
            kind = str(task.get("subagent_type") or "")
            if kind in wanted and now - float(task.get("at", now)) <= TASK_AGE:
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"claim": task.get("tool_use_id"), "claimed_by": agent_id, "at": now}) + "\n")
                return task
    return None


def task_of(store: Store, session: str, agent_id: str) -> dict[str, Any] | None:
    """The task `agent_id` claimed at its start, or None."""
    items = _records(tasks_file(store, session))
    if items is None:
        return None
    claim = next((str(i.get("claim")) for i in items if i.get("claimed_by") == agent_id), None)
    return next((i for i in items if claim is not None and str(i.get("tool_use_id")) == claim), None)


def mentioned_files(text: str, worktree: Path | None) -> list[str]:
    """Repository paths (files, and folders ending in /) the task text names, relative to the worktree."""
    out: list[str] = []
    for match in _PATH.findall(text):
        path = match.strip()
        if worktree is not None and path.startswith("/"):
            try:
                path = Path(path).resolve().relative_to(worktree.resolve()).as_posix() + ("/" if path.endswith("/") else "")
            except ValueError:
                continue
        path = path.removeprefix("./")
        if path and path not in out and not path.startswith(("http", "www.")):
            out.append(path)
    return out


def _touches(files: list[str], named: list[str]) -> bool:
    return any(f == n or (n.endswith("/") and f.startswith(n)) or f.endswith("/" + n) for f in files for n in named)


def _relevant(hit: Any, config: Any) -> bool:
    """A sub-agent's relevance (`prompt.min_cosine*`): close in meaning, or a word in common that is not used in
    another sense."""
    cosine = hit.raw.get("dense")
    if cosine is None:
        return "bm25" in hit.raw
    floor = config.get("prompt.min_cosine_with_words") if "bm25" in hit.raw else config.get("prompt.min_cosine")
    return cosine >= float(floor)


def briefing_for(store: Store, task: dict[str, Any] | None, agent_type: str = "") -> Briefing:
    """The briefing for a sub-agent: what bears on its task and the files it names (see the module docstring)."""
    from cortex.errors import QueryRefused
    from cortex.index import Indexes
    from cortex.recall import recall
    from cortex.store import iter_stores

    indexes = Indexes()
    config = store.config()
    budget = int(config.get("briefing.budget_tokens")) - FRAME_TOKENS  # the hook frames it
    task = task or {}
    description = " ".join(str(task.get("description") or "").split())
    prompt = str(task.get("prompt") or "")[:MAX_TASK_CHARS]
    kind = agent_type or str(task.get("subagent_type") or "") or "general-purpose"
    named = mentioned_files(f"{description}\n{prompt}", store.worktree)
    head = [INJECTED_MARK, f"# cortex briefing for the `{kind}` sub-agent" + (f" — {description}" if description else "")]
    if named:
        head.append("Files in this task: " + ", ".join(named[:12]))
    page = _Scoped(budget, "\n".join(head))
    index = indexes.synced(store, full=True)
    active = [m for m in index.scan().memories if m.status == "active" and m.type != "code"]
    for memory in sorted((m for m in active if m.pinned), key=lambda m: (-m.priority, m.id)):
        page.add("Pinned", memory)
    for memory in sorted((m for m in active if named and _touches(m.files, named)),
                         key=lambda m: (m.type == "code_description", -m.priority, m.id)):
        page.add("About the files in this task", memory)
    query = f"{description}\n{prompt}".strip()
    if query:
        try:
            hits = recall(list(iter_stores(store)), query, limit=10, indexes=indexes).hits
        except QueryRefused:
            hits = []
        for hit in hits:
            if hit.via is None and hit.memory.status == "active" and _relevant(hit, config):
                page.add("Relevant to this task", hit.memory, hit.store)
    return page.briefing()


class _Scoped:
    """Sections of one-line entries within a token budget (the session briefing's line format)."""

    def __init__(self, budget: int, header: str) -> None:
        self.budget, self.header, self.used = budget, header, estimate_tokens(header)
        self.sections: dict[str, list[str]] = {}
        self.ids: list[str] = []

    def add(self, section: str, memory: Any, store: str = "project") -> None:
        if memory.id in self.ids:
            return
        entry = f"- [{memory.type}] {memory.title} `{memory.id}`" + ("" if store == "project" else f" ({store})")
        cost = estimate_tokens(entry + "\n") + (estimate_tokens(f"\n## {section}\n") if section not in self.sections else 0)
        if self.used + cost > self.budget:
            return
        self.sections.setdefault(section, []).append(entry)
        self.ids.append(memory.id)
        self.used += cost

    def briefing(self) -> Briefing:
        parts = [self.header] + [f"## {name}\n" + "\n".join(rows) for name, rows in self.sections.items()]
        if not self.ids:
            parts.append("No memory bears on this task.")
        from cortex.guard import redacted

        text = redacted("\n\n".join(parts).strip() + "\n")  # the one secret rule, as the session briefing
        return Briefing(text, estimate_tokens(text), self.ids)


def _records(path: Path) -> list[dict[str, Any]] | None:
    """The JSON objects of a tasks file, one a line (a torn or foreign line skipped); None when unreadable."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    items = []
    for raw in lines:
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if isinstance(item, dict):
            items.append(item)
    return items
