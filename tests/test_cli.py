"""Every command, run as a real `cortex` subprocess."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cortex.store import Store
from tests.helpers import cortex, cortex_json, remember


def _remember(cwd: Path, text: str, *args: str) -> str:
    """`cortex remember` as a subprocess: for the tests of that command and its options."""
    return cortex("remember", text, *args, cwd=cwd).stdout.strip()


def _saved(cwd: Path, text: str, **fields: object) -> str:
    """A memory saved in process, where the command under test is another one."""
    return remember(cwd, text, **fields).id


def _get(cwd: Path, memory_id: str):
    return Store.locate(cwd).get(memory_id)


def test_init_creates_the_layout_and_is_idempotent(repo):
    out = cortex("init", cwd=repo).stdout
    root = repo / ".cortex"
    assert "created" in out and (root / "config.yaml").is_file() and (root / "memories").is_dir()
    from cortex.store import GITIGNORE

    assert (root / ".gitignore").read_text(encoding="utf-8") == GITIGNORE
    assert {"cache/", "state/", "memories/code/"} <= set(GITIGNORE.splitlines())
    config = (root / "config.yaml").read_bytes()
    (repo / "sub").mkdir()
    assert "already set up" in cortex("init", cwd=repo / "sub").stdout
    assert (root / "config.yaml").read_bytes() == config


def test_remember_prints_the_id_and_json_prints_the_record(project):
    memory_id = _remember(project, "We use SQLite, not Postgres, for the local cache: no server to run",
                          "--type", "decision", "--priority", "8", "--tag", "storage",
                          "--file", "cortex/index/store.py", "--pin")
    assert len(memory_id) == 12
    record = cortex_json("remember", "Run migrations before tests", "--type", "gotcha", cwd=project)
    assert record["type"] == "gotcha" and Path(record["path"]).is_file() and record["store"] == "project"
    shown = cortex_json("show", memory_id, cwd=project)
    assert shown["pinned"] is True and shown["priority"] == 8 and shown["tags"] == ["storage"]
    assert shown["files"] == ["cortex/index/store.py"] and shown["branch"] == "main"
    assert shown["title"] == "We use SQLite, not Postgres, for the local cache: no server to run"


def test_remember_reads_stdin_and_refuses_empty_text(project):
    record = cortex_json("remember", "-", "--title", "From a pipe", cwd=project, input="piped text\n")
    assert record["title"] == "From a pipe" and record["body"] == "piped text\n"
    bad = cortex("remember", "   ", cwd=project, check=False)
    assert bad.returncode == 1 and "empty" in bad.stderr


def test_remember_rejects_bad_options_with_a_clear_error(project):
    bad = cortex("remember", "x", "--priority", "11", cwd=project, check=False)
    assert bad.returncode != 0 and "--priority" in bad.stderr
    bad = cortex("remember", "x", "--type", "opinion", cwd=project, check=False)
    assert bad.returncode != 0 and "--type" in bad.stderr
    assert list((project / ".cortex" / "memories").rglob("*.md")) == []


def test_list_table_and_json(project):
    a = _saved(project, "Pinned rule", pinned=True, priority=9)
    b = _saved(project, "Plain context note")
    c = _saved(project, "Old decision", type="decision")
    Store.locate(project).archive(c)
    table = cortex("list", cwd=project).stdout
    assert a in table and b in table and c not in table and "Pinned rule" in table
    rows = cortex_json("list", cwd=project)
    assert [r["id"] for r in rows] == [a, b]  # pinned first
    for key in ("id", "type", "title", "status", "priority", "pinned", "branch", "path"):
        assert key in rows[0]
    assert {r["id"] for r in cortex_json("list", "--all", cwd=project)} == {a, b, c}
    assert [r["id"] for r in cortex_json("list", "--status", "archived", cwd=project)] == [c]
    assert [r["id"] for r in cortex_json("list", "--type", "decision", "--all", cwd=project)] == [c]


def test_show_prints_path_and_file(project):
    memory_id = _saved(project, "Show me")
    out = cortex("show", memory_id[:6], cwd=project).stdout
    assert out.splitlines()[0].endswith(f"-{memory_id}.md") and f"id: {memory_id}" in out
    missing = cortex("show", "ffffffffffff", cwd=project, check=False)
    assert missing.returncode == 1 and "no memory with id" in missing.stderr


def _editor(tmp_path: Path, python_code: str) -> str:
    script = tmp_path / "editor.py"
    script.write_text("import sys, pathlib\np = pathlib.Path(sys.argv[1])\n" + python_code, encoding="utf-8")
    return f"{sys.executable} {script}"


def test_edit_saves_a_valid_change(project, tmp_path):
    memory_id = _saved(project, "Edit me", priority=3)
    editor = _editor(tmp_path, "p.write_text(p.read_text().replace('priority: 3', 'priority: 6'))\n")
    out = cortex("edit", memory_id, cwd=project, env={"EDITOR": editor})
    assert "saved" in out.stdout
    assert _get(project, memory_id).priority == 6


def test_edit_refuses_an_invalid_file_and_keeps_the_original(project, tmp_path):
    saved = remember(project, "Do not break me")
    memory_id, path = saved.id, saved.path
    before = path.read_bytes()
    editor = _editor(tmp_path, "p.write_text(p.read_text().replace('type: context', 'type: opinion'))\n")
    result = cortex("edit", memory_id, cwd=project, env={"EDITOR": editor}, check=False)
    assert result.returncode == 1 and "unknown type 'opinion'" in result.stderr and "draft is kept" in result.stderr
    assert path.read_bytes() == before


def test_edit_does_not_overwrite_a_change_made_while_the_editor_was_open(project, tmp_path):
    saved = remember(project, "Edited twice at once")
    memory_id, path = saved.id, saved.path
    # the "editor" edits its draft while something else (a hook, consolidation) archives the real file
    editor = _editor(tmp_path, f"""
