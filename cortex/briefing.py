"""The session-start briefing: what the assistant should know about this branch, within a token budget.

Tiers: pinned, this branch, key memories, code in play, the active plan; tokens estimated as characters / 4.
A memory whose files are gone is left out, one whose file changed is marked stale. Cached in
`state/briefing.json` by (branch, HEAD, store signature). docs/recall.md.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from cortex.files import atomic_write, file_lock, read_json
from cortex.guard import redacted
from cortex.render import short
from cortex.store import Store
from cortex.text import FRAME_TOKENS, INJECTED_MARK, estimate_tokens

TYPE_WEIGHTS = {"architecture": 25, "decision": 25, "pattern": 25, "gotcha": 20, "progress": 30, "context": 15,
                "code_description": 10, "code": 0, "plan": 30}
BRANCH_SCOPED = ("progress", "plan")
MAX_CHARS = 10_000
GLOBAL_SHARE = 0.2  # of the budget, at most, for the global store's memories
GLOBAL = "Global: yours, across projects"


@dataclass
class Briefing:
    text: str
    tokens: int
    ids: list[str] = field(default_factory=list)


def _git_facts(store: Store, rev: str | None = None) -> dict[str, Any]:
    """Branch, HEAD, last 3 commits and changed files (working tree + this branch vs the default branch). With `rev`
    (`--at`): that revision's commit and last 3 commits, nothing "changed", and its branch when `rev` names one or the
    current branch holds the commit."""
    facts: dict[str, Any] = {"branch": None if rev else store.current_branch(), "rev": rev, "head": None,
                             "commits": [], "changed": []}
    root = store.worktree
    if root is None:
        return facts
    with contextlib.suppress(Exception):  # a broken repository: a briefing without git facts, never an error
        import pygit2

        repo = pygit2.Repository(str(root))
        if repo.head_is_unborn:
            return facts
        head = repo.revparse_single(rev).peel(pygit2.Commit) if rev else repo.head.peel(pygit2.Commit)
        facts["head"] = str(head.id)
        if rev:
            current = store.current_branch()
            if repo.branches.local.get(rev) is not None:
                facts["branch"] = rev
            elif current is not None and (head.id == repo.head.target or repo.descendant_of(repo.head.target, head.id)):
                facts["branch"] = current
        for n, commit in enumerate(repo.walk(head.id, pygit2.enums.SortMode.TIME)):
            if n >= 3:
                break
            facts["commits"].append(f"{str(commit.id)[:7]} {commit.message.strip().splitlines()[0][:80] if commit.message.strip() else ''}")
        if rev:
            return facts
        changed = {path for path, flags in repo.status().items()
                   if not flags & pygit2.enums.FileStatus.IGNORED and not path.startswith(".cortex/")}
        from cortex.gitfacts import default_branch

        default = default_branch(str(root))
        if default and facts["branch"] and facts["branch"] != default:
            base = repo.merge_base(repo.branches.local[default].target, head.id)
            if base is not None:
                diff = repo[base].peel(pygit2.Commit).tree.diff_to_tree(head.tree)
                changed |= {d.new_file.path for d in diff.deltas if not d.new_file.path.startswith(".cortex/")}
        facts["changed"] = sorted(changed)
    return facts


def _cache_key(store: Store, settled: bool = False) -> str:
    """Computed by `cortex.layout`, which the SessionStart fast path shares."""
    from cortex import __version__
    from cortex.layout import briefing_key

    return briefing_key(str(store.root), __version__, settled)


def cached(store: Store) -> Briefing | None:
    """The cached briefing when nothing it depends on changed (reads one file)."""
    data = read_json(store.state_dir / "briefing.json")
    if data is None or data.get("key") != _cache_key(store):
        return None
    return Briefing(data["text"], int(data["tokens"]), list(data.get("ids", [])))


def build(store: Store, budget_tokens: int | None = None, now: float | None = None, rev: str | None = None,
          stable: bool = False, index: Any = None, facts: dict[str, Any] | None = None) -> Briefing:
    """Assemble the briefing; `rev` labels a store read at a git revision. `stable`: the form kept in a committed
    file (AGENTS.md), without what changes with every commit or edit, so it changes only when memory does."""
    from cortex.index import Index
    from cortex.memory import epoch, now_epoch
    from cortex.recall import Prior

    index = (index or Index(store)).ensure()
    facts = dict(facts) if facts is not None else _git_facts(store, rev)
    if stable:  # a tracked file: a function of the memory files alone, not of the clock or this clone's use
        facts.update(head=None, commits=[], changed=[])
        if now is None:
            now = max((epoch(stamp) for _rel, *stamps in index.records().column("updated", "created")
                       for stamp in stamps if stamp), default=None)
    now = now_epoch() if now is None else now
    budget = int(budget_tokens or store.config().get("briefing.budget_tokens"))
    waiting = 0 if stable else sum(status == "proposed" for status in index.records().field("status"))
    page = _Page(budget if stable else budget - FRAME_TOKENS, _header(facts, stable, waiting))  # a hook frames it
    pool = _Pool(store, index, facts, Prior(store, index, now, facts["branch"], local=not stable), stable, now, page)
    page.conflicts = pool.conflicts()
    pool.fill("Pinned", lambda row: row.pinned, capped=False)
    if not stable:  # this person's memories across projects, and the hot tier (the most used, learned per clone)
        from cortex.salience import hot_ids

        _fill_global(store, page, now)
        hot = {memory_id: n for n, memory_id in enumerate(hot_ids(store))}
        pool.fill("Most used", lambda row: row.id in hot, capped=False, order=lambda row: hot[row.id])
    # Code outlines appear only under "Code in play", and only for files the branch touches.
    pool.fill("This branch", lambda row: ((row.type in BRANCH_SCOPED and row.type != "plan") or pool.touches(row))
              and row.type != "code_description", capped=True)
    pool.fill("Key memories", lambda row: row.type not in ("code_description", "plan"), capped=True)
    pool.fill("Code in play", lambda row: row.type == "code_description" and pool.touches(row), capped=True)
    pool.fill("Key memories", lambda row: row.type not in ("plan", "code_description"), capped=False)  # unused shares flow to the best remaining
    plan = next((made for made in (pool.made(row) for row in pool.rows if row.type == "plan") if made is not None), None)
    if plan is not None and plan[0].path is not None:
        page.add_plan(store.read(plan[0].path))
    return page.briefing()


def _fill_global(store: Store, page: _Page, now: float) -> None:
    """The global store's memories in their own section, pinned first, within `GLOBAL_SHARE` of the budget."""
    from cortex.index import Index
    from cortex.recall import Prior
    from cortex.store import iter_stores

    for other in iter_stores(store):
        if other.label != "global":
            continue
        try:
            index = Index(other).ensure()
        except Exception as exc:  # a damaged global store costs its section, not the session's briefing
            store.log(f"briefing: the global store was left out: {exc!r}")
            return
        budget = page.budget
        page.budget = min(budget, page.used + int(budget * GLOBAL_SHARE))
        try:
            pool = _Pool(other, index, {"branch": None, "changed": []}, Prior(other, index, now, None), False, now,
                         page)
            pool.fill(GLOBAL, lambda row: row.pinned, capped=False)
            pool.fill(GLOBAL, lambda row: True, capped=False)
        finally:
            page.budget = budget


