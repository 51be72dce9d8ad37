"""The global store as a git repository of its own, synced through an optional remote. What is committed and
checked out (never `config.yaml`: it names commands to run), the file-by-file replay and conflict copies:
docs/git.md."""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from cortex.errors import CortexError
from cortex.store import Store, guard_text

BRANCH = "main"
REMOTE = "origin"
COMMITTED = ("memories/", "conflicts/", ".gitignore")  # what cortex commits in the global store
CHECKED_OUT = ("memories/", "conflicts/")  # the only paths a pull writes from the remote's tree
CONFLICTS = "conflicts"
EXCLUDE = "# cortex: each machine keeps its own settings\nconfig.yaml\n"
PUSH_ATTEMPTS = 3


@dataclass
class Conflict:
    """A memory changed on two machines: the kept version at `path`, the other one at `copy`."""

    memory_id: str
    path: str  # inside the store, e.g. memories/pattern/prefer-ripgrep-3f9a1c07d2e4.md
    copy: str  # conflicts/pattern/prefer-ripgrep-3f9a1c07d2e4.1a2b3c4d.md

    def as_dict(self) -> dict[str, str]:
        return {"id": self.memory_id, "path": self.path, "copy": self.copy}


@dataclass
class SyncResult:
    """What one `cortex sync --global` did."""

    created: bool = False  # the store became a git repository now
    committed: list[str] = field(default_factory=list)  # local paths committed before the pull
    remote: str | None = None
    pulled: list[str] = field(default_factory=list)  # paths the remote's commits changed here
    replayed: int = 0  # local commits replayed on top of the remote's
    conflicts: list[Conflict] = field(default_factory=list)  # new conflict copies made by this sync
    pushed: bool = False
    resolved: list[str] = field(default_factory=list)  # conflict copies removed by --resolve
    skipped: list[str] = field(default_factory=list)  # the remote's paths never written here (not memories)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"conflicts": [c.as_dict() for c in self.conflicts]}


def is_repository(store: Store) -> bool:
    """Whether the store folder is itself a git repository (its own `.git`, not one found above it)."""
    return (store.root / ".git").exists()


def _open(store: Store) -> Any:
    import pygit2

    return pygit2.Repository(str(store.root))


def ensure_repository(store: Store) -> tuple[Any, bool]:
    """The store's repository, made (branch `main`, config.yaml excluded) when there is none; (repo, created)."""
    import pygit2

    from cortex.files import atomic_write

    if is_repository(store):
        return _open(store), False
    if not (store.root / ".gitignore").exists():
        from cortex.store import GITIGNORE

        atomic_write(store.root / ".gitignore", GITIGNORE)
    repo = pygit2.init_repository(str(store.root), initial_head=BRANCH)
    exclude = Path(repo.path) / "info" / "exclude"
    current = exclude.read_text(encoding="utf-8") if exclude.is_file() else ""
    if "config.yaml" not in current.splitlines():
        atomic_write(exclude, current + ("\n" if current and not current.endswith("\n") else "") + EXCLUDE)
    return repo, True


def _committed_path(path: str) -> bool:
    from cortex.files import is_temp_name

    return path.startswith(COMMITTED) and not is_temp_name(path.rsplit("/", 1)[-1])


def commit_changes(store: Store, message: str = "cortex: global memory update", scan: bool = False,
                   paths: Iterable[Path] | None = None) -> list[str]:
    """Commit what changed under `memories/`, `conflicts/` and `.gitignore` (`paths`: only those); the paths."""
    import pygit2

    from cortex.files import file_lock
    from cortex.gitops import relative, signature, write_index

    if not is_repository(store):
        return []
    with file_lock(store.state_dir / "stage.lock"):
        repo = _open(store)
        names = _changed_paths(repo) if paths is None else sorted(
            {rel for rel in (relative(path, store.root) for path in paths) if rel is not None and _committed_path(rel)})
        contents = {path: _read(store.root / path) for path in names}
        if scan:
            _scan(store, contents)
        head = None if repo.head_is_unborn else repo.head.peel(pygit2.Commit)
        tree_files = _files(repo, head.tree) if head is not None else {}
        contents = {p: data for p, data in contents.items() if data is not None or p in tree_files}
        if not contents and head is not None:
            return []
        edits = {p: (repo.create_blob(data) if data is not None else None) for p, data in contents.items()}
        tree = _tree_with(repo, head.tree if head is not None else None, edits)
        if head is not None and tree == head.tree.id:
            return []
        parents = [head.id] if head is not None else []
        repo.create_commit(f"refs/heads/{_branch(repo)}", signature(repo, "AUTHOR"), signature(repo, "COMMITTER"),
                           message, tree, parents)
        repo.index.read_tree(repo[tree])
        write_index(repo)
        return sorted(contents)


