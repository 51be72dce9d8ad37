"""Recall by path: the active memories bound to one file of the repository, most specific first — those whose
`files:` name it, the outline describing its code (`cortex index-code`), then those naming a folder it is in —
for `cortex recall --path`, MCP `cortex_search` with `path`, and the edit hook, which shows them once per file
per session when an assistant is about to change the file (docs/hooks.md).

Standard library only at import: the edit hook's served path loads this module and nothing of the store.
"""

from __future__ import annotations

import json
import os
import posixpath
import time
from typing import Any

from cortex import layout
from cortex.text import FRAME_TOKENS, INJECTED_MARK, estimate_tokens, fit_line

EDIT_BUDGET = 300  # tokens the edit hook adds at most, its frame included
MAX_FILES = 20  # of one tool call (a Codex patch can name many), the files looked up
STATE_AGE = 2 * 86400.0  # seconds a session's record of the files it was shown is kept
# The tools that change a file: Claude Code's, Codex CLI's patch (the files named in its text), Gemini CLI's.
EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit", "apply_patch", "replace", "write_file"})
WHY = ("names this file", "describes its code", "names its folder")
_PATCH_MARKS = ("*** Update File: ", "*** Add File: ", "*** Delete File: ", "*** Move to: ")


# ---------------------------------------------------------------- the file a tool call names


def edited_files(payload: dict[str, Any]) -> list[str]:
    """The files an edit tool call is about to change, as it names them (absolute, or relative to its cwd)."""
    if payload.get("tool_name") not in EDIT_TOOLS:
        return []
    given = payload.get("tool_input")
    if not isinstance(given, dict):
        return []
    named = [given.get(key) for key in ("file_path", "notebook_path")]
    patch = given.get("command") if payload.get("tool_name") == "apply_patch" else None
    if isinstance(patch, str):
        named += [line[len(mark):].strip() for line in patch.splitlines() for mark in _PATCH_MARKS
                  if line.startswith(mark)]
    return list(dict.fromkeys(n for n in named if isinstance(n, str) and n.strip()))[:MAX_FILES]


def repo_path(given: str, worktree: str, cwd: str) -> str | None:
    """`given` (absolute, or relative to `cwd`) relative to the worktree, `/`-separated ("" for the worktree
    itself); None when it is outside (symlinks resolved before saying so)."""
    if "\x00" in given:
        return None
    full = os.path.normpath(os.path.join(cwd, given))
    for base, path in ((worktree, full), (os.path.realpath(worktree), os.path.realpath(full))):
        try:
            rel = os.path.relpath(path, base)
        except ValueError:  # another drive
            continue
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            return "" if rel == os.curdir else rel.replace(os.sep, "/")
    return None


def _entry(name: str) -> str:
    """A `files:` entry as paths are compared: `/`-separated, no `./`, a folder keeping its trailing `/`; "" for
    one that names no place inside the repository (absolute, climbing out)."""
    name = name.strip().replace("\\", "/")
    if not name or name.startswith("/"):
        return ""
    norm = posixpath.normpath(name)
    if norm in (".", "..") or norm.startswith("../"):
        return ""
    return norm + ("/" if name.endswith("/") else "")


# ---------------------------------------------------------------- the memories bound to a path


def _by_entry(index: Any) -> dict[str, list[tuple[str, str, int]]]:
    """Each `files:` entry of the active memories (source code left out: it is the file itself) -> (memory path,
    type, how many files it names); made once per sync."""

    def make() -> dict[str, list[tuple[str, str, int]]]:
        table: dict[str, list[tuple[str, str, int]]] = {}
        for rel, status, kind, files in index.records().column("status", "type", "files"):
            if status != "active" or kind == "code" or not files:
                continue
            for name in files:
                key = _entry(str(name))
                if key:
                    table.setdefault(key, []).append((rel, kind, len(files)))
        return table

    return index.memo(("bound to a path",), make)  # type: ignore[no-any-return]


def bound(index: Any, path: str) -> list[dict[str, Any]]:
    """The active memories bound to `path` (relative to the worktree), most specific first: naming the file
    (fewest other files first), describing its code, naming its folder (the nearest first); each as a row
    (id, type, title, summary, why, files, priority). Ties: higher priority, then the newest."""
    table = _by_entry(index)
    found: dict[str, tuple[int, int, int]] = {}

    def add(rows: list[tuple[str, str, int]], tier: int, depth: int) -> None:
        for rel, kind, count in rows:
            key = (1 if tier == 0 and kind == "code_description" else tier, depth, count)
            if rel not in found or key < found[rel]:
                found[rel] = key

    path = path.strip("/")
    if path:
        add(table.get(path, []) + table.get(path + "/", []), 0, 0)
        parts = path.split("/")
        for depth in range(len(parts) - 1, 0, -1):
            folder = "/".join(parts[:depth])
            add(table.get(folder, []) + table.get(folder + "/", []), 2, -depth)
    records = index.records()
    by_date = sorted(found, key=lambda rel: (str(records.value(rel, "updated") or records.value(rel, "created") or ""),
                                             str(records.value(rel, "id"))), reverse=True)
    ranked = sorted(by_date, key=lambda rel: (found[rel], -int(records.value(rel, "priority") or 0)))
    rows = []
    for rel in ranked:
        meta = index.meta(rel)
        rows.append({"id": meta["id"], "type": meta["type"], "title": meta["title"],
                     "summary": str(meta.get("summary") or ""), "why": WHY[found[rel][0]], "files": meta["files"],
                     "priority": meta["priority"], "path": str(index.store.memories_dir / rel)})
    return rows


