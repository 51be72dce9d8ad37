"""Builders for real situations: git repositories, `cortex` subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pygit2

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_STORE = REPO_ROOT / ".cortex-example"


def cortex_command() -> list[str]:
    """The installed `cortex` console script next to this Python, else `python -m cortex`."""
    script = Path(sys.executable).parent / "cortex"
    if script.exists():
        return [str(script)]
    found = shutil.which("cortex")
    return [found] if found else [sys.executable, "-m", "cortex"]


def cortex(*args: str, cwd: Path, input: str | None = None, check: bool = True,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real `cortex` command as a subprocess."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    result = subprocess.run(
        [*cortex_command(), *args], cwd=cwd, input=input, capture_output=True, text=True, env=full_env, timeout=120
    )
    if check and result.returncode != 0:
        raise AssertionError(f"cortex {' '.join(args)} exited {result.returncode}\nstdout:{result.stdout}\nstderr:{result.stderr}")
    return result


def cortex_json(*args: str, cwd: Path, **kwargs: Any) -> Any:
    return json.loads(cortex(*args, "--json", cwd=cwd, **kwargs).stdout)


def commit_all(repo_path: Path, message: str) -> str:
    """Stage everything and commit on the current branch (pygit2)."""
    repo = pygit2.Repository(str(repo_path))
    repo.index.add_all()
    repo.index.write()
    tree = repo.index.write_tree()
    signature = pygit2.Signature("Cortex Test", "test@example.com")
    parents = [] if repo.head_is_unborn else [repo.head.target]
    ref = "HEAD" if not repo.head_is_unborn else "refs/heads/main"
    oid = repo.create_commit(ref, signature, signature, message, tree, parents)
    return str(oid)


def make_repo(path: Path, branch: str = "main") -> Path:
    """A git repository on `branch` with a README committed."""
    path.mkdir(parents=True, exist_ok=True)
    pygit2.init_repository(str(path), initial_head=branch)
    (path / "README.md").write_text("# demo project\n", encoding="utf-8")
    (path / "app.py").write_text("print('hello')\n", encoding="utf-8")
    commit_all(path, "initial commit")
    return path


def checkout_new_branch(repo_path: Path, name: str) -> None:
    repo = pygit2.Repository(str(repo_path))
    commit = repo.revparse_single("HEAD")
    repo.branches.local.create(name, commit)
    repo.checkout(f"refs/heads/{name}")
