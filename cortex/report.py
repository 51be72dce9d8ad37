"""`cortex report`: one self-contained HTML page about a store (graph, decisions, branch changes, salience).

Memory text is untrusted: how the page keeps it text (escaped JSON, `textContent`, a CSP) is in docs/report.md."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
from collections import deque
from pathlib import Path
from typing import Any, Callable

from cortex.index import Index
from cortex.index.cache import read_body
from cortex.memory import Memory, now_epoch, now_iso
from cortex.store import Store

_DATA = "\x00cortex-report-data\x00"  # where the data goes, after the policy is made
SPACING = 12.0  # world units between neighbouring dots
FIELDS = ("id", "title", "type", "status", "x", "y", "created", "updated", "branch", "confidence", "decayed",
          "priority", "pinned", "access", "centrality", "prior", "salience", "shown", "used", "tier", "tags", "files",
          "path", "body", "cluster")


def default_path(store: Store) -> Path:
    """Where `cortex report` writes without `-o`: the store's private `state/` (never committed)."""
    return store.state_dir / "report.html"


def build(store: Store, index: Index | None = None) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data."""
    from cortex import __version__
    from cortex import status as store_status

    index = (index or Index(store)).ensure()
    status = store_status.report(store, index)
    memories = sorted(index.scan().memories, key=lambda m: m.id)
    nodes, edges, clusters = _graph(store, index, memories)
    branch = _branch_changes(store, index)
    from cortex.guard import redacted_data

    # Every string passes the one secret rule: the page is a file a person may share.
    return redacted_data({
        "meta": {"store": store.label, "root": str(store.root), "branch": status.get("branch"),
                 "generated": now_iso(), "version": __version__, "total": len(memories),
                 "by_type": status["by_type"], "by_status": status["by_status"], "pinned": status["pinned"],
                 "changes": [{"id": str(c.get("id", "")), "to": str(c.get("to", "")), "why": str(c.get("why", "")),
                             "at": float(c.get("at", 0) or 0)} for c in status["tiers"]["changes"]],
                 "archive_below": float(store.config().get("gc.archive_below"))},
        "fields": list(FIELDS),
        "nodes": nodes,
        "edges": edges,
        "clusters": clusters,
        "timeline": _timeline(memories),
        "branch": branch,
        "problems": list(status["problems"]),
        "warnings": list(status["warnings"]),
    })


def render(data: dict[str, Any]) -> str:
    """The HTML page for `build`'s data: the packaged template, the data embedded, a CSP naming the script."""
    from importlib import resources

    import jinja2

    folder = str(resources.files("cortex.templates"))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(folder), autoescape=True)
    page = env.get_template("report.html.j2").render(title=f"cortex report: {data['meta']['root']}",
                                                     data_json=_DATA, csp="CSP")
    # The hashes are of the page's own script and style, taken before any memory text is in the page.
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    styles = re.findall(r"<style>(.*?)</style>", page, flags=re.S)
    policy = ("default-src 'none'; base-uri 'none'; form-action 'none'; "
              f"script-src {' '.join(_hash(s) for s in scripts)}; style-src {' '.join(_hash(s) for s in styles)}")
    head, _, tail = page.partition(_DATA)
    return head.replace('content="CSP"', f'content="{policy}"', 1) + _script_json(data) + tail


def write(store: Store, path: Path | None = None, index: Index | None = None) -> Path:
    """Build the page and write it atomically to `path` (default `default_path`); returns the path."""
    from cortex.files import atomic_write

    target = path or default_path(store)
    atomic_write(target, render(build(store, index)), durable=False)
    return target