Candidate = tuple[Any, float, "bool | str", bool]  # memory, prior, stale mark, touches a changed file


class _Row:
    """A memory as the cache's manifest holds it: what the ranking prior and the page's choices read."""

    __slots__ = ("rel", "id", "type", "branch", "files", "pinned", "priority", "confidence", "created", "updated",
                 "title", "links")

    def __init__(self, rel: str, _status: str, ident: str, kind: str, branch: str | None, files: list[str],
                 pinned: bool, priority: int, confidence: float, created: str, updated: str, title: str,
                 links: list[tuple[str, str, float | None]]) -> None:  # the manifest's fields in `__slots__` order
        self.rel, self.id, self.type, self.branch, self.files, self.pinned = rel, ident, kind, branch, files, pinned
        self.priority, self.confidence, self.created, self.updated = priority, confidence, created, updated
        self.title, self.links = title, links


class _Pool:
    """The active memories of this branch that may be shown, best prior first, from the cache's entries; a row
    becomes a `Memory` only when the page might take it (`made`)."""

    def __init__(self, store: Store, index: Any, facts: dict[str, Any], ranking: Any, stable: bool, now: float,
                 page: _Page) -> None:
        branch = facts["branch"]
        self.store, self.index, self.ranking, self.stable, self.now, self.page = store, index, ranking, stable, now, page
        self.changed, self.root = set(facts["changed"]), store.worktree
        rows = [_Row(*fields) for fields in index.records().column("status", *_Row.__slots__[1:])
                if fields[1] == "active" and fields[3] != "code"
                and not (fields[3] in BRANCH_SCOPED and fields[4] != branch)]  # progress and plans: their branch's
        prior = {row.rel: ranking(row) for row in rows}
        self.prior = prior
        self.rows = sorted(rows, key=lambda row: (-prior[row.rel], row.id))
        self.least = min((self._least(row) for row in rows), default=0)
        self._made: dict[str, Candidate | None] = {}
        self._reads: dict[str, int] | None = None
        self._central: dict[str, float] | None = None
        self._stale: dict[str, str] | None = None

    @staticmethod
    def _least(row: _Row) -> int:
        """What the row's line costs at least: `- [type] Title `id``, no summary, no mark."""
        return estimate_tokens(f"- [{row.type}] {row.title} `{row.id}`\n")

    def touches(self, row: _Row) -> bool:
        return bool(self.changed) and not self.changed.isdisjoint(row.files)

    def made(self, row: _Row) -> Candidate | None:
        """The row as a candidate, with the reality check; None when every file it is about is gone (a pinned
        memory stays, flagged)."""
        if row.rel in self._made:
            return self._made[row.rel]
        from cortex.lifecycle import decayed_confidence, present_files, setting_drift

        item = self.index.memory(row.rel)
        stale: bool | str = False
        root = self.root
        present = [root / f for f in present_files(item.files, root)] if item.files and root is not None else None
        if present is not None and not present and not item.pinned:
            self._made[row.rel] = None  # everything it is about is gone
            return None
        if present is not None and not present:
            stale = "files gone"  # pinned memories are always shown, flagged
        elif present is not None and root is not None and not self.stable:
            # a setting it names has another value now, or later commits rewrote or deleted a file it names
            stale = setting_drift(item, root) or self._stale_reasons().get(item.id) or False
        made: Candidate = (item, self.ranking(item), stale, self.touches(row))
        if not self.stable:  # the committed form (AGENTS.md) marks the confidence as written: decay alone would change it
            if self._reads is None:
                self._reads, self._central = self.store.access_counts(), self.index.centralities()
            assert self._central is not None
            self.page.confidence[item.id] = decayed_confidence(item, self.now, self._reads.get(item.id, 0),
                                                               self._central.get(item.id, 0.0))
        self._made[row.rel] = made
        return made

    def _stale_reasons(self) -> dict[str, str]:
        """`cortex.staleness.reasons` for every row naming files, worked out once."""
        if self._stale is None:
            from types import SimpleNamespace

            from cortex.staleness import reasons

            folder = self.store.memories_dir
            self._stale = reasons(self.store, [SimpleNamespace(id=row.id, path=folder / row.rel, files=row.files)
                                               for row in self.rows if row.files])
        return self._stale

    def fill(self, section: str, keep: Any, capped: bool, order: Any = None) -> None:
        """Offer the page every row `keep` accepts, best prior first (or by `order`)."""
        page = self.page
        for row in (self.rows if order is None else sorted((r for r in self.rows if keep(r)), key=order)):
            if page.budget - page.used < self.least:
                return  # no line of any memory fits any more
            if row.id in page.taken or not keep(row) or not page.may_fit(section, row.type, self._least(row), capped):
                continue
            made = self.made(row)
            if made is not None:
                page.add(section, made[0], made[2], capped)

    def conflicts(self) -> dict[str, list[tuple[str, bool]]]:
        """`contradicts` links between memories that may be shown, read both ways: id -> (other, other is newer)."""
        by_id = {row.id: row for row in self.rows}
        out: dict[str, list[tuple[str, bool]]] = {}
        for item in self.rows:
            for rel, to, _strength in item.links:
                other = by_id.get(to)
                if rel != "contradicts" or other is None or other.id == item.id:
                    continue
                if self.made(item) is None or self.made(other) is None:
                    continue  # a memory left out (its files gone) marks nothing
                item_newer = (item.created, item.updated, item.id) > (other.created, other.updated, other.id)
                for one, two, newer in ((item.id, other.id, not item_newer), (other.id, item.id, item_newer)):
                    if (two, newer) not in out.setdefault(one, []):
                        out[one].append((two, newer))
        return {key: sorted(value) for key, value in out.items()}


