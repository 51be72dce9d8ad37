"""The LLM command cortex may run (`capture.llm_command`, default `claude -p`), and whether it may.

Capture's fourth layer, code descriptions and the consolidation veto all ask
it through `ask`: the prompt on stdin, the answer on stdout, hooks disabled for
the child (`--settings '{"disableAllHooks": true}'` for claude) and
`CORTEX_NESTED=1` in its environment, so cortex's own hooks do nothing inside it.

`capture.llm`: `off` (default), `on`, or `auto` (on when the command's program
is on PATH).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from cortex.store import Store


def enabled(store: Store) -> bool:
    mode = str(store.config().get("capture.llm")).lower()
    if mode in ("on", "true"):
        return True
    if mode == "auto":
        command = shlex.split(str(store.config().get("capture.llm_command")))
        return bool(command) and shutil.which(command[0]) is not None
    return False


def command(store: Store) -> list[str]:
    """The configured command, with claude's hooks turned off for the child."""
    argv = shlex.split(str(store.config().get("capture.llm_command")))
    if argv and Path(argv[0]).name == "claude" and "--settings" not in argv:
        argv += ["--settings", json.dumps({"disableAllHooks": True})]
    return argv


def run(store: Store, prompt: str, timeout: float) -> str:
    """The command's answer; raises OSError / RuntimeError / TimeoutExpired when it is missing or fails. Every
    prompt (capture's slice, a code file to describe, memories to merge) passes the one secret rule first."""
    from cortex.guard import redacted

    prompt = redacted(prompt)
    argv = command(store)
    if not argv or shutil.which(argv[0]) is None:
        raise FileNotFoundError(f"{argv[0] if argv else 'capture.llm_command'} is not on PATH")
    from cortex.metrics import record
    from cortex.text import estimate_tokens

    started = time.perf_counter()
    try:
        result = subprocess.run(argv, input=prompt, capture_output=True, text=True, timeout=timeout,
                                env=dict(os.environ, CORTEX_NESTED="1"))
    except subprocess.TimeoutExpired:
        record(store.state_dir, "llm", {"calls": 1, "failures": 1, "input_tokens": estimate_tokens(prompt)})
        raise
    failed = result.returncode != 0
    record(store.state_dir, "llm", {"calls": 1, "failures": int(failed), "input_tokens": estimate_tokens(prompt),
                                    "output_tokens": 0 if failed else estimate_tokens(result.stdout)},
           {"ms": round((time.perf_counter() - started) * 1000)})
    if failed:
        raise RuntimeError(f"exit {result.returncode}: {result.stderr.strip()[:200]}")
    return result.stdout


def ask(store: Store, prompt: str, purpose: str, timeout: float = 120.0) -> str | None:
    """The answer to `prompt` when `capture.llm` allows it; None when it is off, not installed, fails or answers
    nothing (logged with `purpose`)."""
    if not enabled(store):
        return None
    try:
        answer = run(store, prompt, timeout).strip()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        store.log(f"{purpose}: LLM command failed: {exc!r}")
        return None
    if not answer:
        store.log(f"{purpose}: LLM command answered nothing")
    return answer or None