def _changed_paths(repo: Any) -> list[str]:
    """The paths cortex commits that differ from HEAD (new, changed, deleted), from `git status`."""
    import pygit2

    status = pygit2.enums.FileStatus
    changed = (status.WT_NEW | status.WT_MODIFIED | status.WT_DELETED | status.WT_TYPECHANGE | status.WT_RENAMED
               | status.INDEX_NEW | status.INDEX_MODIFIED | status.INDEX_DELETED)
    return sorted(path for path, flags in repo.status().items()
                  if flags & changed and not flags & status.IGNORED and _committed_path(path))


def _scan(store: Store, contents: dict[str, bytes | None]) -> None:
    """`SecretDetected` for the first memory file about to be committed that holds a secret (the store's guard)."""
    for path, data in sorted(contents.items()):
        if data is not None and path.endswith(".md"):
            guard_text(data.decode("utf-8", errors="replace"), store.root / path)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes() if path.is_file() and not path.is_symlink() else None
    except FileNotFoundError:
        return None


def _branch(repo: Any) -> str:
    """The branch every machine syncs, `main` (a clone's unborn HEAD on another name is pointed at it)."""
    if repo.head_is_detached:
        raise CortexError(f"{repo.workdir}: HEAD is detached; check out a branch (git -C {repo.workdir} switch {BRANCH})")
    branch = str(repo.references["HEAD"].target).removeprefix("refs/heads/")
    if branch != BRANCH and repo.head_is_unborn:
        repo.references.create("HEAD", f"refs/heads/{BRANCH}", force=True)
        return BRANCH
    if branch != BRANCH:
        raise CortexError(f"{repo.workdir}: the global store is on branch {branch}, and every machine syncs "
                          f"{BRANCH} (git -C {repo.workdir} switch {BRANCH})")
    return branch


def _check_remote_branches(repo: Any, url: str, branch: str) -> None:
    """A remote with branches but none named `branch` belongs to something else: refuse before pushing."""
    prefix = f"refs/remotes/{REMOTE}/"
    names = sorted(ref.removeprefix(prefix) for ref in repo.references if ref.startswith(prefix)
                   and ref != f"{prefix}HEAD")
    if names and branch not in names:
        raise CortexError(f"{url} has {', '.join(names)} but no {branch}, the branch cortex syncs; push the memories "
                          f"there to {branch} (or use another remote); nothing was pushed")


def _files(repo: Any, tree: Any, prefix: str = "", regular: bool = False) -> dict[str, Any]:
    """path -> blob id of every file in a tree (`regular`: no symbolic link, no submodule)."""
    import pygit2

    modes = (pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE)
    out: dict[str, Any] = {}
    for entry in tree:
        path = f"{prefix}{entry.name}"
        if entry.type_str == "tree":
            out.update(_files(repo, repo[entry.id], path + "/", regular))
        elif not regular or (entry.type_str == "blob" and entry.filemode in modes):
            out[path] = entry.id
    return out


def _checked_out(path: str) -> bool:
    """Whether a pull may write this path: under `memories/` or `conflicts/`, plain names only, no temp file."""
    from cortex.files import is_temp_name

    parts = path.split("/")
    return path.startswith(CHECKED_OUT) and not is_temp_name(parts[-1]) and all(
        part not in ("", ".", "..") and part.lower() != ".git" and "\\" not in part for part in parts)


