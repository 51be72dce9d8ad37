"""Stale from git (issue 42): a memory naming files that later commits rewrote or deleted is marked possibly
stale, with the reason, by recall (text and JSON), MCP search, the briefing and `cortex review`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.helpers import checkout_new_branch, commit_all, cortex, cortex_json, git, remember
from tests.test_mcp import Client, connect, server_env

PARSER = "".join(f"def rule_{n}(line):\n    return line.split(',')[{n}]\n" for n in range(10))  # 20 lines


def _code(project: Path) -> None:
    (project / "src").mkdir()
    (project / "src" / "parser.py").write_text(PARSER, encoding="utf-8")
    (project / "src" / "small.py").write_text("".join(f"X{n} = {n}\n" for n in range(12)), encoding="utf-8")
    (project / "src" / "legacy.py").write_text("def feed():\n    return []\n", encoding="utf-8")
    commit_all(project, "code")


def _memories(project: Path) -> dict[str, str]:
    return {
        "parser": remember(project, "The CSV parser splits each line on commas, one rule per column",
                           type="architecture", files=["src/parser.py"], link=False).id,
        "small": remember(project, "Constants X0 to X11 live in small.py", type="pattern",
                          files=["src/small.py"], link=False).id,
        "legacy": remember(project, "The legacy feed comes from legacy.py", type="context",
                           files=["src/legacy.py"], link=False).id,
    }


def _change_code(project: Path) -> None:
    """parser.py rewritten, small.py given one line more, legacy.py deleted: one commit."""
    (project / "src" / "parser.py").write_text("import csv\n\ndef rows(handle):\n    return list(csv.reader(handle))\n",
                                               encoding="utf-8")
    with open(project / "src" / "small.py", "a", encoding="utf-8") as handle:
        handle.write("X12 = 12\n")
    (project / "src" / "legacy.py").unlink()
    commit_all(project, "rewrite the parser, drop the legacy feed")


def test_recall_says_which_memories_later_commits_made_possibly_stale_and_why(project):
    _code(project)
    ids = _memories(project)
    commit_all(project, "memories")
    later = time.time() + 3600
    os.utime(project / "src" / "small.py", (later, later))  # a touched file is not a changed one
    _change_code(project)
    fresh = remember(project, "The parser now reads rows with the csv module", type="architecture",
                     files=["src/parser.py"], link=False).id  # written after the rewrite, not committed yet

    hits = {hit["id"]: hit for hit in cortex_json("recall", "csv parser columns feed constants", "--all", "--json",
                                                  cwd=project)}
    assert set(ids.values()) | {fresh} <= set(hits)
    assert "src/parser.py changed" in hits[ids["parser"]]["stale"]
    assert "src/legacy.py deleted" in hits[ids["legacy"]]["stale"]
    assert hits[ids["small"]]["stale"] is None  # one line added: what it says still holds
    assert hits[fresh]["stale"] is None
    text = cortex("recall", "how is the CSV parser split into rules", cwd=project).stdout
    assert "possibly stale: src/parser.py changed" in text

    # a memory edited since its commit is about the files as they are now
    path = next((project / ".cortex" / "memories").rglob(f"*{ids['parser']}.md"))
    path.write_text(path.read_text(encoding="utf-8").replace("one rule per column", "rows via csv"), encoding="utf-8")
    hits = {hit["id"]: hit for hit in cortex_json("recall", "csv parser", "--all", "--json", cwd=project)}
    assert hits[ids["parser"]]["stale"] is None


def test_a_memory_committed_with_the_change_it_describes_is_not_stale(project):
    _code(project)
    (project / "src" / "parser.py").write_text("import csv\n\ndef rows(handle):\n    return list(csv.reader(handle))\n",
                                               encoding="utf-8")
    memory = remember(project, "The parser reads rows with the csv module", type="architecture",
                      files=["src/parser.py"], link=False).id
    commit_all(project, "rewrite the parser, with its memory")
    hits = cortex_json("recall", "csv module parser rows", "--all", "--json", cwd=project)
    assert [hit["stale"] for hit in hits if hit["id"] == memory] == [None]


def test_the_briefing_marks_from_git_not_from_file_times(project):
    _code(project)
    ids = _memories(project)
    commit_all(project, "memories")
    later = time.time() + 3600
    os.utime(project / "src" / "parser.py", (later, later))
    text = cortex("briefing", "--fresh", cwd=project).stdout
    assert ids["parser"] in text and "may be stale" not in text  # a checkout or a touch changes nothing
    _change_code(project)
    text = cortex("briefing", "--fresh", cwd=project).stdout
    line = next(line for line in text.splitlines() if ids["parser"] in line)
    assert "(may be stale: src/parser.py changed (20 of 20 lines) since" in line
    assert "may be stale" not in next(line for line in text.splitlines() if ids["small"] in line)


def test_review_lists_the_memories_a_branch_makes_stale(project):
    _code(project)
    ids = _memories(project)
    commit_all(project, "memories")
    checkout_new_branch(project, "feature/csv")
    _change_code(project)
    report = json.loads(cortex("review", "main..feature/csv", "--json", cwd=project).stdout)
    stale = [w for w in report["warnings"] if w["kind"] == "stale"]
    assert [w["id"] for w in stale] == [ids["parser"]]  # legacy.py's deletion is a deleted-file warning
    assert "src/parser.py changed" in stale[0]["reason"]
    assert [w["id"] for w in report["warnings"] if w["kind"] == "deleted-file"] == [ids["legacy"]]
    text = cortex("review", "main..feature/csv", cwd=project).stdout
    assert "Possibly stale:" in text and ids["parser"] in text
    git(project, "checkout", "-q", "main")
    assert not [w for w in json.loads(cortex("review", "main..main", "--json", cwd=project).stdout)["warnings"]
                if w["kind"] == "stale"]


def test_mcp_search_carries_the_reason(project, tmp_path):
    from anyio.from_thread import start_blocking_portal

    from tests.helpers import cortex_command

    _code(project)
    ids = _memories(project)
    commit_all(project, "memories")
    _change_code(project)
    command = cortex_command()
    with start_blocking_portal() as portal:
        with connect(portal, command[0], [*command[1:], "mcp"], project, server_env(tmp_path / "home")) as session:
            client = Client(portal, session, project, {})
            rows = client.call("cortex_search", query="how does the CSV parser split lines", scope="project")["results"]
    by_id = {row["id"]: row for row in rows}
    assert "src/parser.py changed" in by_id[ids["parser"]]["stale"]
