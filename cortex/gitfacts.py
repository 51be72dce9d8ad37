"""The git facts a hook needs, read from `.git` files with the standard library alone.

Importing pygit2 would cost a hook most of its budget. Anything richer is `cortex.gitops`, on pygit2.
"""

from __future__ import annotations

import os

DEFAULT_BRANCHES = ("main", "master", "trunk")  # the names tried, in order, for "the default branch"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def worktree_root(start: str) -> str | None:
    """The nearest folder at or above `start` that holds `.git` (a folder, or a worktree's file)."""
    folder = os.path.realpath(start)
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def git_dir(root: str) -> str | None:
    """The git dir of a worktree: `.git` itself, or where a `.git` file points."""
    dot_git = os.path.join(root, ".git")
    if os.path.isdir(dot_git):
        return dot_git
    text = (_read(dot_git) or "").strip()
    if text.startswith("gitdir:"):
        target = text[len("gitdir:"):].strip()
        return target if os.path.isabs(target) else os.path.realpath(os.path.join(root, target))
    return None


def common_dir(directory: str) -> str:
    """The git dir shared by every worktree (refs and packed-refs live there)."""
    pointer = _read(os.path.join(directory, "commondir"))
    return os.path.realpath(os.path.join(directory, pointer.strip())) if pointer else directory


def ref_target(directory: str, ref: str) -> str | None:
    """The commit a full ref name (`refs/heads/main`) points at, from loose or packed refs."""
    common = common_dir(directory)
    for base in (directory, common):
        value = (_read(os.path.join(base, ref)) or "").strip()
        if len(value) == 40:
            return value
    for line in (_read(os.path.join(common, "packed-refs")) or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref:
            return parts[0]
    return None


def branch_and_head(root: str | None) -> tuple[str | None, str | None]:
    """(branch, HEAD sha) read from the ref files; (None, None) outside git; a detached HEAD has no branch."""
    if root is None:
        return None, None
    directory = git_dir(root)
    if directory is None:
        return None, None
    head = (_read(os.path.join(directory, "HEAD")) or "").strip()
    if not head.startswith("ref: "):
        return None, head or None
    ref = head[5:].strip()
    branch = ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else None
    return branch, ref_target(directory, ref)


def default_branch(root: str | None) -> str | None:
    """The first of main, master, trunk that exists as a local branch; None when none does."""
    directory = git_dir(root) if root is not None else None
    if directory is None:
        return None
    return next((name for name in DEFAULT_BRANCHES if ref_target(directory, f"refs/heads/{name}") is not None), None)


def path_inside(root: str | os.PathLike[str], name: str) -> str | None:
    """`name` (a path a memory names) as a path under the worktree `root`, or None when it is empty, absolute,
    climbs out with `..`, or passes through a symlink: where a link leads is not the repository's to read."""
    if not name or "\0" in name or os.path.isabs(name) or name.startswith("~"):
        return None
    path = os.fspath(root)
    for part in name.replace("\\", "/").split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            return None
        path = os.path.join(path, part)
        if os.path.islink(path):
            return None
    return path if path != os.fspath(root) else None