def _refused(tree: Any) -> str | None:
    """Why git would refuse to check out `tree` (a path with `..` or `.git`, ...), or None."""
    import pygit2

    try:
        pygit2.Index().read_tree(tree)
    except (pygit2.GitError, ValueError) as exc:
        return _one_line(exc) or "a tree entry git refuses"
    return None


def _tree_with(repo: Any, base: Any, edits: dict[str, Any]) -> Any:
    """The id of `base` (a tree, or None for an empty one) with `edits` applied (path -> blob id, None: removed)."""
    import pygit2

    index = pygit2.Index()
    if base is not None:
        index.read_tree(base)
    for path, blob in sorted(edits.items()):
        if blob is None:
            with contextlib.suppress(KeyError, OSError):
                index.remove(path)
        else:
            index.add(pygit2.IndexEntry(path, blob, pygit2.enums.FileMode.BLOB))
    return index.write_tree(repo)


def set_remote(store: Store, url: str) -> None:
    """Point `origin` at `url` (made when missing): the same as `git -C <store> remote add origin URL`."""
    repo, _ = ensure_repository(store)
    if not url.strip():
        raise CortexError("--remote: give the remote's URL or path")
    if REMOTE in [remote.name for remote in repo.remotes]:
        repo.remotes.set_url(REMOTE, url)
    else:
        repo.remotes.create(REMOTE, url)


def remote_url(repo: Any) -> str | None:
    try:
        return str(repo.remotes[REMOTE].url)
    except (KeyError, ValueError):
        return None


def _callbacks() -> Any:
    """Credentials from the ssh agent for ssh remotes; pushes the remote refused are collected, not ignored."""
    import pygit2

    class Callbacks(pygit2.RemoteCallbacks):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.rejected: list[str] = []

        def credentials(self, url: str, username_from_url: str | None, allowed_types: Any) -> Any:
            if allowed_types & pygit2.enums.CredentialType.SSH_KEY:
                return pygit2.KeypairFromAgent(username_from_url or "git")
            raise CortexError(f"{url}: the remote asks for credentials cortex cannot give (use a path, or an ssh "
                              f"URL with a key in ssh-agent)")

        def push_update_reference(self, refname: str, message: str | None) -> None:
            if message:
                self.rejected.append(f"{refname}: {message}")

    return Callbacks()


def _fetch(repo: Any, url: str) -> None:
    import pygit2

    try:
        repo.remotes[REMOTE].fetch(callbacks=_callbacks())
    except pygit2.GitError as exc:
        raise CortexError(f"cannot fetch from {url}: {_one_line(exc)}") from None


def _push(repo: Any, url: str, branch: str) -> bool:
    """Push the branch; False when the remote refused it (it moved since the fetch)."""
    import pygit2

    callbacks = _callbacks()
    try:
        repo.remotes[REMOTE].push([f"refs/heads/{branch}:refs/heads/{branch}"], callbacks=callbacks)
    except pygit2.GitError as exc:
        if any(words in str(exc) for words in ("non-fast-forward", "fast forward", "not present locally")):
            return False  # the remote moved since the fetch: fetch and replay again
        raise CortexError(f"cannot push to {url}: {_one_line(exc)}") from None
    if callbacks.rejected:
        return False
    repo.references.create(f"refs/remotes/{REMOTE}/{branch}", repo.references[f"refs/heads/{branch}"].target,
                           force=True)
    return True


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _upstream(repo: Any, branch: str) -> Any:
    """The remote's branch as last fetched (a commit), or None."""
    import pygit2

    try:
        return repo.references[f"refs/remotes/{REMOTE}/{branch}"].peel(pygit2.Commit)
    except (KeyError, ValueError):
        return None