def _header(facts: dict[str, Any], stable: bool, waiting: int = 0) -> str:
    branch, changed = facts["branch"], sorted(facts["changed"])
    header = [] if stable else [INJECTED_MARK]
    at = f" @ {facts['head'][:7]}" if facts["head"] else ""
    if facts.get("rev"):  # `--at REV`: name the revision as given, and the branch only when there is one
        on = f" on branch `{branch}`" if branch and branch != facts["rev"] else ""
        header += [f"# cortex briefing — at revision `{facts['rev']}`{at}{on}"]
    elif stable:  # a committed file (AGENTS.md): the same on every branch and machine
        header += ["# cortex briefing"]
    else:
        header += [f"# cortex briefing — branch `{branch or 'none'}`{at}"]
    if facts["commits"]:
        header.append("Recent commits: " + "; ".join(facts["commits"]))
    if changed:
        shown = changed[:12]
        header.append("Changed here: " + ", ".join(shown) + (f" (+{len(changed) - len(shown)} more)" if len(changed) > len(shown) else ""))
    header.append("Ask for more with `cortex show <id>` or `cortex recall \"…\"`.")
    if waiting:  # capture's proposals are not shown until a person accepts them
        header.append(f"{waiting} proposed memor{'y waits' if waiting == 1 else 'ies wait'} for review: `cortex inbox`.")
    return "\n".join(header)


