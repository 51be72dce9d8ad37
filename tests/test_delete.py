"""Delete that cleans up (issue 40): `forget --delete`, links to memories that no longer exist (skipped by every
reader, never a `status` problem, dropped by gc), `links --remove`; real `cortex` processes in a real repository."""

from __future__ import annotations

import json
import os
from pathlib import Path

from anyio.from_thread import start_blocking_portal

from cortex.memory import Link
from cortex.store import Store
from tests.helpers import commit_all, cortex, cortex_command, cortex_json, git, remember


def _three(project: Path) -> tuple[Store, dict[str, str]]:
    """Three memories; `retries` links to `deploys` (relates_to, strong) and to `logs`; committed."""
    store = Store.locate(project)
    ids = {
        "retries": remember(store, "Webhook retries back off exponentially, five attempts, then the event is "
                                   "parked in the dead-letter table.", link=False).id,
        "deploys": remember(store, "Deploys run from the release branch only; main is never deployed directly.",
                            link=False).id,
        "logs": remember(store, "Logs go to stdout as JSON lines; the platform ships them.", link=False).id,
    }
    store.add_links(ids["retries"], [Link("relates_to", ids["deploys"], 0.9), Link("relates_to", ids["logs"], 0.5)])
    store.add_links(ids["logs"], [Link("contradicts", ids["deploys"])])
    commit_all(project, "memories")
    return store, ids


def _path(store: Store, memory_id: str) -> Path:
    path = store.get(memory_id).path
    assert path is not None
    return path


def test_forget_delete_removes_several_files_and_status_strict_is_clean_after(project):
    store, ids = _three(project)
    deploys, logs = _path(store, ids["deploys"]), _path(store, ids["logs"])
    out = cortex("forget", "--delete", ids["deploys"], ids["logs"], cwd=project)  # no terminal: no question
    assert not deploys.exists() and not logs.exists()
    assert f"{ids['deploys']} deleted" in out.stdout and f"{ids['logs']} deleted" in out.stdout
    assert cortex("status", "--strict", cwd=project).returncode == 0  # the links to them are no problem
    assert [row["id"] for row in cortex_json("list", cwd=project)] == [ids["retries"]]


def test_forget_delete_of_an_unknown_id_removes_nothing(project):
    store, ids = _three(project)
    result = cortex("forget", "--delete", ids["deploys"], "abcdef123456", cwd=project, check=False)
    assert result.returncode != 0 and "abcdef123456" in result.stderr
    assert _path(store, ids["deploys"]).is_file()  # all or nothing


def test_git_rm_of_a_linked_memory_leaves_status_strict_clean_and_every_reader_working(project):
    store, ids = _three(project)
    git(project, "rm", "-q", str(_path(store, ids["deploys"]).relative_to(project)))
    git(project, "commit", "-q", "-m", "drop deploys")
    status = cortex("status", "--strict", cwd=project, check=False)
    assert status.returncode == 0, status.stdout
    assert "unknown id" not in status.stdout
    hits = cortex_json("recall", "webhook retries dead-letter", cwd=project)
    assert hits and hits[0]["id"] == ids["retries"] and ids["deploys"] not in json.dumps(hits)
    shown = cortex("show", ids["retries"], cwd=project).stdout
    assert ids["deploys"] not in shown and ids["logs"] in shown
    listed = cortex_json("links", cwd=project)
    assert {(row["id"], row["to"]) for row in listed} == {(ids["retries"], ids["logs"])}
    cortex("project", cwd=project)
    assert cortex("hook", "session-start", cwd=project, input="{}").returncode == 0


def test_gc_drops_links_to_memories_that_no_longer_exist_and_keeps_the_others(project):
    store, ids = _three(project)
    _path(store, ids["deploys"]).unlink()
    planned = cortex_json("gc", "--dry-run", cwd=project)
    assert {(a["action"], a["id"]) for a in planned} == {("unlink", ids["retries"]), ("unlink", ids["logs"])}
    assert ids["deploys"] in _path(store, ids["retries"]).read_text(encoding="utf-8")  # a dry run writes nothing
    cortex("gc", cwd=project)
    retries = store.get(ids["retries"])
    assert [(link.rel, link.to) for link in retries.links] == [("relates_to", ids["logs"])]
    assert "links:" not in _path(store, ids["logs"]).read_text(encoding="utf-8")  # its only link was dangling
    assert cortex_json("gc", "--dry-run", cwd=project) == []


def test_links_remove_takes_a_link_out_of_the_file_that_holds_it(project):
    store, ids = _three(project)
    out = cortex("links", "--remove", ids["deploys"], ids["logs"], cwd=project)  # written in logs' file
    assert f"removed {ids['logs']} contradicts {ids['deploys']}" in out.stdout
    assert store.get(ids["logs"]).links == []
    assert [link.to for link in store.get(ids["retries"]).links] == [ids["deploys"], ids["logs"]]  # others kept
    again = cortex("links", "--remove", ids["deploys"], ids["logs"], cwd=project, check=False)
    assert again.returncode != 0 and "no link between" in again.stderr
    _path(store, ids["deploys"]).unlink()  # a link left dangling is removed by the id it names
    cortex("links", "--remove", ids["retries"], ids["deploys"], cwd=project)
    assert [link.to for link in store.get(ids["retries"]).links] == [ids["logs"]]


def test_the_mcp_forget_tool_deletes_with_delete(project, isolated_env):
    from tests.test_mcp import connect, server_env

    store, ids = _three(project)
    path = _path(store, ids["logs"])
    command = cortex_command()
    with start_blocking_portal() as portal:
        env = server_env(isolated_env) | {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}  # this code
        with connect(portal, command[0], [*command[1:], "mcp"], project, env) as session:
            result = portal.call(session.call_tool, "cortex_forget", {"id": ids["logs"], "delete": True})
            assert not result.is_error, result.content[0].text
            assert result.structured_content["status"] == "deleted"
            shown = portal.call(session.call_tool, "cortex_get_memory", {"id": ids["retries"]})
            assert ids["logs"] not in json.dumps(shown.structured_content["links"])
    assert not path.exists()
    assert cortex("status", "--strict", cwd=project).returncode == 0
