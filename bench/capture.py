"""The Stop hook on the shared transcripts: records, memories by layer, whole-process time.

    python bench/capture.py [--runs 5] [--transcripts ../shared/data/transcripts] [--store-size 10000] [--only NAME]

For each transcript: a fresh store in a fresh git repository; `cortex hook
stop` from cold (no cursor: the whole transcript) and, after appending one
more turn, the incremental Stop. Medians of `--runs` fresh processes (byte
code compiled first). Before each timing the bench waits for the detached
upkeep (`cortex maintain`: links, daily gc) a previous Stop started, as a
person's next turn would come seconds later. `--store-size N` starts each
project from a copy of one repository holding N generated memories and
their pages, committed and indexed (the Stop then dedups against, and
stages into, a real store; git's index is refreshed after the copy, as a
clone's would be); `--only` keeps the transcripts whose path contains NAME.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.store import bench_env, median_ms, warm_bytecode  # noqa: E402

CORTEX = [sys.executable, "-m", "cortex"]
DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts"
TURN = json.dumps({"type": "assistant", "uuid": "bench-extra", "sessionId": "bench",
                   "message": {"id": "bench-msg", "role": "assistant",
                               "content": [{"type": "text", "text": "Done; the tests pass."}]}})


def fresh_project(root: Path, env: dict[str, str]) -> None:
    pygit2.init_repository(str(root), initial_head="main")
    subprocess.run([*CORTEX, "init"], cwd=root, env=env, check=True, capture_output=True)


def stop(root: Path, transcript: Path, env: dict[str, str]) -> float:
    payload = json.dumps({"session_id": "bench", "transcript_path": str(transcript), "cwd": str(root),
                          "hook_event_name": "Stop", "stop_hook_active": False})
    start = time.perf_counter()
    result = subprocess.run([*CORTEX, "hook", "stop"], cwd=root, env=env, input=payload.encode(), capture_output=True)
    elapsed = (time.perf_counter() - start) * 1000
    assert result.returncode == 0 and not result.stdout, result
    return elapsed


def template_project(root: Path, size: int, env: dict[str, str]) -> None:
    """A repository with `size` generated memories, committed, its cache built (copied for each run)."""
    from bench.gen_store import generate

    fresh_project(root, env)
    generate(root / ".cortex", size)
    # No contextual vectors: each Stop's detached upkeep would otherwise embed every generated memory with the
    # transformer (~15 min at 10,000), run after run, sharing the CPU with the Stops being timed (capture reads
    # the static vectors only).
    config = root / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("contextual: true", "contextual: false"),
                      encoding="utf-8")
    subprocess.run(["git", "add", "-A"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-q", "-m", "store"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run([*CORTEX, "reindex"], cwd=root, env=env, check=True, capture_output=True)
    # A committed store has its pages committed too (the Stop and pre-push keep them so).
    subprocess.run([*CORTEX, "project"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(["git", "add", "-A", ".cortex"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-q", "-m", "pages"], cwd=root, env=env, check=True, capture_output=True)


def settle(root: Path, limit: float = 30.0) -> None:
    """Wait until no detached `cortex maintain` runs in this project (so it does not share the CPU with a timing)."""
    import time

    from cortex.layout import lock_held

    lock = root / ".cortex" / "state" / "maintain-run.lock"
    deadline = time.time() + limit
    time.sleep(0.3)  # let a just-spawned process take its lock
    while time.time() < deadline and lock.exists() and lock_held(str(lock)):
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description="cortex Stop hook on real transcripts")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--transcripts", type=Path, default=DEFAULT)
    parser.add_argument("--store-size", type=int, default=0, help="memories already in the store (committed)")
    parser.add_argument("--only", default="", help="only transcripts whose path contains this")
    args = parser.parse_args()
    warm_bytecode()
    env = bench_env() | {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@example.com",
                         "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@example.com"}
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"python -c pass: {median_ms([sys.executable, '-c', 'pass'], args.runs, env=env):.0f} ms")
    print("| transcript | bytes | records | memories (by layer) | Stop, cold, ms | Stop, one more turn, ms |")
    print("|---|---|---|---|---|---|")
    sources = sorted(p for p in [*args.transcripts.rglob("*.jsonl"), *args.transcripts.rglob("chat.json")]
                     if args.only in str(p))
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template"
        if args.store_size:
            template_project(template, args.store_size, env)
            print(f"store: {args.store_size:,} memories, committed and indexed")
        for source in sources:
            cold, warm, layers, records = [], [], {}, 0
            for run in range(args.runs):
                root = Path(tmp) / f"{source.stem}-{run}"
                if args.store_size:
                    shutil.copytree(template, root, symlinks=True)
                    # A copy has new inodes and ctimes, so git's index no longer vouches for any file and `git
                    # status` would re-hash all 10,000 (0.5 s); a real clone's index matches its files.
                    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=root, env=env, capture_output=True)
                    # The same for the pages' stamp (it keeps each page's inode): `project` finds them current.
                    subprocess.run([*CORTEX, "project"], cwd=root, env=env, capture_output=True)
                else:
                    fresh_project(root, env)
                transcript = root.parent / f"{source.stem}-{run}{source.suffix}"
                shutil.copy(source, transcript)
                cold.append(stop(root, transcript, env))
                if run == 0:
                    report = json.loads(subprocess.run([*CORTEX, "capture", str(transcript), "--from-start", "--json"],
                                                       cwd=root, env=env, capture_output=True, check=True).stdout)
                    records = report["records"]
                    for path in (root / ".cortex" / "memories").rglob("*.md"):
                        if args.store_size and (template / path.relative_to(root)).exists():
                            continue  # one of the generated memories
                        text = path.read_text(encoding="utf-8")
                        layer = text.split("layer: ", 1)[1].split("}", 1)[0].split(",")[0] if "layer: " in text else "?"
                        layers[layer] = layers.get(layer, 0) + 1
                if source.suffix == ".jsonl":
                    settle(root)  # the detached upkeep the first Stop started (a person types for seconds)
                    with open(transcript, "a", encoding="utf-8") as handle:
                        handle.write(TURN + "\n")
                    warm.append(stop(root, transcript, env))
                settle(root)
            by_layer = ", ".join(f"{k} {v}" for k, v in sorted(layers.items())) or "0"
            incremental = f"{statistics.median(warm):.0f}" if warm else "n/a (JSON array)"
            print(f"| {source.relative_to(args.transcripts)} | {source.stat().st_size:,} | {records:,} | {by_layer} "
                  f"| {statistics.median(cold):.0f} | {incremental} |")


if __name__ == "__main__":
    main()
