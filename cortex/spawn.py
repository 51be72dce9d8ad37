"""Detached cortex processes: upkeep, the LLM worker, the resident server, the last capture of a session.

A hook must return within its budget, so slow work is handed to `python -m
cortex …` in its own session (it outlives the hook and never gets the
terminal's signals), with its output appended to a log under `state/`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys


def detached(args: list[str], state_dir: str, log_name: str = "worker.log", cwd: str | None = None,
             stdin: bytes | None = None, env: dict[str, str] | None = None, wait: float = 0.5) -> None:
    """Start `python -m cortex <args>` detached; `stdin` is written to it, waiting at most `wait` seconds."""
    import subprocess

    os.makedirs(state_dir, exist_ok=True)
    with open(os.path.join(state_dir, log_name), "a", encoding="utf-8") as log:
        child = subprocess.Popen([sys.executable, "-m", "cortex", *args], cwd=cwd,
                                 stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                 stdout=log, stderr=log, start_new_session=True, close_fds=True,
                                 env=dict(os.environ, **(env or {})))
        if stdin is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # it carries on in its own session
                child.communicate(stdin, timeout=wait)


def start_server(store_root: str) -> None:
    """Start `cortex serve` for a store in its own session, unless one runs already (the SessionStart hooks)."""
    from cortex.layout import private_dir, server_up

    if server_up(store_root) or private_dir(create=True) is None:
        return  # one runs; or there is no private folder for its socket (the prompt hook recalls in its own process)
    args = ["serve", "--dir", store_root, "--idle", os.environ.get("CORTEX_SERVE_IDLE", "900")]  # tests shorten it
    with contextlib.suppress(OSError):  # a read-only store: the prompt hook recalls in its own process
        detached(args, os.path.join(store_root, "state"), "serve.log", env=_one_blas_thread())


def nested() -> bool:
    """True inside a `claude -p` that cortex started (`CORTEX_NESTED=1`): cortex's hooks must do nothing there."""
    return os.environ.get("CORTEX_NESTED") == "1"


def resident() -> None:
    """A process that stays (serve, mcp, watch, the upkeep and the worker): collect again, with what was loaded
    so far (modules, the model, the cache) frozen out of every pass."""
    gc.freeze()
    gc.enable()


def briefing_ahead(store_root: str) -> None:
    """After cortex changed the project store at `store_root` (a write, a git hook's sync) with no `cortex serve`
    to do it: build the next SessionStart's briefing in a detached process (`cortex.briefing.build_next`), so
    that session start reads a file instead of building it (seconds at 100,000 memories). Only for a store
    that has briefed a session before (`state/briefing.json`); else the SessionStart builds it."""
    from cortex.layout import server_up

    if server_up(store_root) or not os.path.exists(os.path.join(store_root, "state", "briefing.json")):
        return
    import subprocess

    with contextlib.suppress(OSError), open(os.path.join(store_root, "state", "worker.log"), "a", encoding="utf-8") as log:
        # Niced: it must not take the core the command that started it (or the next one) is still using.
        subprocess.Popen([sys.executable, "-c", "import os, sys; os.nice(10); from cortex.briefing import build_next; "
                          "build_next(sys.argv[1], commits=True)", store_root],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
                         env=_one_blas_thread())


def _one_blas_thread() -> dict[str, str]:
    """This process's environment for a resident or bulk child, with numpy's BLAS on one thread unless it says
    otherwise: a matrix-vector product per query spins a second thread instead of speeding up on 2 cores."""
    from cortex import cap_threads

    env = dict(os.environ)
    cap_threads(env)
    return env