class _Page:
    """The briefing being filled: sections of one-line entries within the token budget and the per-type shares."""

    def __init__(self, budget: int, header: str) -> None:
        self.budget, self.header = budget, header
        self.used = estimate_tokens(header)
        self.chosen: list[str] = []
        self.sections: dict[str, list[str]] = {}
        self.spent: dict[str, int] = {}
        self.plan: list[str] = []
        self.confidence: dict[str, float] = {}  # decayed confidence by id (`_confidence`)
        self.conflicts: dict[str, list[tuple[str, bool]]] = {}  # id -> (other id, other is newer) (`_conflicts`)
        self.order: dict[str, list[str]] = {}  # each section's ids, in the order of its entries
        self.taken: set[str] = set()  # the ids in `chosen`

    def cap(self, kind: str) -> float:
        """A type's share of the budget on the capped passes."""
        return self.budget * TYPE_WEIGHTS.get(kind, 10) / sum(TYPE_WEIGHTS.values())

    def may_fit(self, section: str, kind: str, least: int, capped: bool) -> bool:
        """Whether a line costing at least `least` could still be added (False: `add` would refuse it)."""
        cost = least + (estimate_tokens(f"\n## {section}\n") if section not in self.sections else 0)
        return self.used + cost <= self.budget and not (capped and self.spent.get(kind, 0) + cost > self.cap(kind))

    def add(self, section: str, item: Any, stale: bool | str, capped: bool) -> bool:
        if item.id in self.taken:
            return False
        mark = f"(may be stale: {stale})" if isinstance(stale, str) else "(may be stale: file changed)" if stale else ""
        conflicts = self.conflicts.get(item.id, [])
        marks = [mark] + [f"(conflicts with newer `{other}`)" if newer else f"(newer; conflicts with `{other}`)"
                          for other, newer in conflicts]
        entry = "- " + short(item, marks, self.confidence.get(item.id))
        cost = estimate_tokens(entry + "\n") + (estimate_tokens(f"\n## {section}\n") if section not in self.sections else 0)
        if self.used + cost > self.budget or (capped and self.spent.get(item.type, 0) + cost > self.cap(item.type)):
            return False
        ids = self.order.setdefault(section, [])
        older = [ids.index(other) for other, newer in conflicts if not newer and other in ids]
        at = min(older, default=len(ids))  # a newer decision goes before the older one it conflicts with
        ids.insert(at, item.id)
        self.sections.setdefault(section, []).insert(at, entry)
        self.chosen.append(item.id)
        self.taken.add(item.id)
        self.spent[item.type] = self.spent.get(item.type, 0) + cost
        self.used += cost
        return True

    def add_plan(self, plan: Any) -> None:
        """The active plan's checklist, as many rows as the budget leaves room for."""
        lines = [f"## Active plan: {plan.title} `{plan.id}`"]
        used = self.used
        for row in plan.body.strip().splitlines():
            cost = estimate_tokens(row + "\n")
            if used + cost + estimate_tokens(lines[0]) > self.budget:
                break
            lines.append(row)
            used += cost
        if len(lines) > 1:
            self.used = used + estimate_tokens(lines[0])
            self.plan = lines
            self.chosen.append(plan.id)
            self.taken.add(plan.id)

    def briefing(self) -> Briefing:
        parts = [self.header]
        for section in ("Pinned", "Most used", "This branch", "Key memories", "Code in play", GLOBAL):
            if section in self.sections:
                parts.append(f"## {section}\n" + "\n".join(self.sections[section]))
        if self.plan:
            parts.append("\n".join(self.plan))
        text = "\n\n".join(parts).strip() + "\n"
        text = redacted(text)  # the one secret rule: a hand-committed secret is named, never shown
        if len(text) > MAX_CHARS:
            text = text[: text.rfind("\n", 0, MAX_CHARS) + 1]
        return Briefing(text, estimate_tokens(text), self.chosen)


