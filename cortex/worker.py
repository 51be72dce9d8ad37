"""Layer 4 of capture: an LLM reads the new part of the session, off the hook's clock.

The Stop hook only *queues* a job (`state/queue/<time>-<session>.json`: the
transcript slice, up to 65,000 characters, plus git context) and starts a
detached `cortex worker`, then returns. The worker runs the configured command
(`capture.llm_command`, default `claude -p`) with the prompt on stdin, hooks
disabled for the child (`--settings '{"disableAllHooks": true}'` for claude)
and `CORTEX_NESTED=1` in its environment so cortex's own hooks do nothing
inside it. It parses the JSON answer into memories, which go through the same
guard and dedup as every other layer. When the command is missing or fails,
the job stays queued (its attempts counted) and is retried at the next session
start: offline never loses work.

`capture.llm`: `off` (default), `on`, or `auto` (on when the command's program
is on PATH).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cortex.store import Store

MAX_SLICE = 65_000
PROMPT = """You extract durable project memory from a coding-assistant session.
Return ONLY a JSON array (no prose). Each element:
{"type": one of architecture|decision|pattern|gotcha|context|progress|plan,
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


def enabled(store: Store) -> bool:
    mode = str(store.config().get("capture.llm")).lower()
    if mode in ("on", "true"):
        return True
    if mode == "auto":
        command = shlex.split(str(store.config().get("capture.llm_command")))
        return bool(command) and shutil.which(command[0]) is not None
    return False


def render_slice(items: list[Any]) -> str:
    """The session events as plain text for the model, the newest kept when it is too long."""
    lines = []
    for event in items:
        if event.kind == "human":
            lines.append(f"USER: {event.text}")
        elif event.kind == "text":
            lines.append(f"ASSISTANT: {event.text}")
        elif event.kind == "tool":
            detail = event.tool_input.get("command") or event.tool_input.get("file_path") or ""
            status = " (failed)" if event.failed else ""
            result = " ".join(event.result.split())[:300]
            lines.append(f"TOOL {event.tool} {detail}{status}: {result}")
    text = "\n".join(lines)
    return text[-MAX_SLICE:]


def queue_dir(store: Store) -> Path:
    return store.state_dir / "queue"


def enqueue(store: Store, session: str, slice_text: str, context: str) -> Path | None:
    """Queue a job for the worker (nothing when the slice is empty)."""
    from cortex.files import atomic_write

    if not slice_text.strip():
        return None
    name = f"{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9:09d}-{session[:40]}.json"
    path = queue_dir(store) / name
    atomic_write(path, json.dumps({"session": session, "slice": slice_text, "context": context, "attempts": 0}))
    return path


def spawn(store: Store, command: str = "worker") -> None:
    """Start `cortex <command> --dir <store>` fully detached (own session, stdio to state/worker.log); return at once."""
    log = open(store.state_dir / "worker.log", "a", encoding="utf-8")
    try:
        subprocess.Popen(
            [sys.executable, "-m", "cortex", command, "--dir", str(store.root)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
            env=dict(os.environ, CORTEX_NESTED="0"),
        )
    finally:
        log.close()


def ask(store: Store, prompt: str, purpose: str, timeout: float = 120.0) -> str | None:
    """The LLM command's answer to `prompt` when `capture.llm` allows it (its hooks off, CORTEX_NESTED=1);
    None when it is off, not installed, fails or answers nothing (logged with `purpose`)."""
    if not enabled(store):
        return None
    command = _command(store)
    try:
        result = subprocess.run(command, input=prompt, capture_output=True, text=True, timeout=timeout,
                                env=dict(os.environ, CORTEX_NESTED="1"))
    except (OSError, subprocess.TimeoutExpired) as exc:
        store.log(f"{purpose}: LLM command failed: {exc!r}")
        return None
    if result.returncode != 0 or not result.stdout.strip():
        store.log(f"{purpose}: LLM command exit {result.returncode}: {result.stderr.strip()[:200]}")
        return None
    return result.stdout.strip()


def _command(store: Store) -> list[str]:
    command = shlex.split(str(store.config().get("capture.llm_command")))
    if command and Path(command[0]).name == "claude" and "--settings" not in command:
        command += ["--settings", json.dumps({"disableAllHooks": True})]
    return command


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
    from cortex.capture import Candidate, write_candidates
    from cortex.files import atomic_write, file_lock
    from cortex.memory import TYPES, title_from_text

    counts = {"done": 0, "failed": 0, "written": 0}
    folder = queue_dir(store)
    if not folder.is_dir():
        return counts
    with file_lock(store.state_dir / "worker.lock"):
        for job_path in sorted(folder.glob("*.json")):
            try:
                job = json.loads(job_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                job_path.unlink(missing_ok=True)
                continue
            command = _command(store)
            prompt = (PROMPT.replace("{context}", str(job.get("context", ""))).replace("{known}", _known(store))
                      .replace("{slice}", str(job.get("slice", ""))))
            try:
                if not command or shutil.which(command[0]) is None:
                    raise FileNotFoundError(f"{command[0] if command else 'capture.llm_command'} is not on PATH")
                result = subprocess.run(command, input=prompt, capture_output=True, text=True, timeout=timeout,
                                        env=dict(os.environ, CORTEX_NESTED="1"))
                if result.returncode != 0:
                    raise RuntimeError(f"exit {result.returncode}: {result.stderr.strip()[:200]}")
                items = _parse_answer(result.stdout)
            except Exception as exc:
                job["attempts"] = int(job.get("attempts", 0)) + 1
                job["last_error"] = str(exc)[:300]
                atomic_write(job_path, json.dumps(job))
                store.log(f"worker: {job_path.name} failed (attempt {job['attempts']}): {exc}")
                counts["failed"] += 1
                continue
            candidates = []
            known_ids = {m.id for m in store.list()}
            for item in items:
                kind = str(item.get("type", ""))
                content = str(item.get("content") or "").strip()
                if kind not in TYPES or kind in ("code", "code_description") or not content:
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
                candidates.append(candidate)
            written = write_candidates(store, candidates, str(job.get("session", "")))
            counts["written"] += len(written)
            job_path.unlink(missing_ok=True)
            counts["done"] += 1
            store.log(f"worker: {job_path.name}: {len(items)} proposed, {len(written)} written")
    if counts["written"]:
        from cortex import maintain
        from cortex.store import iter_stores

        for each in iter_stores(store):  # already detached: link what was written (global too), gc, consolidation
            maintain.run(each)
    return counts
