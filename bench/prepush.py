"""Whole `git push` and `git checkout` times through cortex's installed hooks (issue 39: pre-push <= 0.5 s when a
push adds nothing under `.cortex/`, post-checkout <= 100 ms at 10,000 memories).

    python bench/prepush.py [--sizes 30,10000] [--runs 5]

For generated stores of N memories inside real git repositories, each
pushing to a bare remote (`git init --bare`) with the hooks that `cortex
init --git-hooks` installs:

- (a) one commit that touches nothing under `.cortex/`, pushed to a branch
  the remote already has;
- (b) the same kind of commit pushed as a new branch.

Both pushes add the same amount of work, so (b) should cost what (a) costs
whatever the size of the store: a new branch is compared with what the
remote already has, not with an empty tree. Also printed: the same push
with `--no-verify` (git alone, no hook), and a branch switch (`git checkout`
of a branch that differs in app.py) with the post-checkout hook and without
any hook. Medians, byte code compiled first.
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
from bench.store import bench_env, print_machine, warm_bytecode  # noqa: E402

SIGNATURE = pygit2.Signature("bench", "bench@example.com")


def git(root: Path, env: dict[str, str], *args: str) -> float:
    """Run git in `root`; returns its wall time in ms."""
    start = time.perf_counter()
    done = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return elapsed


def code_commit(repo: pygit2.Repository, parent: pygit2.Oid, ref: str, n: int) -> None:
    """A commit on `parent` that changes only app.py, written to `ref` (no checkout: no post-checkout hook)."""
    base = repo[parent].peel(pygit2.Commit)
    builder = repo.TreeBuilder(base.tree)
    builder.insert("app.py", repo.create_blob(f"print('code change {n}')\n".encode()), pygit2.enums.FileMode.BLOB)
    repo.create_commit(ref, SIGNATURE, SIGNATURE, f"code change {n}", builder.write(), [base.id])


def setup(root: Path, size: int, env: dict[str, str]) -> pygit2.Repository:
    """A repository holding a store of `size` memories, its projections and app.py, pushed (hook not yet installed) to a bare remote."""
    generate(root / ".cortex", size)
    (root / "app.py").write_text("print('hello')\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "cortex", "project"], cwd=root, env=env, check=True, capture_output=True)
    repo = pygit2.init_repository(str(root), initial_head="main")
    repo.index.add_all()
    repo.index.write()
    repo.create_commit("HEAD", SIGNATURE, SIGNATURE, "store", repo.index.write_tree(), [])
    remote = root.parent / f"{root.name}-remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(root, env, "remote", "add", "origin", str(remote))
    git(root, env, "push", "-q", "origin", "main")
    from cortex.gitops import install_git_hooks

    install_git_hooks(root, python=sys.executable)
    return repo


def checkouts(root: Path, env: dict[str, str], runs: int) -> tuple[float, float]:
    """Median ms of a branch switch with cortex's post-checkout hook, and with no hook at all."""
    git(root, env, "reset", "-q", "--hard", "main")
    git(root, env, "branch", "-f", "other", "new-0")
    hooked, plain = [], []
    for _ in range(runs + 1):  # the first round warms the page cache
        for branch in ("other", "main"):
            hooked.append(git(root, env, "checkout", "-q", branch))
        for branch in ("other", "main"):
            plain.append(git(root, env, "-c", f"core.hooksPath={root / 'no-hooks'}", "checkout", "-q", branch))
    return statistics.median(hooked[2:]), statistics.median(plain[2:])


def main() -> None:
    parser = argparse.ArgumentParser(description="git push through cortex's pre-push hook: existing vs new branch")
    parser.add_argument("--sizes", default="30,10000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    warm_bytecode()
    env = bench_env()
    print_machine(env, args.runs)
    print(f"{'memories':>9} {'(a) existing branch ms':>23} {'(b) new branch ms':>18} {'b/a':>5} {'no hook ms':>11}"
          f" {'checkout ms':>15} {'no hook ms':>15}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"s{size}"
            repo = setup(root, size, env)
            existing, new, bare = [], [], []
            for i in range(args.runs + 1):  # the first round warms the page cache
                code_commit(repo, repo.references["refs/heads/main"].target, "refs/heads/main", 3 * i)
                existing.append(git(root, env, "push", "-q", "origin", "main"))
                code_commit(repo, repo.references["refs/heads/main"].target, f"refs/heads/new-{i}", 3 * i + 1)
                new.append(git(root, env, "push", "-q", "origin", f"new-{i}"))
                code_commit(repo, repo.references["refs/heads/main"].target, "refs/heads/main", 3 * i + 2)
                bare.append(git(root, env, "push", "-q", "--no-verify", "origin", "main"))
            a, b, c = (statistics.median(times[1:]) for times in (existing, new, bare))
            hooked, plain = checkouts(root, env, args.runs)
            print(f"{size:>9} {a:>23.0f} {b:>18.0f} {b / a:>5.2f} {c:>11.0f} {hooked:>15.0f} {plain:>15.0f}")


if __name__ == "__main__":
    main()