real = pathlib.Path({str(path)!r})
real.write_text(real.read_text().replace('status: active', 'status: archived'))
p.write_text(p.read_text().replace('priority: 5', 'priority: 9'))
""")
    result = cortex("edit", memory_id, cwd=project, env={"EDITOR": editor}, check=False)
    assert result.returncode == 1 and "changed while you were editing" in result.stderr
    shown = _get(project, memory_id)
    assert shown.status == "archived" and shown.priority == 5  # the other change survives
    assert "priority: 9" in (project / ".cortex" / "state" / f"edit-{memory_id}.md").read_text(encoding="utf-8")


def test_forget_by_id_archives_and_keeps_the_file(project):
    memory_id = _saved(project, "Forget me")
    out = cortex("forget", memory_id, cwd=project).stdout
    assert "archived" in out
    record = _get(project, memory_id)
    assert record.status == "archived" and record.path.is_file()


def test_forget_by_query_asks_first(project):
    memory_id = _saved(project, "We use SQLite, not Postgres, for the local cache", type="decision")
    _saved(project, "Deploys go through the staging cluster first")
    declined = cortex("forget", "sqlite postgres", cwd=project, input="n\n", check=False)
    assert declined.returncode == 1 and memory_id in declined.stderr
    assert _get(project, memory_id).status == "active"
    accepted = cortex("forget", "sqlite postgres", cwd=project, input="y\n")
    assert f"{memory_id} archived" in accepted.stdout
    _saved(project, "Another SQLite note about WAL mode")
    assert "archived" in cortex("forget", "sqlite wal", "--yes", cwd=project).stdout


def test_forget_replaced_by_records_supersedes(project):
    old = _saved(project, "Use Postgres for everything", type="decision")
    new = _saved(project, "Use SQLite for the local cache", type="decision")
    assert f"{old} superseded by {new}" in cortex("forget", old, "--replaced-by", new, cwd=project).stdout
    assert _get(project, old).status == "superseded"
    assert ("supersedes", old) in [(link.rel, link.to) for link in _get(project, new).links]


def test_status_counts_and_problems(project):
    _saved(project, "A decision", type="decision")
    _saved(project, "A gotcha", type="gotcha", pinned=True)
    report = cortex_json("status", cwd=project)
    assert report["total"] == 2 and report["by_type"] == {"decision": 1, "gotcha": 1} and report["pinned"] == 1
    assert report["branch"] == "main" and report["problems"] == []
    bad = project / ".cortex" / "memories" / "gotcha" / "bad-cccccccccccc.md"
    bad.write_text("---\nid: cccccccccccc\ntitle: t\ntype: gotcha\nconfidence: 2\n---\n", encoding="utf-8")
    (project / ".cortex" / "config.yaml").write_text("colour: blue\n", encoding="utf-8")
    text = cortex("status", cwd=project).stdout
    assert f"{bad}: confidence: 2 is outside 0..1" in text and "unknown key 'colour'" in text
    strict = cortex("status", "--strict", cwd=project, check=False)
    assert strict.returncode == 1
    listed = cortex("list", cwd=project)
    assert "skipped" in listed.stderr and str(bad) in listed.stderr and listed.returncode == 0


def test_global_store_and_dir_option(project, tmp_path, isolated_env):
    gid = _remember(project, "Prefer uv over pip-tools", "--type", "pattern", "--global")
    assert (isolated_env / ".cortex" / "memories" / "pattern").is_dir()
    assert [r["id"] for r in cortex_json("list", "--global", cwd=project)] == [gid]
    assert cortex_json("list", cwd=project) == []
    other = tmp_path / "other-store"
    cortex("init", "--dir", str(other), cwd=project)
    oid = _remember(project, "Lives elsewhere", "--dir", str(other))
    assert [r["id"] for r in cortex_json("list", cwd=project, env={"CORTEX_DIR": str(other)})] == [oid]


def test_not_initialised_gives_a_one_line_hint(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cortex("list", cwd=empty, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "run `cortex init`" in result.stderr


def test_a_plain_folder_without_git_works(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    assert "not a git repository" in cortex("init", cwd=folder).stdout
    memory_id = _saved(folder, "No git, still remembered")
    assert cortex_json("show", memory_id, cwd=folder)["branch"] is None
    assert "off (not a git repository)" in cortex("status", cwd=folder).stdout


def test_json_output_is_valid_even_with_unicode(project):
    memory_id = _saved(project, "Ünïcode — “quotes” and emoji ✓")
    assert json.loads(cortex("list", "--json", cwd=project).stdout)[0]["id"] == memory_id


def test_usage_errors_are_one_line_with_exit_status_1(project):
    for args, expected in ((("recall", "x", "--bogus"), "no such option '--bogus'"),
                           (("recall",), "missing argument 'QUERY'"),
                           (("list", "--type", "opinion"), "invalid value for '--type'"),
                           (("no-such-command",), "no such command")):
        result = cortex(*args, cwd=project, check=False)
        assert result.returncode == 1, args
        assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"cortex: {expected}") and "--help`" in result.stderr
    assert cortex("--help", cwd=project).stdout.startswith("Usage:")
    assert cortex("--version", cwd=project).stdout.startswith("cortex, version")
    dirty = project / "dirty.md"  # a command's own exit status is kept: scan exits 1 on a finding
    dirty.write_text("SECRET_KEY=s3cr3t-value-here\n", encoding="utf-8")
    found = cortex("scan", str(dirty), cwd=project, check=False)
    assert found.returncode == 1 and "possible secret" in found.stdout and found.stderr == ""


def test_hook_help_lists_every_event(tmp_path):
    text = " ".join(cortex("hook", "--help", cwd=tmp_path).stdout.split())
    for event in ("session-start", "prompt", "stop", "pre-compact", "session-end", "git-pre-push", "git-post-merge",
                  "git-post-checkout"):
        assert event in text


def test_recall_limit_counts_linked_hits(tmp_path, example_store):
    store = example_store  # a copy of .cortex-example, its cache built once per session
    query = "write-transaction helper"  # its description is the best hit, and the code comes with it (source_of)
    hits = cortex_json("recall", query, "--limit", "2", "--keyword", "--dir", str(store), cwd=tmp_path)
    assert [(h["id"], h["via"]) for h in hits] == [("407cf71b5a22", None), ("281cc644d441", "source_of of 407cf71b5a22")]
    assert [h["id"] for h in cortex_json("recall", query, "--limit", "1", "--dir", str(store), cwd=tmp_path)] \
        == ["407cf71b5a22"]
    for limit in (1, 2, 3, 5):
        found = cortex_json("recall", "which database did we pick?", "--limit", str(limit), "--dir", str(store),
                            cwd=tmp_path)
        assert 0 < len(found) <= limit
        assert all(any(p["id"] == h["via"].rsplit(" ", 1)[-1] for p in found) for h in found if h["via"])
    table = cortex("recall", query, "--limit", "2", "--dir", str(store), cwd=tmp_path).stdout
    assert sum(1 for line in table.splitlines() if not line.startswith(" ")) == 2


def test_briefing_at_a_revision_names_the_revision(project):
    import pygit2

    from tests.helpers import commit_all

    progress = _saved(project, "Migrated the billing job to the new queue", type="progress")
    commit_all(project, "first")
    _saved(project, "Second note", type="context")
    commit_all(project, "second")
    first = str(pygit2.Repository(str(project)).revparse_single("HEAD~1").id)
    text = cortex("briefing", "--at", "HEAD~1", cwd=project).stdout
    header = next(line for line in text.splitlines() if line.startswith("# cortex briefing"))
    assert header == f"# cortex briefing — at revision `HEAD~1` @ {first[:7]} on branch `main`"
    assert progress in text and "Second note" not in text  # the branch's progress, as it was then
    assert "at revision `main` @" in cortex("briefing", "--at", "main", cwd=project).stdout
    assert "# cortex briefing — branch `main` @" in cortex("briefing", "--fresh", cwd=project).stdout


def test_show_explains_the_ranking_from_the_kept_centralities_without_a_sync(project, monkeypatch):
    """`cortex show` explains one memory's rank with the centralities kept for the committed cache, without
    loading the manifest or looking at every file (1.1 s of 1.3 at 100,000 memories); the explanation is the
    one a synced index gives, and without kept centralities it syncs as before."""
    import sqlite3

    from cortex.index import Index, db
    from cortex.memory import Link
    from cortex.store import Store

    hub = remember(project, "Chose SQLite over Postgres for the local cache: one file, no server", type="decision").id
    for text in ("SQLite WAL mode needs the shm file on the same disk", "The SQLite cache file lives in .cortex/cache"):
        remember(project, text, type="gotcha", links=[Link("relates_to", hub, 0.8)])
    store = Store.locate(project)
    Index(store).ensure()
    with sqlite3.connect(store.cache_dir / "cache.db") as conn:
        conn.execute("DELETE FROM centrality")
        conn.execute("DELETE FROM state WHERE key = 'centrality'")
    synced = cortex_json("show", hub, cwd=project)["ranking"]["parts"]  # no kept centralities: a sync works them out
    index = Index(store)
    assert synced["centrality"] > 0 and index.saved_centralities()
    assert index.saved_centralities() == index.ensure().centralities()

    def no_load(*args, **kwargs):
        raise AssertionError("loaded the manifest")

    monkeypatch.setattr(db, "load", no_load)
    from click.testing import CliRunner

    from cortex.cli import main

    kept = CliRunner().invoke(main, ["show", hub, "--json", "--dir", str(project / ".cortex")])
    assert kept.exit_code == 0, kept.output
    assert json.loads(kept.output)["ranking"]["parts"]["centrality"] == synced["centrality"]
