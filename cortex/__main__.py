"""`python -m cortex` and the `cortex` console script.

Hooks run as a fresh process on every event, so `cortex hook <event>` is
dispatched here without importing click (~30 ms); everything else goes to
the click command line in `cortex.cli`.
"""

from __future__ import annotations

import sys

CLAUDE_EVENTS = {"stop": "claude_stop", "pre-compact": "claude_stop", "session-start": "claude_session_start"}


def run() -> None:
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "hook" and args[1] in CLAUDE_EVENTS:
        from cortex import hooks

        handler = getattr(hooks, CLAUDE_EVENTS[args[1]])
        sys.exit(handler(sys.stdin.read() if not sys.stdin.isatty() else ""))
    from cortex.cli import main

    main()


if __name__ == "__main__":
    run()
