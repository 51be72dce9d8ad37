"""Builders for real situations: git repositories, memories written in process, `cortex` subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pygit2

from cortex.memory import Memory, title_from_text
from cortex.store import Store

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_STORE = REPO_ROOT / ".cortex-example"

# A memory file as DESIGN.md §2 shows it: every field, a flow list, a link.
CANONICAL_MEMORY = """\
---
id: 3f9a1c07d2e4
type: decision
title: Use SQLite, not Postgres, for the local cache
status: active
confidence: 0.9
priority: 7
pinned: false
scope: project
branch: main
tags: [storage, cache]
files: [cortex/index/store.py]
created: 2026-11-21T20:50:00Z
updated: 2026-11-21T20:50:00Z
source: {kind: transcript, session: 5c1e, layer: self-report}
links:
  - {rel: relates_to, to: 8b0d52e1aa90, strength: 0.42}
---
We keep the cache in SQLite because ...

Rejected: Postgres (needs a server), JSON files (no FTS).
"""


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


def wait_for(predicate: Any, seconds: float = 60.0) -> bool:
    """Poll `predicate` every 0.1 s until it holds (True) or `seconds` pass (False)."""
    import time

    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def add_bare_remote(project: Path, folder: Path) -> Path:
    """A bare repository `folder/remote.git`, added to `project` as `origin`."""
    remote = folder / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(project, "remote", "add", "origin", str(remote))
    return remote


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real git CLI in `repo`."""
    result = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def hook(event: str, cwd: Path, payload: dict[str, Any] | str, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    """Run `cortex hook <event>` as Claude Code does: a fresh process with the JSON payload on stdin."""
    raw = payload if isinstance(payload, str) else json.dumps(payload)
    return cortex("hook", event, cwd=cwd, input=raw, env=env, check=False)


def remember(where: Store | Path, text: str, *, type: str = "context", title: str | None = None, link: bool = True,
             **fields: Any) -> Memory:
    """Save a memory in process, as `cortex remember TEXT` saves it (without a subprocess).

    Type `context`, the title from the first sentence, confidence 0.9, priority 5, source manual;
    `fields` (pinned, priority, tags, files, ...) as the command's options set them. Like the command,
    it is then linked to the store's other memories (links, flagged near-duplicates); `link=False` skips that.
    `where` is a store or a folder inside a project.
    """
    store = where if isinstance(where, Store) else Store.locate(where)
    fields = {"confidence": 0.9, "priority": 5, "source": {"kind": "manual"}} | fields
    created = store.create(Memory(id="", type=type, title=(title or title_from_text(text)).strip(),
                                  body=text.strip() + "\n", **fields))
    if link:
        from cortex.graph import connect

        if connect(store, [created.id]).linked:
            created = store.get(created.id)  # with the links just made
    return created


def fake_claude(bin_dir: Path, script: str) -> dict[str, str]:
    """Put an executable `claude` (a Python `script`) in `bin_dir`; returns the env putting it first on PATH.

    The one fake the tests allow: the LLM command cortex runs as `claude -p`.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / "claude"
    program.write_text(f"#!{sys.executable}\n{script}", encoding="utf-8")
    program.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


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
