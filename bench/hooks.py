"""Whole-process SessionStart hook: cached and uncached briefing, against `python -c pass`.

    python bench/hooks.py [--sizes 1000,10000] [--runs 5]

Generated stores inside real git repositories. Uncached = the briefing cache
deleted before each run (the manifest is warm); cached = nothing changed since
the last SessionStart. Prints medians, the ratio to a bare Python start in the
same run, the briefing's token count (characters / 4), and the UserPromptSubmit
hook with recall in its own fresh process (no resident server yet).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import generate  # noqa: E402
from bench.store import bench_env, print_machine, warm_bytecode  # noqa: E402

CORTEX = [sys.executable, "-m", "cortex"]


def session_start(root: Path, env: dict[str, str]) -> tuple[float, str]:
    payload = json.dumps({"session_id": "bench", "cwd": str(root), "hook_event_name": "SessionStart", "source": "startup"})
    start = time.perf_counter()
    result = subprocess.run([*CORTEX, "hook", "session-start"], cwd=root, env=env, input=payload.encode(),
                            capture_output=True, check=True)
    return (time.perf_counter() - start) * 1000, json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]


PROMPTS = ["why did we pick sqlite for the cache?", "flaky test in ci again", "redis timeout on deploy"]


def prompt_times(root: Path, env: dict[str, str], runs: int) -> float:
    times = []
    for n in range(runs + 1):
        payload = json.dumps({"session_id": "bench", "cwd": str(root), "hook_event_name": "UserPromptSubmit",
                              "prompt": PROMPTS[n % 3]})
        start = time.perf_counter()
        subprocess.run([*CORTEX, "hook", "prompt"], cwd=root, env=env, input=payload.encode(), capture_output=True, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[1:])


def wait_for_server(root: Path) -> bool:
    """The SessionStart runs above started `cortex serve`; wait until it answers (it loads the index first)."""
    from cortex import serve

    deadline = time.time() + 120
    while time.time() < deadline:
        if serve.ask(str(root / ".cortex"), {"op": "ping"}, timeout=30) is not None:  # answered once warm
            return True
        time.sleep(0.2)
    return False


def stop_server(root: Path) -> None:
    import os
    import signal

    pid = (__import__("cortex.serve", fromlist=["ask"]).ask(str(root / ".cortex"), {"op": "ping"}) or {}).get("pid")
    if isinstance(pid, int):
        os.kill(pid, signal.SIGTERM)
        time.sleep(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description="SessionStart hook, whole process")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    warm_bytecode()
    env = bench_env()
    bare = print_machine(env, args.runs)
    print("| memories | SessionStart uncached | SessionStart cached | cached / bare Python | briefing tokens "
          "| prompt hook, served | prompt hook, no server |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"s{size}"
            generate(root / ".cortex", size)
            repo = pygit2.init_repository(str(root), initial_head="main")
            (root / "app.py").write_text("print('hi')\n", encoding="utf-8")
            repo.index.add("app.py")
            repo.index.write()
            signature = pygit2.Signature("bench", "bench@example.com")
            repo.create_commit("HEAD", signature, signature, "init", repo.index.write_tree(), [])
            time.sleep(2.1)
            session_start(root, env)  # builds the manifest
            uncached, cached = [], []
            text = ""
            for _ in range(args.runs):
                (root / ".cortex" / "state" / "briefing.json").unlink(missing_ok=True)
                elapsed, text = session_start(root, env)
                uncached.append(elapsed)
            wait_for_server(root)  # SessionStart started `cortex serve`: time the cached path once it is up
            for _ in range(args.runs + 1):
                cached.append(session_start(root, env)[0])
            cached_ms = statistics.median(cached[1:])
            served = prompt_times(root, env, args.runs) if wait_for_server(root) else float("nan")
            stop_server(root)
            unserved = prompt_times(root, env, args.runs)
            print(f"| {size:,} | {statistics.median(uncached):.0f} ms | {cached_ms:.0f} ms | {cached_ms / bare:.1f} "
                  f"| {len(text) // 4 + (len(text) % 4 > 0)} | {served:.0f} ms | {unserved:.0f} ms |")


if __name__ == "__main__":
    main()
