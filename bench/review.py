"""How long `cortex review BASE..HEAD` takes on a large store (the whole process, as CI runs it).

    python bench/review.py [--count 10000] [--changed 20] [--runs 3]

A git repository holds a generated store of COUNT memories on main (bench/gen_store.py); a branch adds
CHANGED decisions, supersedes and archives a few, adds gotchas and deletes a file memories name. Prints the
median wall time of `cortex review main..feature` and of `--json`, and the comment's length.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gen_store import generate  # noqa: E402
from cortex.memory import Memory  # noqa: E402


def _commit(repo: pygit2.Repository, message: str) -> None:
    repo.index.add_all()
    repo.index.write()
    signature = pygit2.Signature("bench", "bench@example.com")
    parents = [] if repo.head_is_unborn else [repo.head.target]
    repo.create_commit("HEAD", signature, signature, message, repo.index.write_tree(), parents)


def build(folder: Path, count: int, changed: int) -> Path:
    repo = pygit2.init_repository(str(folder), initial_head="main")
    store = generate(folder / ".cortex", count)
    named = sorted({f for m in store.list(statuses=("active",)) for f in m.files})[:3]
    for path in named:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text("code\n", encoding="utf-8")
    _commit(repo, "base")
    repo.branches.local.create("feature", repo.revparse_single("HEAD"))
    repo.checkout("refs/heads/feature")
    decisions = [m for m in store.list(statuses=("active",)) if m.type == "decision"]
    for n in range(changed):
        new = store.create(Memory(id="", type="decision", title=f"Decision {n} of the branch",
                                  body=f"We chose option {n} for the queue worker retry timeout.\n\nRejected: option {n + 1}.\n"))
        if n < len(decisions) and n % 3 == 0:
            store.supersede(decisions[n].id, new.id)
        elif n < len(decisions) and n % 3 == 1:
            store.archive(decisions[n].id)
        store.create(Memory(id="", type="gotcha", title=f"Gotcha {n} of the branch", body="Watch the retry timeout.\n"))
    for path in named:
        (folder / path).unlink()
    _commit(repo, "feature")
    return folder


def timed(args: list[str], cwd: Path, runs: int) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=True).stdout
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    cortex = str(Path(sys.executable).parent / "cortex")
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / "project", options.count, options.changed)
        markdown, text = timed([cortex, "review", "main..feature"], folder, options.runs)
        as_json, _ = timed([cortex, "review", "main..feature", "--json"], folder, options.runs)
        print(f"store: {options.count} memories, branch changes {options.changed} decisions")
        print(f"cortex review main..feature         median {markdown * 1000:.0f} ms, comment {len(text)} chars")
        print(f"cortex review main..feature --json  median {as_json * 1000:.0f} ms")


if __name__ == "__main__":
    main()