def sync(store: Store, remote: str | None = None, resolve: Iterable[str] = ()) -> SyncResult:
    """Commit, pull (local commits replayed file by file) and push the global store; `CortexError` stops the push."""
    from cortex.files import file_lock

    result = SyncResult()
    if store.label != "global":
        raise CortexError("only the global store syncs this way; a project's memories travel with its own git push")
    with file_lock(store.state_dir / "stage.lock"), store.lock():
        repo, result.created = ensure_repository(store)
        branch = _branch(repo)  # before the first commit: a clone's unborn HEAD is pointed at main
        if remote is not None:
            set_remote(store, remote)
        result.resolved = _resolve(store, list(resolve))
        result.committed = commit_changes(store, "cortex: global memories" if result.created else
                                          "cortex: global memory update", scan=True)
        repo = _open(store)
        result.remote = remote_url(repo)
        if result.remote is None:
            return result
        for _attempt in range(PUSH_ATTEMPTS):
            _fetch(repo, result.remote)
            _check_remote_branches(repo, result.remote, branch)
            _pull(store, repo, branch, result)
            if repo.head_is_unborn:
                return result  # nothing here and nothing there
            upstream = _upstream(repo, branch)
            if upstream is not None and upstream.id == repo.head.target:
                result.pushed = False  # nothing to push: already the remote's
                break
            if _push(repo, result.remote, branch):
                result.pushed = True
                break
        else:
            raise CortexError(f"{result.remote} kept moving while pushing ({PUSH_ATTEMPTS} tries); run the sync again")
    _note_sync(store, result)
    if result.pulled:
        store.mark_changed()
    return result


def _pull(store: Store, repo: Any, branch: str, result: SyncResult) -> None:
    """Bring the remote's commits in: fast-forward, or replay the local commits on top of them."""
    import pygit2

    upstream = _upstream(repo, branch)
    if upstream is None:
        return
    head = None if repo.head_is_unborn else repo.head.peel(pygit2.Commit)
    if head is not None and (head.id == upstream.id or repo.descendant_of(head.id, upstream.id)):
        return  # the remote has nothing new
    refused = _refused(upstream.tree)
    if refused is not None:  # before anything is replayed or written
        raise CortexError(f"{remote_url(repo)}: the remote's {branch} holds a path git refuses ({refused}); nothing "
                          f"was changed here; remove that path from the remote, then sync again")
    if head is None or repo.descendant_of(upstream.id, head.id):
        new_tip = upstream.id
    else:
        new_tip = _replay(store, repo, head, upstream, result)
    _check_out(store, repo, branch, head, repo[new_tip], result)