def _script_json(data: dict[str, Any]) -> str:
    """JSON that cannot end its `<script>` block: `<`, `>`, `&`, U+2028 and U+2029 as `\\u` escapes."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    for char in "<>&\u2028\u2029":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def _graph(store: Store, index: Index, memories: list[Memory]) -> tuple[list[list[Any]], list[list[Any]],
                                                                         list[dict[str, Any]]]:
    """(node rows in FIELDS order, edges [source row, target row, relation, strength], clusters)."""
    from cortex import salience
    from cortex.lifecycle import decayed_confidence
    from cortex.recall import Prior

    row_of = {m.id: i for i, m in enumerate(memories)}
    edges: list[list[Any]] = []
    for i, m in enumerate(memories):
        for link in m.links:
            if link.to in row_of and row_of[link.to] != i:
                edges.append([i, row_of[link.to], link.rel, link.strength])
    positions, cluster_of, clusters = layout(memories, [(a, b) for a, b, _, _ in edges])
    now = now_epoch()
    prior = Prior(store, index, now, None)
    access, central = prior.access, prior.central
    state = salience.load(store)
    usage = salience.usages(store, state)
    muted = salience.muted(store, state)
    prefix = len(str(store.root)) + 1
    nodes = []
    for i, m in enumerate(memories):
        reads, centrality = access.get(m.id, 0), central.get(m.id, 0.0)
        parts = prior.parts(m)
        decayed = decayed_confidence(m, now, reads, centrality)
        used = usage.get(m.id, salience.Usage())
        tier = salience.tier_of(state, m) + (", muted at prompt time" if m.id in muted else "")
        assert m.path is not None
        nodes.append([
            m.id, m.title, m.type, m.status, positions[i][0], positions[i][1], m.created, m.updated, m.branch,
            m.confidence, round(decayed, 3), m.priority, m.pinned, reads,
            round(centrality, 3), round(sum(parts.values()), 3), round(used.score, 3), used.shown, used.used, tier,
            m.tags, m.files, str(m.path)[prefix:].replace(os.sep, "/"), read_body(m.path), cluster_of[i],
        ])
    return nodes, edges, clusters


def layout(memories: list[Memory], edges: list[tuple[int, int]]) -> tuple[list[tuple[float, float]], list[int],
                                                                           list[dict[str, Any]]]:
    """Positions, the cluster of each memory, and the clusters (label, centre, radius, size), deterministically. A
    cluster is a connected component of links (one per type for unlinked memories), named after its best-linked
    memory, laid out as a disc (a sunflower spiral pulled halfway towards neighbours); discs are packed in rows,
    largest first."""
    count = len(memories)
    neighbours: list[list[int]] = [[] for _ in range(count)]
    for a, b in edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    groups: list[tuple[str, list[int]]] = []
    seen = [False] * count
    lonely: dict[str, list[int]] = {}
    for start in range(count):
        if seen[start]:
            continue
        if not neighbours[start]:
            seen[start] = True
            lonely.setdefault(memories[start].type, []).append(start)
            continue
        groups.append(("", _component(start, neighbours, seen)))
    groups.sort(key=lambda g: (-len(g[1]), memories[g[1][0]].id))
    titles = [memories[members[0]].title for _, members in groups]  # each named after its hub
    groups = [(t if len(t) <= 40 else t[:39].rstrip() + "…", members) for t, (_, members) in zip(titles, groups)]
    groups += [(f"{kind}, unlinked", members) for kind, members in sorted(lonely.items())]
    local = [(0.0, 0.0)] * count
    discs = []
    for label, members in groups:
        spots = _sunflower(len(members))
        for member, spot in zip(members, spots):
            local[member] = spot
        _relax(members, neighbours, local)
        radius = max(math.hypot(*local[m]) for m in members) + SPACING
        discs.append((label, members, radius))
    by_size = sorted(range(len(discs)), key=lambda n: -discs[n][2])  # rows look best largest first
    centres = [(0.0, 0.0)] * len(discs)
    for n, centre in zip(by_size, _pack([discs[n][2] for n in by_size])):
        centres[n] = centre
    positions = [(0.0, 0.0)] * count
    cluster_of = [0] * count
    clusters = []
    for n, ((label, members, radius), (cx, cy)) in enumerate(zip(discs, centres)):
        for member in members:
            positions[member] = (round(cx + local[member][0], 1), round(cy + local[member][1], 1))
            cluster_of[member] = n
        clusters.append({"label": label, "x": round(cx, 1), "y": round(cy, 1), "r": round(radius, 1),
                         "size": len(members)})
    return positions, cluster_of, clusters


def _reached(start: int, step: Callable[[int], list[int]]) -> list[int]:
    """Every row reached from `start` along `step`, breadth first."""
    order, queue, seen = [start], deque([start]), {start}
    while queue:
        for other in step(queue.popleft()):
            if other not in seen:
                seen.add(other)
                order.append(other)
                queue.append(other)
    return order


def _component(start: int, neighbours: list[list[int]], seen: list[bool]) -> list[int]:
    """The memories linked to `start`, breadth first from the best-linked of them (so neighbours sit close)."""
    members = _reached(start, lambda m: neighbours[m])
    for member in members:
        seen[member] = True
    hub = max(members, key=lambda m: (len(neighbours[m]), -m))
    return _reached(hub, lambda m: sorted(neighbours[m], key=lambda o: -len(neighbours[o])))


def _sunflower(count: int) -> list[tuple[float, float]]:
    """`count` evenly spread points on a disc, the first at the centre (Vogel's spiral)."""
    golden = math.pi * (3 - math.sqrt(5))
    return [(SPACING * math.sqrt(k) * math.cos(k * golden), SPACING * math.sqrt(k) * math.sin(k * golden))
            for k in range(count)]


def _relax(members: list[int], neighbours: list[list[int]], local: list[tuple[float, float]], rounds: int = 3) -> None:
    """Pull each memory halfway from its spiral place towards the middle of its neighbours, a few times."""
    if len(members) < 3:
        return
    anchor = {m: local[m] for m in members}
    for _ in range(rounds):
        moved = {}
        for m in members:
            links = neighbours[m]
            if not links:
                continue
            mx = sum(local[o][0] for o in links) / len(links)
            my = sum(local[o][1] for o in links) / len(links)
            moved[m] = ((anchor[m][0] + mx) / 2, (anchor[m][1] + my) / 2)
        for m, spot in moved.items():
            local[m] = spot


def _pack(radii: list[float]) -> list[tuple[float, float]]:
    """Centres for discs (given largest first) in rows, the whole about twice as wide as tall (a screen's shape)."""
    if not radii:
        return []
    width = max(max(radii) * 2, math.sqrt(sum((2 * r + 3 * SPACING) ** 2 for r in radii)) * 1.5)  # a wide screen
    centres = []
    x = y = row_height = 0.0
    for radius in radii:
        size = 2 * radius + 3 * SPACING  # room for the disc's label and its titles
        if x > 0 and x + size > width:
            x, y, row_height = 0.0, y + row_height, 0.0
        centres.append((x + radius, y + radius))
        x += size
        row_height = max(row_height, size)
    return centres


def _timeline(memories: list[Memory]) -> dict[str, Any]:
    """Decisions newest first (row numbers into `nodes`), and supersession chains oldest → newest."""
    from cortex.projections import is_decision

    row_of = {m.id: i for i, m in enumerate(memories)}
    decisions = sorted((i for i, m in enumerate(memories) if is_decision(m)),
                       key=lambda i: (memories[i].created, memories[i].id), reverse=True)
    replaces: dict[int, list[int]] = {}  # newer row -> rows it supersedes
    replaced_by: dict[int, list[int]] = {}
    for i, m in enumerate(memories):
        for link in m.links:
            if link.rel == "supersedes" and link.to in row_of:
                replaces.setdefault(i, []).append(row_of[link.to])
                replaced_by.setdefault(row_of[link.to], []).append(i)
    chains = []
    seen: set[int] = set()
    for row in sorted(set(replaces) | set(replaced_by), key=lambda i: (memories[i].created, memories[i].id)):
        if row in seen:
            continue
        chain = _reached(row, lambda current: replaces.get(current, []) + replaced_by.get(current, []))
        seen.update(chain)
        chains.append(sorted(chain, key=lambda i: (memories[i].created, memories[i].id)))
    return {"decisions": decisions, "chains": chains,
            "replaces": {str(k): v for k, v in sorted(replaces.items())},
            "replaced_by": {str(k): v for k, v in sorted(replaced_by.items())}}


def _branch_changes(store: Store, index: Index) -> dict[str, Any]:
    """Memories changed on this branch since it left the default branch, and memory files not committed."""
    from cortex.gitfacts import default_branch

    out: dict[str, Any] = {"git": False, "branch": None, "default": None, "base": None, "note": "",
                           "changes": {}, "uncommitted": None}  # None: not looked at (no git, no commit)
    worktree = store.worktree
    if worktree is None:
        out["note"] = "Not in a git repository." if store.label == "project" else "The global store is not in git."
        return out
    from cortex.gitops import memory_diff, open_repository, store_prefix

    out["git"] = True
    repo = open_repository(worktree)
    if repo.head_is_unborn:
        out["note"] = "No commit yet."
        return out
    branch = store.current_branch()
    default = default_branch(str(worktree))
    out.update(branch=branch, default=default)
    prefix = store_prefix(repo, store.root)
    if default is None:
        out["note"] = "No default branch (main, master or trunk) to compare with."
    elif branch == default:
        out["note"] = f"On the default branch, {default}: only what is not committed yet."
    else:
        base = repo.merge_base(repo.branches.local[default].target, repo.head.target)
        if base is None:
            out["note"] = f"Branch {branch} shares no history with {default}."
        else:
            out["base"] = str(base)
            out["changes"] = memory_diff(repo, str(base), "HEAD", prefix)
    out["uncommitted"] = _uncommitted(repo, prefix, index)
    return out


def _uncommitted(repo: Any, prefix: str, index: Index) -> list[dict[str, Any]]:
    """Memory files that differ from HEAD (staged or not): id, path, what happened, title when known."""
    import pygit2

    flags = pygit2.enums.FileStatus
    new = flags.WT_NEW | flags.INDEX_NEW
    gone = flags.WT_DELETED | flags.INDEX_DELETED
    rel_of = index.rel_of_id()
    out = []
    for path, state in sorted(repo.status(untracked_files="all").items()):
        if not path.startswith(prefix + "/") or not path.endswith(".md") or state & flags.IGNORED:
            continue
        match = re.search(r"-([0-9a-f]{12})\.md$", path)
        memory_id = match.group(1) if match else ""
        change = "new" if state & new else "deleted" if state & gone else "changed"
        title = str(index.meta(rel_of[memory_id]).get("title", "")) if memory_id in rel_of else ""
        out.append({"id": memory_id, "path": path, "change": change, "title": title})
    return out
