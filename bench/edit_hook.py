"""The edit hook (`cortex hook pre-tool-use` on an Edit) on a copy of a store, served and not, beside `python -c pass`.

    python bench/edit_hook.py STORE_REPO [--runs 7] [--file PATH]

STORE_REPO is a git repository holding `.cortex/` (e.g. one `bench/gen_store.py` made); it is copied first
and the copy measured. Each run is a fresh process with a new session id (so the once-per-session record never
skips it), for a file memories are bound to (default: the file the most memories name) and for a file none is;
rounds are interleaved with `pass`, the first one dropped. Prints medians and the load average. Run it with
`env -u PYTHONDONTWRITEBYTECODE` so the package's bytecode is cached as an install's is.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

CORTEX = [str(Path(sys.executable).parent / "cortex")]


def _payload(repo: Path, path: str) -> str:
    return json.dumps({"session_id": uuid.uuid4().hex, "cwd": str(repo), "hook_event_name": "PreToolUse",
                       "tool_name": "Edit", "tool_input": {"file_path": str(repo / path), "old_string": "a",
                                                          "new_string": "b"}})


def _timed(command: list[str], cwd: Path, stdin: str = "") -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, cwd=cwd)
    return time.perf_counter() - start, done


def _most_named(repo: Path) -> str:
    counts: collections.Counter[str] = collections.Counter()
    for path in (repo / ".cortex" / "memories").rglob("*.md"):
        found = re.search(r"^files: \[(.+?)\]$", path.read_text(encoding="utf-8"), re.M)
        if found:
            counts.update(name.strip() for name in found.group(1).split(","))
    return counts.most_common(1)[0][0]


def measure(repo: Path, bound: str, runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"pass": [], "bound": [], "unrelated": []}
    for n in range(runs + 1):
        took, _ = _timed([sys.executable, "-c", "pass"], repo)
        shown, done = _timed([*CORTEX, "hook", "pre-tool-use"], repo, _payload(repo, bound))
        assert done.returncode == 0 and "additionalContext" in done.stdout, done
        silent, quiet = _timed([*CORTEX, "hook", "pre-tool-use"], repo, _payload(repo, "no/such/file.py"))
        assert quiet.returncode == 0 and quiet.stdout == "", quiet
        if n:
            times["pass"].append(took)
            times["bound"].append(shown)
            times["unrelated"].append(silent)
    return {name: statistics.median(values) * 1000 for name, values in times.items()}


def _ready(repo: Path) -> bool:
    from cortex import serve

    return bool((serve.ask(str(repo / ".cortex"), {"op": "ping"}, 2.0) or {}).get("ready"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store_repo", type=Path)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--file", help="the file to edit (default: the one the most memories name)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder) / "repo"
        subprocess.run(["cp", "-a", str(args.store_repo), str(repo)], check=True)
        shutil.rmtree(repo / ".cortex" / "state", ignore_errors=True)
        bound = args.file or _most_named(repo)
        alone = measure(repo, bound, args.runs)
        server = subprocess.Popen([*CORTEX, "serve", "--idle", "600"], cwd=repo, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 600
            while not _ready(repo) and time.time() < deadline:
                time.sleep(0.5)
            served = measure(repo, bound, args.runs)
        finally:
            server.terminate()
            server.wait(timeout=60)
    for name, found in (("not served", alone), ("served", served)):
        print(f"{name}: pass {found['pass']:.0f} ms, bound file {found['bound']:.0f} ms "
              f"({found['bound'] / found['pass']:.1f}x pass), unrelated file {found['unrelated']:.0f} ms "
              f"({found['unrelated'] / found['pass']:.1f}x)")
    print(f"file {bound}, {args.runs} runs each, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
