"""Git facts cortex needs.

The lean readers here (repository root, current branch) read `.git` files
directly: importing pygit2 costs ~150 ms in a fresh process, more than a
hook's whole budget. Anything richer (commits, diffs, staging) imports
pygit2 inside the function that needs it.
"""

from __future__ import annotations

from pathlib import Path


def find_worktree_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds `.git` (a dir or a worktree file)."""
    current = start.resolve()
    for folder in (current, *current.parents):
        if (folder / ".git").exists():
            return folder
    return None


def git_dir(worktree_root: Path) -> Path | None:
    """The git dir of a worktree: `.git` itself, or where a `.git` file points."""
    dot_git = worktree_root / ".git"
    if dot_git.is_dir():
        return dot_git
    try:
        text = dot_git.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if text.startswith("gitdir:"):
        target = Path(text[len("gitdir:") :].strip())
        return target if target.is_absolute() else (worktree_root / target).resolve()
    return None


def current_branch(worktree_root: Path | None) -> str | None:
    """The checked-out branch's short name; None when detached or not a repository."""
    if worktree_root is None:
        return None
    directory = git_dir(worktree_root)
    if directory is None:
        return None
    try:
        head = (directory / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    prefix = "ref: refs/heads/"
    return head[len(prefix) :] if head.startswith(prefix) else None


def head_commit(worktree_root: Path | None) -> str | None:
    """The HEAD commit id (hex), or None (no repository, no commit yet)."""
    if worktree_root is None:
        return None
    try:
        import pygit2

        repo = pygit2.Repository(str(worktree_root))
        if repo.head_is_unborn:
            return None
        return str(repo.head.target)
    except Exception:  # a broken or foreign repository is not cortex's problem
        return None
