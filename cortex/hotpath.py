"""The fast paths: answers that need no store, no click and no third-party import.

A hook is a fresh process on every event: `session_start` prints the cached briefing while its key still
matches, `prompt` asks the resident `cortex serve`; either returns False when `cortex.hooks` must run instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from cortex import layout, wire
from cortex.text import FRAME, INJECTED_END, INJECTED_MARK, strip_controls, untagged


MAX_PROMPT_CHARS = 65536  # what a hook reads of a prompt for recall; the rest is ignored
PROMPT_WAIT = 2.0  # seconds the prompt hook lets a warming server take before it recalls in its own process
EDIT_WAIT = 1.0  # seconds the edit hook lets a warming server take before it looks up in its own process


def _payload(raw: str) -> dict[str, object] | None:
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def framed(text: str) -> str:
    """A hook's context as quoted notes: the mark and the frame line, the text between `<cortex-notes>` tags
    (control characters removed, tags neutralised: `cortex.text.untagged`), the end mark."""
    body = strip_controls(text.replace(INJECTED_MARK, "").replace(INJECTED_END, "").strip("\n"))
    return f"{INJECTED_MARK} {FRAME}\n<cortex-notes>\n{untagged(body)}\n</cortex-notes>\n{INJECTED_END}\n"


def emit(event: str, text: str) -> None:
    """Print a hook's context (`framed`) the way the assistant that runs it reads stdout: `additionalContext` under
    `hookSpecificOutput` for Claude Code, Codex CLI (a developer message) and Gemini CLI (named after the event
    that fired: SessionStart, UserPromptSubmit, BeforeAgent), `additional_context` for Cursor's camelCase
    `sessionStart`."""
    text = framed(text)
    if event == "sessionStart":
        sys.stdout.write(json.dumps({"additional_context": text}))
    else:
        sys.stdout.write(json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}))
    sys.stdout.flush()


_EVENT_NAMES = {"SessionStart": ("SessionStart", "sessionStart"), "UserPromptSubmit": ("UserPromptSubmit", "BeforeAgent"),
                "PreToolUse": ("PreToolUse", "AfterTool")}


def event_name(payload: dict[str, object], event: str) -> str:
    """The name to answer under: the payload's own `hook_event_name` when it is one of this hook's names in some
    assistant (Gemini's BeforeAgent, Cursor's sessionStart), else Claude Code's name for it. A payload claiming
    another event (a Stop's JSON sent to the SessionStart hook) does not change what the answer says it is."""
    named = payload.get("hook_event_name")
    return named if isinstance(named, str) and named in _EVENT_NAMES[event] else event


def payload_cwd(payload: dict[str, object]) -> str:
    """The project a hook payload is about: `cwd`, else Cursor's first `workspace_roots`, else this folder."""
    roots = payload.get("workspace_roots")
    first = roots[0] if isinstance(roots, list) and roots and isinstance(roots[0], str) else None
    return str(payload.get("cwd") or first or os.getcwd())


def payload_prompt(payload: dict[str, object]) -> str:
    """The prompt's first MAX_PROMPT_CHARS characters, without the `<hook_context>` blocks Gemini CLI puts in front."""
    text = str(payload.get("prompt") or "")
    kept: list[str] = []
    size, at = 0, 0
    while size < MAX_PROMPT_CHARS:
        start = text.find("<hook_context>", at)
        end = text.find("</hook_context>", start) if start >= 0 else -1
        piece = text[at:start if end >= 0 else len(text)][:MAX_PROMPT_CHARS - size]
        kept.append(piece)
        size += len(piece)
        if end < 0:
            break
        at = end + len("</hook_context>")
    return "".join(kept).strip()


def note_injected(store_root: str, payload: dict[str, object], event: str, text: str,
                  ids: list[str] | None = None) -> None:
    """Append which memories a hook showed to `state/injections/<session>.jsonl`, for the next Stop to judge."""
    session = str(payload.get("session_id") or "")
    if ids is None:
        from cortex.text import injected_ids

        ids = injected_ids(text)
    if not session or not ids:
        return
    import time

    line = {"at": time.time(), "event": event, "ids": list(dict.fromkeys(ids))}
    if payload.get("agent_id"):
        line["agent"] = str(payload["agent_id"])
    append_line(layout.injections_file(store_root, session), line)


def append_line(path: str, record: dict[str, object]) -> None:
    """Append one JSON line to a state file (best effort: a hook never fails on its own bookkeeping)."""
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


def session_start(raw: str) -> bool:
    """Print the cached briefing as SessionStart additionalContext; False when the slow path must run."""
    from cortex import __version__

    if os.environ.get("CORTEX_NESTED") == "1":
        return True  # nothing to do inside cortex's own claude -p
    payload = _payload(raw)
    if payload is None:
        return False
    store_root = layout.find_store(payload_cwd(payload))
    if store_root is None:
        return True  # not a cortex project: say nothing
    if layout.queued_jobs(store_root):
        return False  # queued capture jobs: the full hook starts the worker
    session = str(payload.get("session_id") or "")
    # The cached briefing; or, stale, the last one now and the first prompt adds what changed (`catch_up_file`).
    cached, stale = layout.start_briefing(store_root, __version__,
                                          stale_ok=bool(session) and os.environ.get("CORTEX_STALE_BRIEFING") != "0")
    if cached is None:
        return False
    if stale is not None:
        _write(layout.catch_up_file(store_root, session),
               json.dumps(stale | {"ids": [str(i) for i in cached.get("ids", [])]}))
    if not layout.server_up(store_root):  # prompt-time recall from a warm process (it exits by itself when idle)
        from cortex.spawn import start_server

        start_server(store_root)
    emit(event_name(payload, "SessionStart"), str(cached.get("text", "")))
    note_injected(store_root, payload, "SessionStart", "", [str(i) for i in cached.get("ids", [])])
    return True


def _write(path: str, text: str) -> None:
    """Write a small state file whole (a temp file renamed over it); best effort, as every hook's bookkeeping."""
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = f"{path}.{os.getpid()}.tmp"
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temp, path)


