"""The two hook fast paths: answers that need no store, no click and no third-party import.

A hook is a fresh process on every event, and the budget for a cached
SessionStart is twice a bare `python -c pass`. `session_start` prints the
cached briefing when its key (`cortex.layout.briefing_key`) still matches;
`prompt` asks the resident `cortex serve` over its socket. Either returns
False when the full hook (`cortex.hooks`) must run instead.
"""

from __future__ import annotations

import json
import os
import sys

from cortex import layout


def _payload(raw: str) -> dict[str, object] | None:
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def emit(event: str, text: str) -> None:
    """Print a hook's additionalContext as Claude Code reads it from stdout."""
    sys.stdout.write(json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}))
    sys.stdout.flush()


def session_start(raw: str) -> bool:
    """Print the cached briefing as SessionStart additionalContext; False when the slow path must run."""
    from cortex import __version__

    if os.environ.get("CORTEX_NESTED") == "1":
        return True  # nothing to do inside cortex's own claude -p
    payload = _payload(raw)
    if payload is None:
        return False
    store_root = layout.find_store(str(payload.get("cwd") or os.getcwd()))
    if store_root is None:
        return True  # not a cortex project: say nothing
    try:
        with open(os.path.join(store_root, "state", "briefing.json"), encoding="utf-8") as handle:
            cached = json.load(handle)
    except (OSError, ValueError):
        return False
    if not isinstance(cached, dict) or cached.get("key") != layout.briefing_key(store_root, __version__):
        return False
    if layout.queued_jobs(store_root):
        return False  # queued capture jobs: the full hook starts the worker
    if not layout.server_up(store_root):  # prompt-time recall from a warm process (it exits by itself when idle)
        from cortex import serve

        serve.start_detached(store_root)
    emit("SessionStart", str(cached.get("text", "")))
    return True


def prompt(raw: str) -> bool:
    """UserPromptSubmit through a running `cortex serve`; False when the in-process path must run."""
    from cortex import serve

    if os.environ.get("CORTEX_NESTED") == "1":
        return True
    payload = _payload(raw)
    if payload is None:
        return False
    text = str(payload.get("prompt") or "").strip()
    store_root = layout.find_store(str(payload.get("cwd") or os.getcwd()))
    if store_root is None or not text or text.startswith("/"):
        return True
    answer = serve.ask(store_root, {"op": "prompt", "prompt": text})
    if answer is None or "context" not in answer:
        return False
    if answer["context"]:
        emit("UserPromptSubmit", str(answer["context"]))
    return True