def _replay(store: Store, repo: Any, head: Any, upstream: Any, result: SyncResult) -> Any:
    """Each local commit the remote lacks, oldest first, made again on top of the remote's branch; the new tip."""
    import pygit2

    from cortex.gitops import signature

    walker = repo.walk(head.id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    walker.hide(upstream.id)
    tip = upstream
    committer = signature(repo, "COMMITTER")
    for commit in walker:
        before = _files(repo, commit.parents[0].tree) if commit.parents else {}
        after = _files(repo, commit.tree)
        current = _files(repo, tip.tree)
        edits: dict[str, Any] = {}
        for path in sorted(set(before) | set(after)):
            old, new = before.get(path), after.get(path)
            if old == new or current.get(path) == new:
                continue  # unchanged by this commit, or the remote made the same change
            if current.get(path) == old or current.get(path) is None:
                edits[path] = new  # the remote left it alone (or deleted it: a change wins over a removal)
            elif new is not None and not _same_but_stamps(repo, current[path], new):
                # both changed it: the remote's stays, this machine's becomes a conflict copy
                copy = _conflict_copy(path, new)
                edits[copy] = new
                result.conflicts.append(Conflict(_memory_id(path), path, copy))
            # else: deleted here, changed there: the change stays
        tree = _tree_with(repo, tip.tree, edits)
        if tree == tip.tree.id:
            continue
        oid = repo.create_commit(None, commit.author, committer, commit.message, tree, [tip.id])
        tip = repo[oid]
        result.replayed += 1
    return tip.id


STAMP = re.compile(rb"^(updated|archived): .*$", re.M)


def _same_but_stamps(repo: Any, ours: Any, theirs: Any) -> bool:
    """Whether two versions differ only in `updated:`/`archived:` lines (the same change on two machines)."""
    return bool(STAMP.sub(rb"\1:", repo[ours].data) == STAMP.sub(rb"\1:", repo[theirs].data))


def _conflict_copy(path: str, blob: Any) -> str:
    """Where a conflicting version goes: `conflicts/` + the path under `memories/`, the blob's id before `.md`."""
    inner = path.removeprefix("memories/")
    stem, dot, suffix = inner.rpartition(".")
    return f"{CONFLICTS}/{stem}.{str(blob)[:8]}.{suffix}" if dot else f"{CONFLICTS}/{inner}.{str(blob)[:8]}"


def _memory_id(path: str) -> str:
    match = re.search(r"-([0-9a-f]{12})(?:\.[0-9a-f]{8})?\.md$", path)
    return match.group(1) if match else ""


def _check_out(store: Store, repo: Any, branch: str, head: Any, target: Any, result: SyncResult) -> None:
    """Move the branch to `target`, writing only regular files under `memories/` and `conflicts/`; others skipped."""
    import pygit2

    from cortex.files import atomic_write
    from cortex.gitops import write_index

    old = _files(repo, head.tree) if head is not None else {}
    every = _files(repo, target.tree)
    regular = _files(repo, target.tree, regular=True)
    new = {path: oid for path, oid in regular.items() if _checked_out(path)}
    result.skipped += sorted(path for path, oid in every.items()  # .gitignore: cortex writes its own here
                             if path not in new and old.get(path) != oid and path != ".gitignore")
    old = {path: oid for path, oid in old.items() if _checked_out(path)}
    changed = sorted(path for path in set(old) | set(new) if old.get(path) != new.get(path))
    outside = {path for path in changed if not _inside(store.root, path)}  # through a folder that is a link
    result.skipped += sorted(outside)
    changed = [path for path in changed if path not in outside]
    dirty = {path for path, flags in repo.status().items()
             if flags & ~(pygit2.enums.FileStatus.IGNORED | pygit2.enums.FileStatus.CURRENT)}
    blocked = [path for path in changed if path in dirty and (path in old or (store.root / path).exists())]
    if blocked:
        raise CortexError(f"{store.root / blocked[0]}: changed here and not committed, and the remote changed it too; "
                          f"commit it (git -C {store.root} commit) or move it away, then sync again")
    for path in changed:
        where = store.root / path
        if new.get(path) is None:
            where.unlink(missing_ok=True)
            _prune_empty(where.parent, store.root)
        else:
            # No fsync per file: the bytes are in git objects, and the next sync keeps a short file as a conflict.
            atomic_write(where, repo[new[path]].data, durable=False)
    repo.references.create(f"refs/heads/{branch}", target.id, force=True)
    repo.index.read_tree(target.tree)
    write_index(repo)
    made_here = {conflict.copy for conflict in result.conflicts}
    result.pulled += [path for path in changed if path.startswith(COMMITTED) and path not in made_here]


def _inside(root: Path, path: str) -> bool:
    """Whether `path`'s folder, links resolved, stays inside the store (a linked folder is never written through)."""
    top = os.path.join(os.path.realpath(root), path.split("/", 1)[0])
    folder = os.path.realpath((root / path).parent)
    return (folder == top or folder.startswith(top + os.sep)) and not os.path.islink(root / path)


def _prune_empty(folder: Path, root: Path) -> None:
    """Remove `folder` and its parents while they are empty, never `root`'s own folders (`memories/`, …)."""
    while folder.parent != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return  # not empty, or already gone
        folder = folder.parent


def _note_sync(store: Store, result: SyncResult) -> None:
    from cortex.files import atomic_write
    from cortex.memory import now_iso

    with contextlib.suppress(OSError):
        atomic_write(store.state_dir / "sync.json", json.dumps({"last": now_iso(), "pushed": result.pushed,
                                                               "remote": result.remote}), durable=False)


def conflicts(store: Store) -> list[Conflict]:
    """Every conflict copy in the store's `conflicts/` folder (whoever made it: this machine or another)."""
    folder = store.root / CONFLICTS
    if not folder.is_dir():
        return []
    copies = [copy.relative_to(store.root).as_posix() for copy in sorted(folder.rglob("*.md"))]
    return [Conflict(_memory_id(rel), _original_of(rel), rel) for rel in copies]


def _original_of(copy: str) -> str:
    """The memory path a conflict copy stands beside: `conflicts/a/b-<id>.<blob>.md` -> `memories/a/b-<id>.md`."""
    inner = copy.removeprefix(f"{CONFLICTS}/")
    return "memories/" + re.sub(r"\.[0-9a-f]{8}(\.md)$", r"\1", inner)


def _resolve(store: Store, ids: list[str]) -> list[str]:
    """Remove the conflict copies of these memories (id or prefix); the person kept what they wanted."""
    if not ids:
        return []
    removed = []
    every = conflicts(store)
    for wanted in ids:
        key = wanted.strip().lower()
        mine = [c for c in every if key and c.memory_id.startswith(key)]
        if not mine:
            raise CortexError(f"no conflict copy for memory {wanted!r} in {store.root / CONFLICTS}")
        for conflict in mine:
            (store.root / conflict.copy).unlink(missing_ok=True)
            _prune_empty((store.root / conflict.copy).parent, store.root)
            removed.append(conflict.copy)
    return removed


def report(store: Store) -> dict[str, Any]:
    """The global store's sync state for `cortex status` (no network: ahead/behind as of the last fetch)."""
    out: dict[str, Any] = {"repository": is_repository(store), "remote": None, "branch": None, "ahead": 0,
                           "behind": 0, "uncommitted": 0, "conflicts": [c.as_dict() for c in conflicts(store)],
                           "last_sync": None}
    with contextlib.suppress(OSError, ValueError, AttributeError):
        out["last_sync"] = json.loads((store.state_dir / "sync.json").read_text(encoding="utf-8")).get("last")
    if not out["repository"]:
        return out
    import pygit2

    try:
        repo = _open(store)
        out["remote"] = remote_url(repo)
        if not repo.head_is_detached:
            out["branch"] = _branch(repo)
        out["uncommitted"] = sum(1 for path, flags in repo.status().items()
                                 if _committed_path(path) and not flags & pygit2.enums.FileStatus.IGNORED)
        upstream = _upstream(repo, out["branch"]) if out["branch"] else None
        if upstream is not None and not repo.head_is_unborn:
            out["ahead"], out["behind"] = repo.ahead_behind(repo.head.target, upstream.id)
        elif not repo.head_is_unborn:
            out["ahead"] = sum(1 for _ in repo.walk(repo.head.target))
    except (pygit2.GitError, KeyError, ValueError) as exc:
        out["error"] = _one_line(exc)
    return out


def problems(state: dict[str, Any], root: Path) -> list[str]:
    """The conflict copies as problem lines (what `cortex status --global` prints, `--strict` fails on)."""
    return [f"{root / c['copy']}: sync conflict: memory {c['id']} was changed on two machines; "
            f"{c['path']} kept one version, this file the other. Merge what you want into {c['path']}, "
            f"then run `cortex sync --global --resolve {c['id']}`" for c in state["conflicts"]]


def promoted_copy(project: Store, memory_id: str, global_store: Store) -> Any:
    """The global copy of a project memory, its `source` naming the project and the original id (once only)."""
    from cortex.memory import Memory, now_iso

    original = project.get(memory_id)
    worktree = project.worktree
    origin: dict[str, Any] = {"kind": "promoted", "project": (worktree or project.root.parent).name,
                              "id": original.id}
    url = _project_url(worktree)
    if url:
        origin["repository"] = url
    if original.branch:
        origin["branch"] = original.branch
    origin["promoted"] = now_iso()
    for item in global_store.list(statuses=()):
        source = item.source or {}
        if source.get("kind") == "promoted" and source.get("id") == original.id \
                and source.get("project") == origin["project"] and source.get("repository") == origin.get("repository"):
            raise CortexError(f"memory {original.id} was promoted already: {item.id} in the global store")
    return Memory(id="", type=original.type, title=original.title, body=original.body, confidence=original.confidence,
                  priority=original.priority, pinned=original.pinned, scope="global", tags=list(original.tags),
                  source=origin)


def _project_url(worktree: Path | None) -> str | None:
    """The project's `origin` URL with any user:password removed, or None."""
    if worktree is None:
        return None
    try:
        import pygit2

        url = str(pygit2.Repository(str(worktree)).remotes[REMOTE].url)
    except Exception:  # no repository, no origin: the folder name alone names the project
        return None
    return re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", url)