def prompt(raw: str) -> bool:
    """UserPromptSubmit through a running `cortex serve`; False when the in-process path must run."""
    if os.environ.get("CORTEX_NESTED") == "1":
        return True
    payload = _payload(raw)
    if payload is None:
        return False
    text = payload_prompt(payload)
    store_root = layout.find_store(payload_cwd(payload))
    if store_root is None or not text or text.startswith("/"):
        return True
    # A server still warming is waited for: the same recall here would share the machine with its warm-up.
    answer = wire.ask(layout.socket_path(store_root), {"op": "prompt", "prompt": text[:wire.PROMPT_CHARS],
                                                        "wait": PROMPT_WAIT,
                                                        "session": str(payload.get("session_id") or "")[:200]},
                      timeout=PROMPT_WAIT + 0.5)
    if answer is None or "context" not in answer:
        return False
    if answer["context"]:
        emit(event_name(payload, "UserPromptSubmit"), str(answer["context"]))
        ids = answer.get("ids")  # the server names what it showed (finding them here would import `re`)
        note_injected(store_root, payload, "UserPromptSubmit", str(answer["context"]),
                      [str(i) for i in ids] if isinstance(ids, list) else None)
    return True


def pre_tool_use(raw: str) -> bool:
    """PreToolUse: on Task/Agent, record the sub-agent's task for its SubagentStart briefing (prints nothing); on
    a tool that changes files, the memories bound to them, answered by a running `cortex serve` (`edit`). False
    when the hook's own process must answer."""
    if os.environ.get("CORTEX_NESTED") == "1":
        return True
    payload = _payload(raw)
    if not payload or payload.get("agent_id") and payload.get("tool_name") in ("Task", "Agent"):
        return True
    if payload.get("tool_name") not in ("Task", "Agent"):
        return edit(payload)
    given = payload.get("tool_input")
    session = str(payload.get("session_id") or "")
    store_root = layout.find_store(str(payload.get("cwd") or os.getcwd()))
    if store_root is None or not session or not isinstance(given, dict):
        return True
    import time

    task = {"at": time.time(), "tool_use_id": str(payload.get("tool_use_id") or ""),
            "subagent_type": str(given.get("subagent_type") or ""), "description": str(given.get("description") or ""),
            "prompt": str(given.get("prompt") or "")[:4000]}
    append_line(layout.subagent_tasks_file(store_root, session), task)
    return True


def edit(payload: dict[str, object], store: object = None) -> bool:
    """A tool about to change files (`cortex.bypath.EDIT_TOOLS`): the memories bound to each file not shown yet
    this session, as additionalContext, and the files noted as shown. Answered by a running `cortex serve`, or
    with `store` (the hook's own process) looked up here; False when no server answers."""
    from cortex import bypath

    named = bypath.edited_files(payload)
    cwd = payload_cwd(payload)
    store_root = layout.find_store(cwd) if named else None
    if store_root is None:
        return True
    if store is None and os.environ.get("CORTEX_DIR"):
        return False  # a store outside its repository: the hook's own process knows the worktree
    base = bypath.worktree_of(store) if store is not None else os.path.dirname(store_root)
    session = str(payload.get("session_id") or "")[:200]
    done = bypath.delivered(store_root, session)
    paths = [p for p in dict.fromkeys(bypath.repo_path(n, base, cwd) for n in named) if p and p not in done]
    if not paths:
        return True  # outside the repository, or shown already this session
    exclude = sorted({i for ids in done.values() for i in ids})
    found = bypath.answer_here(store, paths, exclude) if store is not None else _served_edit(store_root, paths, exclude)
    if found is None:
        return False
    shown = found.get("shown")
    if found.get("context") and isinstance(shown, dict):
        emit(event_name(payload, "PreToolUse"), str(found["context"]))
        note_injected(store_root, payload, "PreToolUse", "", [str(i) for ids in shown.values() for i in ids])
        bypath.note_delivered(store_root, session, {str(k): [str(i) for i in v] for k, v in shown.items()})
    return True


def _served_edit(store_root: str, paths: list[str], exclude: list[str]) -> dict[str, object] | None:
    """`cortex serve`'s answer to the edit hook; None when none runs or it is still warming."""
    answer = wire.ask(layout.socket_path(store_root), {"op": "path", "paths": paths, "exclude": exclude,
                                                       "wait": EDIT_WAIT}, timeout=EDIT_WAIT + 0.5)
    return answer if answer is not None and "shown" in answer else None
