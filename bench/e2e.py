"""Hook durations as the real Claude Code records them, in real sessions on generated stores.

    python bench/e2e.py [--sizes 1000,10000] [--runs 5] [--install settings|plugin]

Needs the pinned CLI (`npm ci --prefix tests/e2e`). For each store size: a git
repository with that many generated memories (bench/gen_store.py), cortex
installed, the cache built, one warm-up session; then per run a real
`claude -p` session of two turns (stream-json input: a prompt that gets
prompt-time recall, a Write and a `[MEMORY:]` tag; then a second prompt) and
a `--resume … /compact` of it, against the fake Messages API of tests/e2e.

The numbers are Claude Code's own: `durationMs` of the `hook_success`
attachments and of `stop_hook_summary.hookInfos` in the transcript it wrote,
and the "finished with status 0 (N ms)" lines of its `--debug-file`. Claude
Code 2.1.330 records no duration for PreCompact and SessionEnd hooks (only
"completed with status 0"), so those have no row. Every run captures new
memories, so each SessionStart after the first sees a changed store and
rebuilds its briefing: these are the uncached numbers a person meets after a
session that learned something. The resident `cortex serve` stays up between
runs (CORTEX_SERVE_IDLE=120), as it does for a person working.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import generate  # noqa: E402
from bench.store import bench_env, print_machine, warm_bytecode  # noqa: E402
from tests.e2e.harness import Run, Sandbox, claude_version  # noqa: E402
from tests.helpers import commit_all  # noqa: E402

FINISHED = re.compile(r"Hooks: (?P<name>\S+) \[(?P<command>[^\]]*)\] finished with status (?P<rc>\d+) \((?P<ms>\d+)ms\)")


def durations(run: Run, skip: int = 0) -> dict[str, list[tuple[str, int]]]:
    """{hook name: [(source, ms)]} from the transcript (after its first `skip` records, which an earlier run of
    the same session wrote) and the debug log of one run."""
    found: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for record in run.records()[skip:]:
        attachment = record.get("attachment")
        if record.get("type") == "attachment" and isinstance(attachment, dict) and \
                attachment.get("type") == "hook_success" and "durationMs" in attachment and \
                "cortex" in str(attachment.get("command", "")):
            found[str(attachment.get("hookName"))].append(("transcript", int(attachment["durationMs"])))
        if record.get("type") == "system" and record.get("subtype") == "stop_hook_summary":
            for info in record.get("hookInfos") or []:
                if "cortex" in str(info.get("command", "")) and "durationMs" in info:
                    found["Stop"].append(("transcript", int(info["durationMs"])))
    if run.debug_log.exists():
        for match in FINISHED.finditer(run.debug_log.read_text(encoding="utf-8", errors="replace")):
            if "cortex" in match["command"]:
                found[match["name"]].append(("debug log", int(match["ms"])))
    return found


def session(box: Sandbox, number: int, plugin: bool) -> list[tuple[Run, int]]:
    script: list[dict[str, Any]] = [
        {"tool_use": {"name": "Write", "input": {"file_path": str(box.project / f"cache_{number}.py"),
                                                 "content": "import sqlite3\n"}}},
        {"text": f"Done.\n\n[MEMORY: decision: Shard {number} of the rate cache lives in SQLite file rates_{number}.db]"},
        {"text": "The runners have no IPv6."},
    ]
    first = box.claude(None, script=script, plugin=plugin, args=("--permission-mode", "acceptEdits"),
                       stdin_turns=["why did we pick sqlite for the cache?", "and the CI runners?"])
    written = len(first.records())
    compact = box.claude(None, script=[{"text": "Summary of the session."}], plugin=plugin,
                         stdin_turns=["/compact keep memory notes"], args=("--resume", first.session_id))
    for run in (first, compact):
        if run.rc != 0:
            raise SystemExit(f"claude exited {run.rc}: {run.stderr[-2000:]}")
    return [(first, 0), (compact, written)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--install", choices=["settings", "plugin"], default="settings")
    args = parser.parse_args()
    warm_bytecode()
    print_machine(bench_env(), 3)
    print(f"claude: {claude_version()} (Claude Code), install: {args.install}, runs: {args.runs}")
    table: dict[str, dict[int, dict[str, list[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    sizes = [int(s) for s in args.sizes.split(",")]
    # ignore_cleanup_errors: the resident `cortex serve` may still be writing its state when the folder goes
    with tempfile.TemporaryDirectory(prefix="cortex-bench-e2e-", ignore_cleanup_errors=True) as tmp:
        for size in sizes:
            box = Sandbox(Path(tmp) / str(size))
            box.extra_env = {"CORTEX_SERVE_IDLE": "120"}
            generate(box.project / ".cortex", size)
            box.cortex("init", "--claude") if args.install == "settings" else box.cortex("init")
            commit_all(box.project, f"{size} memories")
            box.cortex("reindex")
            session(box, 0, args.install == "plugin")  # warm-up: page cache, briefing cache, resident server
            for number in range(1, args.runs + 1):
                for run, skip in session(box, number, args.install == "plugin"):
                    for name, values in durations(run, skip).items():
                        for source, ms in values:
                            table[name][size][source].append(ms)
    header = "| hook (as Claude Code names it) | source | " + " | ".join(f"{s:,} memories" for s in sizes) + " |"
    print()
    print(header)
    print("|" + "---|" * (2 + len(sizes)))
    for name in sorted(table):
        for source in ("transcript", "debug log"):
            cells = []
            for size in sizes:
                times = table[name][size].get(source, [])
                cells.append(f"{statistics.median(times):.0f} ms (n={len(times)})" if times else "—")
            if any(cell != "—" for cell in cells):
                print(f"| {name} | {source} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