def worktree_of(store: Any) -> str:
    """The folder a store's `files:` are relative to: its git worktree, else the folder holding it."""
    return str(store.worktree or store.root.parent)


def lookup(store: Any, given: str, cwd: str, index: Any = None) -> tuple[str, list[dict[str, Any]]]:
    """(the path relative to the worktree, the memories bound to it) for `cortex recall --path` and MCP; a
    CortexError naming `given` when it is outside the repository."""
    from cortex.errors import CortexError

    worktree = worktree_of(store)
    rel = repo_path(given, worktree, cwd)
    if rel is None:
        raise CortexError(f"{given}: outside the repository ({worktree})")
    if index is None:
        from cortex.index import Indexes

        index = Indexes().synced(store)
    return rel, bound(index, rel)


# ---------------------------------------------------------------- the edit hook's context


def edit_context(index: Any, paths: list[str], exclude: frozenset[str] = frozenset()
                 ) -> tuple[str | None, dict[str, list[str]]]:
    """The edit hook's additionalContext for these paths (relative to the worktree), within EDIT_BUDGET with its
    frame, without the memories in `exclude` (shown earlier in the session); and the ids shown, by path. The
    same whether `cortex serve` or the hook's own process answers."""
    budget = EDIT_BUDGET - FRAME_TOKENS  # the hook frames it
    lines = [INJECTED_MARK]
    used = estimate_tokens(INJECTED_MARK + "\n")
    shown: dict[str, list[str]] = {}
    taken = set(exclude)
    for path in paths:
        rows = [row for row in bound(index, path) if row["id"] not in taken]
        head = f"Memories bound to {path}, which this tool call changes (cortex):"
        if not rows or used + estimate_tokens(head + "\n") >= budget:
            continue
        lines.append(head)
        used += estimate_tokens(head + "\n")
        for row in rows:
            fitted = fit_line(lines, used, budget, _lines(row))
            if fitted is None:
                break
            used = fitted
            shown.setdefault(path, []).append(row["id"])
            taken.add(row["id"])
        if path not in shown:
            lines.pop()  # its heading, with no room for a memory under it
    if not shown:
        return None, {}
    from cortex.guard import redacted

    return redacted("\n".join(lines) + "\n"), shown  # the one secret rule (`cortex.guard.redacted`)


def _lines(row: dict[str, Any]) -> list[str]:
    """A memory's line, longest first: with its summary (in place of a title cut short from it), then without."""
    title, summary = row["title"], row["summary"]
    short = f"- [{row['type']}] {title} `{row['id']}` ({row['why']})"
    if not summary or summary == title:
        return [short]
    if summary.startswith(title.rstrip("…").rstrip()):
        return [f"- [{row['type']}] {summary} `{row['id']}` ({row['why']})", short]
    return [f"{short}: {summary}", short]


def answer(index: Any, paths: list[str], exclude: list[str]) -> dict[str, Any]:
    """What the edit hook is told (`cortex serve`'s `path` op, or `answer_here`): context and shown; what it
    shows counts as read, as the prompt hook's does."""
    context, shown = edit_context(index, paths, frozenset(exclude))
    index.store.record_access(i for ids in shown.values() for i in ids)
    return {"context": context, "shown": shown}


def answer_here(store: Any, paths: list[str], exclude: list[str]) -> dict[str, Any]:
    """`answer` in the hook's own process (no server runs): the store's cache brought in step by stat first."""
    from cortex.index import Indexes

    return answer(Indexes().synced(store), paths, exclude)


# ---------------------------------------------------------------- once per file per session


def state_file(store_root: str, session: str) -> str:
    """`state/edits/<session>.json`: the files the edit hook showed memories for, with their ids."""
    name = os.path.basename(layout.injections_file(store_root, session))[:-len(".jsonl")]
    return os.path.join(store_root, "state", "edits", name + ".json")


def delivered(store_root: str, session: str) -> dict[str, list[str]]:
    """The files this session was shown memories for (path -> ids); empty without a session or a record."""
    if not session:
        return {}
    try:
        with open(state_file(store_root, session), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return {str(k): [str(i) for i in v] for k, v in files.items() if isinstance(v, list)} if isinstance(files, dict) \
        else {}


def note_delivered(store_root: str, session: str, shown: dict[str, list[str]]) -> None:
    """Add `shown` to the session's record, written whole (a temp file renamed over it); best effort. A new
    session's first record sweeps out the records of sessions idle for STATE_AGE."""
    if not session or not shown:
        return
    path = state_file(store_root, session)
    record = delivered(store_root, session) | shown
    try:
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        if not os.path.exists(path):
            _sweep(folder)
        temp = f"{path}.{os.getpid()}.tmp"
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump({"files": record}, handle)
        os.replace(temp, path)
    except OSError:
        pass


def _sweep(folder: str) -> None:
    now = time.time()
    for name in os.listdir(folder):
        full = os.path.join(folder, name)
        try:
            if now - os.path.getmtime(full) > STATE_AGE:
                os.unlink(full)
        except OSError:
            pass
