"""`cortex report`: one self-contained HTML page, opened in a real headless Chromium.

The browser half runs tests/e2e/report_browser.js (puppeteer-core driving @sparticuz/chromium, both pinned
in tests/e2e/package.json) as a subprocess: it prints what the page showed as JSON and keeps a screenshot
in tests/e2e/artifacts/ (gitignored), whose path each test prints.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cortex import report
from cortex.store import Store
from tests.helpers import checkout_new_branch, commit_all, cortex, remember

E2E = Path(__file__).parent / "e2e"
DRIVER = E2E / "report_browser.js"
ARTIFACTS = E2E / "artifacts"
CELERY_OLD, CELERY_NEW = "f4a9463fdddd", "035597ce1c99"  # .cortex-example: the arq decision replaces Celery


def open_in_browser(page: Path, name: str, **options: Any) -> dict[str, Any]:
    """What headless Chromium saw on `page` (see report_browser.js); the screenshot is kept under `name`."""
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"{name}.png"
    config = {"page": str(page), "screenshot": str(shot)} | options
    result = subprocess.run(["node", str(DRIVER), json.dumps(config)], cwd=E2E, capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, f"browser driver failed:\n{result.stderr}"
    print(f"screenshot: {shot}")
    seen = json.loads(result.stdout)
    assert shot.is_file()
    return seen


def assert_clean(seen: dict[str, Any]) -> None:
    """The page ran without an error and asked the network for nothing."""
    assert seen["ready"], f"the page never became ready: {seen['consoleErrors']} {seen['pageErrors']}"
    assert seen["consoleErrors"] == [] and seen["pageErrors"] == [], (seen["consoleErrors"], seen["pageErrors"])
    assert seen["requests"] == [], seen["requests"]
    assert seen["dialogs"] == [] and seen["pwned"] is None


def make_report(store_dir: Path, out: Path, env: dict[str, str] | None = None) -> Path:
    result = cortex("report", "--dir", str(store_dir), "-o", str(out), cwd=store_dir.parent, env=env)
    assert str(out) in result.stdout
    return out


# ---------------------------------------------------------------- the example store in a browser


def test_example_store_page_draws_every_memory_and_a_click_shows_it(example_store: Path, tmp_path: Path) -> None:
    page = make_report(example_store, tmp_path / "example.html")
    count = len(list((example_store / "memories").rglob("*.md")))
    seen = open_in_browser(page, "example", click=CELERY_NEW)
    assert_clean(seen)
    assert seen["total"] == count == 26
    assert seen["drawn"] == count and seen["inked"] == count  # every memory's dot has ink on the canvas
    assert seen["panel"].startswith("Replace Celery and RabbitMQ with arq on the Redis we already run")
    assert "decision" in seen["panel"] and "2026-08-27T17:20:00Z" in seen["panel"]  # type and dates
    assert seen["panelPre"].startswith("We are moving all background jobs from Celery to arq.")  # the body
    assert "supersedes → Run background jobs on Celery" in seen["panel"]  # its links, readable
    print(f"example store: page ready {seen['loadMs']:.0f} ms after navigation")


def test_wheel_zooms_around_the_pointer_and_a_drag_pans(example_store: Path, tmp_path: Path) -> None:
    page = make_report(example_store, tmp_path / "example.html")
    seen = open_in_browser(page, "example-zoomed", click=CELERY_NEW, zoom=True, pan=True)
    assert_clean(seen)
    zoom = seen["zoom"]
    assert zoom["after"]["scale"] > zoom["before"]["scale"] * 1.5  # wheel up: closer
    # the memory under the pointer stays under it
    assert abs(zoom["spotAfter"]["x"] - zoom["spotBefore"]["x"]) < 2
    assert abs(zoom["spotAfter"]["y"] - zoom["spotBefore"]["y"]) < 2
    pan = seen["pan"]
    assert pan["after"]["ox"] - pan["before"]["ox"] == pytest.approx(60, abs=1)
    assert pan["after"]["oy"] - pan["before"]["oy"] == pytest.approx(40, abs=1)
    assert pan["after"]["scale"] == pan["before"]["scale"]


def test_search_goes_to_a_memory_and_the_legend_hides_a_type(example_store: Path, tmp_path: Path) -> None:
    page = make_report(example_store, tmp_path / "example.html")
    seen = open_in_browser(page, "example-search", search="ledger backups", hideType="gotcha")
    assert_clean(seen)
    assert seen["searchPanel"].startswith("Plan: nightly per-tenant ledger backups to object storage")
    gotchas = len(list((example_store / "memories" / "gotcha").glob("*.md")))
    assert gotchas and seen["drawnAfterHiding"] == seen["total"] - gotchas


def test_decisions_timeline_shows_the_supersession_chain(example_store: Path, tmp_path: Path) -> None:
    data = report.build(Store(example_store))
    ids = [row[0] for row in data["nodes"]]
    chains = [[ids[row] for row in chain] for chain in data["timeline"]["chains"]]
    assert [CELERY_OLD, CELERY_NEW] in chains  # oldest first
    decisions = [ids[row] for row in data["timeline"]["decisions"]]
    assert decisions.index(CELERY_NEW) < decisions.index(CELERY_OLD)  # newest first
    seen = open_in_browser(report.write(Store(example_store), tmp_path / "r.html"), "timeline")
    assert_clean(seen)
    timeline = seen["sections"]["timeline"]
    chain_line = re.search(r"2026-07-29Run background jobs on Celery.*superseded\s*→\s*2026-08-27Replace Celery",
                           timeline)
    assert chain_line, timeline
    assert "superseded by Replace Celery and RabbitMQ" in timeline


# ---------------------------------------------------------------- untrusted text


def test_memory_text_never_runs_as_script_or_markup(project: Path, tmp_path: Path) -> None:
    store = Store.locate(project)
    body = ('Close the data block: </script><script>window.__pwned = "script"</script>\n'
            '<!-- <script> --> <img src=x onerror="window.__pwned = \'img\'"> & \u2028 done')
    evil = remember(store, body, title='<img src=x onerror="window.__pwned=\'title\'"> </script>', link=False)
    remember(store, "A plain neighbour so the page has two memories.", link=False)
    page = report.write(store, tmp_path / "evil.html")
    html = page.read_text(encoding="utf-8")
    assert "</script><script>window.__pwned" not in html and "<img src=x" not in html
    seen = open_in_browser(page, "untrusted", click=evil.id)
    assert_clean(seen)  # nothing ran: no error, no request for `x`, no dialog, window.__pwned unset
    assert seen["total"] == 2 and seen["drawn"] == 2
    assert seen["panelPre"] == body + "\n"  # shown as the very text it is
    assert seen["panel"].startswith("<img src=x onerror=")


def test_the_page_lets_only_its_own_script_run(example_store: Path) -> None:
    html = report.render(report.build(Store(example_store)))
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src 'none'" in policy  # no fetch, no frame, no font, no connection
    script = re.search(r"<script>(.*?)</script>", html, re.S).group(1)
    assert report._hash(script) in policy and "unsafe-inline" not in policy
    assert not re.search(r"(src|href)=\"(https?:)?//", html)  # nothing from a CDN


# ---------------------------------------------------------------- this branch, problems


def test_branch_changes_uncommitted_memories_and_problems(project: Path, tmp_path: Path) -> None:
    store = Store.locate(project)
    old = remember(store, "Deploy with a shell script from a laptop.", type="decision", link=False)
    kept = remember(store, "Logs go to stdout, collected by the platform.", type="pattern", link=False)
    commit_all(project, "memories on main")
    checkout_new_branch(project, "feature/deploy")
    new = remember(store, "Deploy from CI on every tag, never from a laptop.", type="decision", link=False)
    store.supersede(old.id, new.id)
    commit_all(project, "deploy from CI")
    draft = remember(store, "Draft: canary deploys for the API.", type="plan", link=False)
    store.update(kept.id, {"priority": 9})
    broken = store.memories_dir / "gotcha" / "broken-0123456789ab.md"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text("---\nid: 0123456789ab\ntype: gotcha\n---\nno title\n", encoding="utf-8")

    data = report.build(store)
    changes = data["branch"]["changes"]
    assert (data["branch"]["branch"], data["branch"]["default"]) == ("feature/deploy", "main")
    assert [row["id"] for row in changes["added"]] == [new.id]
    assert [row["id"] for row in changes["superseded"]] == [old.id]
    uncommitted = {row["id"]: row["change"] for row in data["branch"]["uncommitted"]}
    assert uncommitted == {draft.id: "new", kept.id: "changed", "0123456789ab": "new"}
    assert any(str(broken) in problem and "title" in problem for problem in data["problems"])

    seen = open_in_browser(report.write(store, tmp_path / "branch.html"), "branch")
    assert_clean(seen)
    branch = seen["sections"]["branch"]
    assert "Branch feature/deploy, compared with main" in branch
    assert re.search(r"added \(1\)\s*decision Deploy from CI on every tag", branch), branch
    assert re.search(r"superseded \(1\)\s*decision Deploy with a shell script", branch), branch
    assert "new: Draft: canary deploys for the API" in branch and "changed: Logs go to stdout" in branch
    assert str(broken) in seen["sections"]["problems"]
    assert seen["total"] == 4 and seen["inked"] == 4  # the broken file is a problem, not a dot


def test_outside_git_the_branch_section_says_so(example_store: Path) -> None:
    data = report.build(Store(example_store))
    assert data["branch"]["git"] is False and data["branch"]["note"] == "Not in a git repository."


# ---------------------------------------------------------------- salience and decay


def test_salience_reads_and_decay_at_a_glance(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cortex import salience

    monkeypatch.setenv("CORTEX_NOW", "2026-11-01T00:00:00Z")
    store = Store.locate(project)
    useful = remember(store, "Run the migrations with `make migrate`, never by hand.", type="decision", link=False)
    read = remember(store, "The staging database is reset every Sunday night.", type="context", link=False)
    monkeypatch.setenv("CORTEX_NOW", "2026-12-30T00:00:00Z")  # the progress note below is two months older
    fading = remember(store, "Half-way through the Redis upgrade.", type="progress", link=False)
    monkeypatch.setenv("CORTEX_NOW", "2027-03-01T00:00:00Z")
    salience.feedback(store, useful.id, "up")
    store.record_access([read.id] * 3)

    data = report.build(store)
    row = {r[0]: dict(zip(data["fields"], r)) for r in data["nodes"]}
    assert row[fading.id]["decayed"] < 0.05 < row[fading.id]["confidence"]  # a progress note fades in weeks
    assert row[useful.id]["decayed"] == row[useful.id]["confidence"]  # a decision never decays
    assert row[useful.id]["salience"] > 0.5 and row[useful.id]["tier"] == "hot"
    assert row[read.id]["access"] == 3

    seen = open_in_browser(report.write(store, tmp_path / "salience.html"), "salience", click=fading.id)
    assert_clean(seen)
    text = seen["sections"]["salience"]
    assert re.search(r"Fading: confidence after decay under 0\.3 \(\d+\)\s*Half-way through the Redis upgrade", text)
    assert re.search(r"Hot set: always in the briefing \(1\)\s*Run the migrations", text), text
    assert re.search(r"Most read \(1\)\s*The staging database is reset every Sunday night\.? 3 reads", text), text
    assert "to hot: Run the migrations" in text  # the latest move between tiers
    assert f"confidence\n0.9 (after decay {row[fading.id]['decayed']})" in seen["panel"]


# ---------------------------------------------------------------- the command


def test_command_writes_to_state_by_default_stdout_with_dash_and_json(project: Path) -> None:
    remember(project, "One memory to draw.", link=False)
    result = cortex("report", cwd=project)
    written = project / ".cortex" / "state" / "report.html"
    assert result.stdout.splitlines() == [f"wrote {written}", f"open {written.as_uri()}"]
    assert written.read_text(encoding="utf-8").startswith("<!doctype html>")
    assert not [p for p in written.parent.iterdir() if p.name.endswith(".tmp")]  # atomic: no temp file left
    piped = cortex("report", "-o", "-", cwd=project)
    assert piped.stdout.startswith("<!doctype html>") and "One memory to draw." in piped.stdout
    data = json.loads(cortex("report", "--json", cwd=project).stdout)
    assert [row[data["fields"].index("body")] for row in data["nodes"]] == ["One memory to draw.\n"]


def test_an_unwritable_output_is_one_line_and_writes_nothing(project: Path) -> None:
    blocker = project / "not-a-folder"
    blocker.write_text("a file, not a folder\n", encoding="utf-8")
    result = cortex("report", "-o", str(blocker / "report.html"), cwd=project, check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("cortex: ") and len(result.stderr.strip().splitlines()) == 1
    assert str(blocker) in result.stderr
    assert blocker.read_text(encoding="utf-8") == "a file, not a folder\n"


# ---------------------------------------------------------------- layout


def test_linked_memories_share_a_cluster_and_clusters_do_not_overlap(example_store: Path) -> None:
    data = report.build(Store(example_store))
    fields = {name: i for i, name in enumerate(data["fields"])}
    nodes = data["nodes"]
    for source, target, _rel, _strength in data["edges"]:
        assert nodes[source][fields["cluster"]] == nodes[target][fields["cluster"]]
    clusters = data["clusters"]
    for i, a in enumerate(clusters):
        for b in clusters[i + 1:]:
            assert ((a["x"] - b["x"]) ** 2 + (a["y"] - b["y"]) ** 2) ** 0.5 >= a["r"] + b["r"]
    for row in nodes:  # every dot inside its disc
        disc = clusters[row[fields["cluster"]]]
        assert ((row[fields["x"]] - disc["x"]) ** 2 + (row[fields["y"]] - disc["y"]) ** 2) ** 0.5 <= disc["r"]
    assert sum(c["size"] for c in clusters) == len(nodes)


# ---------------------------------------------------------------- 10,000 memories


def test_ten_thousand_memories_draws_every_node(tmp_path: Path) -> None:
    from bench.gen_store import generate

    store = generate(tmp_path / "big" / ".cortex", 10_000)
    page = make_report(store.root, tmp_path / "big.html", env={"CORTEX_HOME": os.environ["CORTEX_HOME"]})
    seen = open_in_browser(page, "ten-thousand", click=_first_id(page), fullPage=False)
    assert_clean(seen)
    assert seen["total"] == 10_000 and seen["drawn"] == 10_000 and seen["inked"] == 10_000
    assert seen["panelPre"]  # a click on one dot among 10,000 finds it
    print(f"10,000 memories: page ready {seen['loadMs']:.0f} ms after navigation (bench/report.py measures it)")


def _first_id(page: Path) -> str:
    match = re.search(r'"nodes":\[\["([0-9a-f]{12})"', page.read_text(encoding="utf-8"))
    assert match
    return match.group(1)
