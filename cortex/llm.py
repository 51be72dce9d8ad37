"""The LLM command cortex may run, and whether it may: both from the person's own configuration only.

What runs is never read from a repository (`CORTEX_LLM_COMMAND`, else `$CORTEX_HOME/config.yaml`, else
`claude -p`); a project may only ask for the LLM, and it is on as far as both allow. The child runs with
cortex's hooks off. docs/security.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cortex.errors import CortexError
from cortex.files import atomic_write, read_json
from cortex.store import Store

LEVELS = ("off", "auto", "on")
DEFAULT_COMMAND = "claude -p"
NOTICES = "llm-notice.json"  # in a store's state/: the request line already said, per place (cli, log)


@dataclass
class Decision:
    """Whether the LLM may run for a store, and what runs."""

    mode: str  # off | auto | on, as far as the repository asks and this machine allows
    command: str  # the command line, from the person's own configuration
    asked: str  # what the store's own config.yaml asks (a project's request; the global store's setting)
    allowed: str  # what this machine allows (CORTEX_LLM, else $CORTEX_HOME/config.yaml)
    own_config: Path  # $CORTEX_HOME/config.yaml


def _level(value: Any) -> str | None:
    """'off', 'auto' or 'on' as config.yaml reads the word (true/false too); None for anything else."""
    from cortex.config import _checked

    word, problem = _checked("capture.llm", value, "off")
    return str(word) if problem is None else None


def _own_config() -> tuple[Path, Any]:
    """($CORTEX_HOME/config.yaml, its settings); all defaults when it is missing or unreadable (LLM off)."""
    from cortex.config import DEFAULTS, Config, load_config
    from cortex.store import global_home

    path = global_home() / "config.yaml"
    try:
        return path, load_config(path)
    except CortexError:
        import copy

        return path, Config(copy.deepcopy(DEFAULTS))


def decide(store: Store) -> Decision:
    """What the LLM may do for `store`: the global store's own settings are the person's; a project's only ask."""
    own_path, own = (store.config_path, store.config()) if store.label == "global" else _own_config()
    allowed = (_level(os.environ.get("CORTEX_LLM")) if os.environ.get("CORTEX_LLM") else None) \
        or str(own.get("capture.llm"))
    command = os.environ.get("CORTEX_LLM_COMMAND", "").strip() or str(own.get("capture.llm_command"))
    asked = allowed if store.label == "global" else str(store.config().get("capture.llm"))
    mode = LEVELS[min(LEVELS.index(asked), LEVELS.index(allowed))]
    return Decision(mode, command, asked, allowed, own_path)


def refused(store: Store) -> str | None:
    """The one line saying a project asks for the LLM and this machine does not allow it (how to allow it)."""
    if store.label == "global":
        return None
    try:
        if store.config().get("capture.llm") == "off":
            return None  # nothing asked: the person's own config is not even read
        decision = decide(store)
    except CortexError:
        return None  # an unreadable config.yaml: status says so
    if decision.asked == "off" or decision.allowed != "off":
        return None
    return (f"{store.config_path} asks for LLM capture (capture.llm: {decision.asked}), which this machine does not "
            f"allow; to allow it, set capture.llm: {decision.asked} in {decision.own_config} "
            f"(or CORTEX_LLM={decision.asked} in the environment)")


def warnings(store: Store) -> list[str]:
    """What `cortex status` says about the LLM settings: a project's command ignored, a request not allowed."""
    out = []
    try:
        given = store.config().get("capture.llm_command") if store.label == "project" else DEFAULT_COMMAND
    except CortexError:
        given = DEFAULT_COMMAND  # an unreadable config.yaml: status says so
    if given != DEFAULT_COMMAND:
        out.append(f"{store.config_path}: capture.llm_command is ignored: a repository's config never names a "
                   f"command to run; set it in {_own_config()[0]} or CORTEX_LLM_COMMAND")
    line = refused(store)
    if line is not None:
        out.append(line)
    return out


def notice(store: Store, place: str) -> str | None:
    """The refused-request line the first time `place` ('cli': stderr, 'log': state/cortex.log) would show it;
    None when there is none or it was said there already (recorded in state/, so it is said once)."""
    line = refused(store)
    if line is None:
        return None
    path = store.state_dir / NOTICES
    said = read_json(path, {})
    said = said if isinstance(said, dict) else {}
    if said.get(place) == line:
        return None
    said[place] = line
    with contextlib.suppress(OSError):  # a read-only store: said again next time
        atomic_write(path, json.dumps(said, sort_keys=True), durable=False)
    return line


def enabled(store: Store) -> bool:
    decision = decide(store)
    if decision.mode == "off":
        line = notice(store, "log")
        if line is not None:
            store.log(f"llm: {line}")
        return False
    if decision.mode == "auto":
        argv = shlex.split(decision.command)
        return bool(argv) and shutil.which(argv[0]) is not None
    return True


def command(store: Store) -> list[str]:
    """The person's command, with claude's hooks turned off for the child."""
    argv = shlex.split(decide(store).command)
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
