"""Whole-process time of `cortex project` and of the pre-push hook.

    python bench/projections.py [--sizes 1000,10000] [--runs 5]

For generated stores inside real git repositories (pygit2): `cortex project`
when a decision changed (pages rewritten), `cortex project` when nothing
changed, and `cortex hook git-pre-push` (what the installed hook runs) when
nothing changed. Medians of fresh processes, byte code compiled first.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.gen_store import generate  # noqa: E402
from bench.store import bench_env, median_ms, print_machine, warm_bytecode  # noqa: E402

CORTEX = [sys.executable, "-m", "cortex"]


def commit_everything(repo_path: Path) -> None:
    repo = pygit2.init_repository(str(repo_path), initial_head="main")
    repo.index.add_all()
    repo.index.write()
    signature = pygit2.Signature("bench", "bench@example.com")
    parents = [] if repo.head_is_unborn else [repo.head.target]
    repo.create_commit("HEAD", signature, signature, "store", repo.index.write_tree(), parents)


def main() -> None:
    parser = argparse.ArgumentParser(description="cortex project and pre-push, whole process")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    warm_bytecode()
    env = bench_env()
    print_machine(env, args.runs)
    print(f"{'memories':>9} {'project (changed) ms':>21} {'project (current) ms':>21} {'pre-push (current) ms':>22}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"s{size}"
            store = generate(root / ".cortex", size)
            subprocess.run([*CORTEX, "project"], cwd=root, env=env, check=True, capture_output=True)
            commit_everything(root)
            time.sleep(2.1)  # past the cache's racy window
            decisions = sorted(store.memories_dir.glob("decision/*.md"))
            changed = []
            for i in range(args.runs + 1):
                path = decisions[i]
                path.write_text(path.read_text(encoding="utf-8").replace("(", f"(edit {i} ", 1), encoding="utf-8")
                start = time.perf_counter()
                subprocess.run([*CORTEX, "project"], cwd=root, env=env, check=True, capture_output=True)
                changed.append((time.perf_counter() - start) * 1000)
            changed_ms = sorted(changed[1:])[len(changed[1:]) // 2]
            current = median_ms([*CORTEX, "project"], args.runs, cwd=root, env=env)
            commit_everything(root)
            remote_sha = str(pygit2.Repository(str(root)).head.target)
            (root / "app.py").write_text("print('a code change')\n", encoding="utf-8")
            commit_everything(root)  # the usual push: new commits, nothing under .cortex/
            local_sha = str(pygit2.Repository(str(root)).head.target)
            refs = f"refs/heads/main {local_sha} refs/heads/main {remote_sha}\n".encode()
            prepush = []
            for _ in range(args.runs + 1):
                start = time.perf_counter()
                subprocess.run([*CORTEX, "hook", "git-pre-push", "origin", "/dev/null"], cwd=root, env=env,
                               input=refs, check=True, capture_output=True)
                prepush.append((time.perf_counter() - start) * 1000)
            prepush_ms = sorted(prepush[1:])[len(prepush[1:]) // 2]
            print(f"{size:>9} {changed_ms:>21.0f} {current:>21.0f} {prepush_ms:>22.0f}")


if __name__ == "__main__":
    main()