def get(store: Store) -> Briefing:
    """The briefing, from the cache when nothing changed; rebuilt and cached otherwise."""
    hit = cached(store)
    if hit is not None:
        return hit
    import time

    from cortex.index import Index
    from cortex.metrics import record

    started = time.perf_counter()
    index = Index(store).ensure()
    facts = _git_facts(store, None)
    # Taken after the sync and before the page is made: the page is kept only when nothing changed meanwhile.
    key = _cache_key(store, settled=True)
    briefing = build(store, index=index, facts=facts)
    record(store.state_dir, "briefing", {"builds": 1}, {"tokens": briefing.tokens, "chars": len(briefing.text),
           "memories": len(briefing.ids), "ms": round((time.perf_counter() - started) * 1000, 1)})
    if _cache_key(store) == key:
        with contextlib.suppress(OSError):
            atomic_write(store.state_dir / "briefing.json", _saved(key, briefing, index), durable=False)
    return briefing


def _saved(key: str, briefing: Briefing, index: Any) -> str:
    """A briefing as `state/` keeps it, with the files of the memories it shows (`cortex.layout.start_briefing`
    shows an older briefing only while they all exist)."""
    rel_of = index.rel_of_id()
    return json.dumps({"key": key, "text": briefing.text, "tokens": briefing.tokens, "ids": briefing.ids,
                       "files": [rel_of[i] for i in briefing.ids if i in rel_of]})


def build_next(root: str, commits: bool = False) -> None:
    """Build the next SessionStart's briefing of the project store at `root` into `state/briefing.next.json`, in a
    detached process; built again (up to three times) while the store changes, one build at a time. Its sync
    commits nothing (a commit would change the key); `commits`: first commit what the write left uncommitted."""
    import gc
    from pathlib import Path

    from cortex import __version__
    from cortex.index import Index
    from cortex.layout import briefing_key, saved_briefing

    gc.disable()  # a command's process: see `cortex.__main__.run`
    store = Store(Path(root), "project")
    with file_lock(store.state_dir / "briefing.lock"):
        if commits:
            settle = Index(store)
            settle.trust_watcher = False
            settle.ensure()
        for _ in range(3):
            key = briefing_key(root, __version__, settled=True)
            if any((saved_briefing(root, name) or {}).get("key") == key
                   for name in ("briefing.json", "briefing.next.json")):
                return
            index = Index(store)
            index.trust_watcher = False  # a file removed by hand a moment ago is not yet in the server's manifest
            index.commits = False
            built = build(store, index=index)
            if briefing_key(root, __version__) == key:  # written last: once it is there, the build is done
                atomic_write(store.state_dir / "briefing.next.json", _saved(key, built, index), durable=False)
                return
