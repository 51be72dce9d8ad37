"""Projections: decisions.md and friends, rendered byte-deterministically from the memories."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex import memory as fmt
from cortex import projections
from cortex.memory import Link, Memory
from cortex.store import Store
from tests.helpers import checkout_new_branch, EXAMPLE_STORE, cortex, remember


def _copy_example(tmp_path: Path) -> Path:
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE_STORE, folder, ignore=shutil.ignore_patterns("cache", "state", "*.md.tmp"))
    for page in projections.PAGES:
        (folder / page).unlink(missing_ok=True)
    return folder


def test_project_writes_the_three_pages_from_the_example(tmp_path):
    folder = _copy_example(tmp_path)
    out = cortex("project", "--dir", str(folder), cwd=tmp_path).stdout
    assert out.count("wrote") == 3
    decisions = (folder / "decisions.md").read_text(encoding="utf-8")
    assert "## storage" in decisions
    assert "### Keep each shop's ledger in its own SQLite file (WAL), not a shared Postgres server" in decisions
    assert "**Rejected:**" in decisions and "managed Postgres" in decisions
    assert "memories/decision/" in decisions
    assert "### Run background jobs on Celery" not in decisions  # superseded: in the archive, linked as replaced
    assert "**Replaces:** [Run background jobs on Celery with RabbitMQ as the broker]" in decisions
    archive = (folder / "decisions-archive.md").read_text(encoding="utf-8")
    assert "Run background jobs on Celery with RabbitMQ as the broker" in archive
    assert "Superseded by: [Replace Celery and RabbitMQ with arq" in archive
    assert "generated at" not in decisions.lower()


def test_active_plan_lists_each_branch_and_does_not_follow_the_checkout(tmp_path, repo):
    store = Store.init(repo / ".cortex")
    store.create(Memory(id="", type="plan", title="Ship search", body="- [x] index\n- [ ] rank\n"))
    store.create(Memory(id="", type="progress", title="Index built", body="Whoosh index in place."))
    store.create(Memory(id="", type="plan", title="Other branch plan", branch="feature/x"))
    cortex("project", cwd=repo)
    page = (repo / ".cortex" / "active-plan.md").read_text(encoding="utf-8")
    assert page.startswith("# Active plans")
    main, feature = page.index("## Branch `main`"), page.index("## Branch `feature/x`")
    assert feature < main  # branches by name
    assert "### Ship search" in page[main:] and "- [ ] rank" in page[main:] and "**Index built**" in page[main:]
    assert "### Other branch plan" in page[feature:main]
    checkout_new_branch(repo, "feature/y")  # the same memories on another branch: the same page
    assert "up to date" in cortex("project", "--check", cwd=repo).stdout


def test_check_names_stale_pages_and_exits_1(project):
    assert cortex("project", cwd=project).returncode == 0
    assert "up to date" in cortex("project", "--check", cwd=project).stdout
    remember(project, "Use uv to manage environments", type="decision", tags=["tooling"])  # a new memory file
    stale = cortex("project", "--check", cwd=project, check=False)
    assert stale.returncode == 1 and "decisions.md is out of date" in stale.stderr
    assert "decisions-archive.md" not in stale.stderr
    cortex("project", cwd=project)
    assert "Use uv to manage environments" in (project / ".cortex" / "decisions.md").read_text(encoding="utf-8")
    assert cortex("project", "--check", cwd=project).returncode == 0


def test_a_project_template_overrides_the_packaged_one(project):
    remember(project, "Prefer small PRs", type="decision")
    templates = project / ".cortex" / "templates"
    templates.mkdir()
    (templates / "decisions.md.j2").write_text(
        "# Our decisions\n{% for g in groups %}{% for d in g.decisions %}\n- {{ d.title }}\n{% endfor %}{% endfor %}\n",
        encoding="utf-8")
    cortex("project", cwd=project)
    assert (project / ".cortex" / "decisions.md").read_text(encoding="utf-8") == "# Our decisions\n- Prefer small PRs\n"


def _decision(rng: random.Random, n: int, ids: list[str]) -> Memory:
    links = [Link("relates_to", rng.choice(ids), 0.3)] if ids and rng.random() < 0.5 else []
    if ids and rng.random() < 0.2:
        links.append(Link("supersedes", rng.choice(ids)))
    return Memory(
        id=f"{rng.getrandbits(44) | (10 << 44):012x}", type=rng.choice(["decision", "architecture", "plan", "progress"]),
        title=f"Decision {n} {rng.choice(['cache', 'auth', 'queue'])}",
        body=f"Because {n}.\n\nRejected: option {n}a, option {n}b\n",
        status=rng.choice(["active", "active", "archived", "superseded"]), tags=rng.sample(["db", "ops", "adr", "ux"], 2),
        branch=rng.choice(["main", "feature/x"]), created=f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T10:00:00Z",
        updated="2026-10-01T10:00:00Z", links=links,
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000), st.permutations(list(range(12))))
def test_same_memories_in_any_order_and_mtime_give_the_same_bytes(tmp_path_factory, seed, order):
    rng = random.Random(seed)
    made: list[Memory] = []
    for n in range(12):
        made.append(_decision(rng, n, [m.id for m in made]))
    pages = []
    for attempt, sequence in enumerate([list(range(12)), order]):
        root = tmp_path_factory.mktemp("store") / ".cortex"
        store = Store.init(root)
        for position, index in enumerate(sequence):
            item = made[index]
            path = store.memories_dir / item.type / fmt.file_name(item)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(fmt.render_new(item), encoding="utf-8")
            os.utime(path, ns=(position * 10**9 + attempt, position * 10**9 + attempt))
        env_lang = os.environ.get("LC_ALL")
        os.environ["LC_ALL"] = "C" if attempt == 0 else "tr_TR.UTF-8"
        try:
            pages.append([p.text for p in projections.build(store)])
        finally:
            if env_lang is None:
                os.environ.pop("LC_ALL", None)
            else:
                os.environ["LC_ALL"] = env_lang
    assert pages[0] == pages[1]


def test_a_page_shows_a_decision_as_edited_by_hand(tmp_path):
    folder = _copy_example(tmp_path)
    cortex("project", "--dir", str(folder), cwd=tmp_path)
    path = next((folder / "memories" / "decision").glob("keep-each-shop-s-ledger-*.md"))
    path.write_text(path.read_text(encoding="utf-8").replace("one writer per file is plenty",
                                                             "one writer per file is still plenty"), encoding="utf-8")
    out = cortex("project", "--dir", str(folder), cwd=tmp_path).stdout
    assert "decisions.md" in out and "active-plan.md" not in out  # a decision changed: its page, not the plan's
    assert "one writer per file is still plenty" in (folder / "decisions.md").read_text(encoding="utf-8")
    rendered = {page: (folder / page).read_bytes() for page in projections.PAGES}
    (folder / "cache" / "projections.stamp").unlink()
    cortex("project", "--dir", str(folder), cwd=tmp_path)
    assert {page: (folder / page).read_bytes() for page in projections.PAGES} == rendered


def test_a_progress_note_renders_the_plan_page_alone(tmp_path, monkeypatch):
    folder = _copy_example(tmp_path)
    cortex("project", "--dir", str(folder), cwd=tmp_path)
    store = Store(folder, "project")
    store.create(Memory(id="", type="progress", title="Ledger export: CSV writer done", body="CSV writer done.\n"))
    seen: list[list[str]] = []
    original = projections.build

    def recording(*args, **kwargs):
        pages = original(*args, **kwargs)
        seen.append([page.name for page in pages])
        return pages

    monkeypatch.setattr(projections, "build", recording)
    changed = projections.refresh(store)
    assert [path.name for path in changed] == ["active-plan.md"]
    assert seen == [["active-plan.md"]]  # the decision pages were not rendered again
    assert "Ledger export: CSV writer done" in (folder / "active-plan.md").read_text(encoding="utf-8")
