"""`python -m cortex` and the `cortex` console script.

Hooks run as a fresh process on every event, so `cortex hook <event>` is dispatched here without importing click;
everything else goes to `cortex.cli`.
"""

from __future__ import annotations

import contextlib
import sys

CLAUDE_EVENTS = {"stop": "claude_stop", "pre-compact": "claude_stop", "session-start": "claude_session_start",
                 "prompt": "claude_prompt", "session-end": "claude_session_end",
                 "subagent-start": "claude_subagent_start", "subagent-stop": "claude_subagent_stop",
                 "pre-tool-use": "claude_pre_tool_use"}


# Commands whose matrix products are big enough for numpy's BLAS threads to pay (a rebuild and the upkeep compare
# thousands of memories at once); every other command and hook runs numpy on one BLAS thread. Not `consolidate`:
# the contextual model's attention is thousands of small products, on which a second thread spins.
BULK = frozenset({"reindex", "maintain", "gc", "verify", "index-code", "report", "sync"})


def post_checkout(args: list[str]) -> None:
    """git's post-checkout after a branch switch: the next session start's briefing built in a detached process.
    Nothing else (and nothing heavier than `os` loaded): every command syncs the cache by stat first, and a
    running server watches the files."""
    import os

    from cortex import layout

    if len(args) >= 3 and args[2] != "1":
        return  # a file checkout, not a branch switch
    store_root = layout.find_store(os.getcwd())
    if store_root is not None:
        from cortex.spawn import briefing_ahead

        briefing_ahead(store_root)


def run() -> None:
    import gc
    import os

    # No cyclic garbage collection in a command or hook: loading the cache makes tens of thousands of objects at
    # once and the collector's passes over them dominate a short process. Long-lived ones collect again
    # (`cortex.spawn.resident`).
    gc.disable()
    args = sys.argv[1:]
    from cortex import cap_threads, uncap_threads

    if not args or args[0] not in BULK:
        # One query or one memory at a time is a few matrix-vector products: a second BLAS thread spins on them
        # instead of speeding them up. Set before numpy is imported; a value already set is kept.
        cap_threads(os.environ)
    else:  # bulk work (`maintain` filling vectors, niced) uses every core, also when a one-thread command started it
        uncap_threads(os.environ)
    if len(args) >= 2 and args[0] == "hook" and args[1] == "git-post-checkout":
        with contextlib.suppress(Exception):  # never breaks the git command: the next command syncs the cache
            post_checkout(args[2:])
        _leave(0)
    if len(args) >= 2 and args[0] == "hook" and args[1] in CLAUDE_EVENTS:
        raw = sys.stdin.read() if not sys.stdin.isatty() else ""
        if args[1] in ("session-start", "prompt", "pre-tool-use"):
            from cortex import hotpath

            with contextlib.suppress(Exception):  # the full hook below logs whatever is wrong
                fast = {"session-start": hotpath.session_start, "prompt": hotpath.prompt,
                        "pre-tool-use": hotpath.pre_tool_use}[args[1]]
                if fast(raw):  # the cached briefing, or the resident server's answer: no store, no click
                    _leave(0)  # and no interpreter teardown (what it wrote is closed)
        from cortex import hooks

        handler = getattr(hooks, CLAUDE_EVENTS[args[1]])
        sys.exit(handler(raw))
    from cortex import cli

    cli.PROCESS_ARGV = args  # a read-only command may end without tearing down what it loaded (`QUICK_EXIT`)
    try:
        cli.main()
    except SystemExit as exc:
        if cli.quick_exit:  # a read-only command is done: leave without tearing down what it loaded
            _leave(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
        raise


def _leave(code: int) -> None:
    """End the process with `code` once stdout and stderr are out, without tearing down what it loaded."""
    import os

    with contextlib.suppress(OSError):  # a closed pipe (`cortex list | head`): nothing more to say
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
