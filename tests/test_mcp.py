"""`cortex mcp`: the real server as a subprocess, driven by the MCP SDK's own client over stdio.

One server per module (starting one costs ~2 s: the SDK import alone is 1.6 s), on a copy of the
example store in a git repository checked out on the example's feature branch.
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from cortex.store import Store
from tests.helpers import EXAMPLE_STORE, cortex, cortex_command, make_repo, remember

READ_ONLY = {"cortex_search", "cortex_search_decisions", "cortex_get_memory", "cortex_get_plan", "cortex_get_recent",
             "cortex_get_status", "cortex_get_briefing"}
WRITES = {"cortex_remember", "cortex_forget", "cortex_restore", "cortex_feedback", "cortex_inbox", "cortex_link",
          "cortex_suspects"}


class Client:
    """A connected MCP client session, called from plain (sync) tests through an event-loop portal."""

    def __init__(self, portal: BlockingPortal, session: ClientSession, project: Path, env: dict[str, str]) -> None:
        self.portal, self.session, self.project, self.env = portal, session, project, env

    def raw(self, name: str, **arguments: Any) -> Any:
        return self.portal.call(self.session.call_tool, name, arguments)

    def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        """A successful call's JSON answer (the text the model reads must be the same data)."""
        result = self.raw(name, **arguments)
        assert not result.is_error, result.content[0].text
        return result.structured_content

    def read(self, uri: str) -> str:
        return self.portal.call(self.session.read_resource, uri).contents[0].text


def server_env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "CORTEX_HOME": str(home / ".cortex"), "PATH": os.environ["PATH"],
            "GIT_AUTHOR_NAME": "Cortex Test", "GIT_AUTHOR_EMAIL": "test@example.com",
            **{name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ}}  # the code under test


@contextmanager
def connect(portal: BlockingPortal, command: str, args: list[str], cwd: Path, env: dict[str, str]) -> Iterator[ClientSession]:
    params = StdioServerParameters(command=command, args=args, cwd=str(cwd), env=env)
    with portal.wrap_async_context_manager(stdio_client(params)) as (read, write):
        with portal.wrap_async_context_manager(ClientSession(read, write)) as session:
            portal.call(session.initialize)
            yield session


@contextmanager
def example_client(root: Path, branch: str = "main") -> Iterator[Client]:
    """A client of `cortex mcp` in a repository holding a copy of the example store."""
    project = make_repo(root / "tallyho", branch=branch)
    shutil.copytree(EXAMPLE_STORE, project / ".cortex", ignore=shutil.ignore_patterns("cache", "state"))
    env = server_env(root / "home")
    command = cortex_command()
    with start_blocking_portal() as portal:
        with connect(portal, command[0], [*command[1:], "mcp"], project, env) as session:
            yield Client(portal, session, project, env)


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with example_client(tmp_path_factory.mktemp("mcp"), branch="feature/rate-limits") as client:
        yield client


def test_lists_every_tool_annotated_with_schemas_and_every_resource(mcp):
    tools = {tool.name: tool for tool in mcp.portal.call(mcp.session.list_tools).tools}
    assert set(tools) == READ_ONLY | WRITES
    for name, tool in tools.items():
        assert len(tool.description or "") > 60, name
        assert tool.input_schema["type"] == "object"
        for field, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{name}.{field} has no description"
        hints = tool.annotations
        assert hints.read_only_hint is (name in READ_ONLY), name
    assert tools["cortex_forget"].annotations.destructive_hint is True
    assert tools["cortex_remember"].annotations.destructive_hint is False
    assert "required" not in tools["cortex_search"].input_schema  # a query, or a path (issue 42)
    assert "path" in tools["cortex_search"].input_schema["properties"]
    assert "gotcha" in json.dumps(tools["cortex_search"].input_schema["properties"]["types"])
    resources = {str(r.uri) for r in mcp.portal.call(mcp.session.list_resources).resources}
    assert resources == {"cortex://status", "cortex://decisions", "cortex://plan"}
    templates = [t.uri_template for t in mcp.portal.call(mcp.session.list_resource_templates).resource_templates]
    assert templates == ["cortex://memory/{id}"]


def test_search_finds_by_meaning_and_honours_filters_and_the_token_budget(mcp):
    found = mcp.call("cortex_search", query="which database did we pick?", limit=5, budget_tokens=4000)
    ids = [row["id"] for row in found["results"]]
    assert "9b3e5695d219" in ids and found["omitted"] == 0
    sqlite = next(row for row in found["results"] if row["id"] == "9b3e5695d219")
    assert "Rejected:" in sqlite["text"] and sqlite["store"] == "project" and sqlite["path"].endswith(".md")
    gotchas = mcp.call("cortex_search", query="database locked", types=["gotcha"])["results"]
    assert gotchas and {row["type"] for row in gotchas if row["via"] is None} == {"gotcha"}
    on_main = mcp.call("cortex_search", query="background jobs", branch="main")["results"]
    assert on_main and {row["branch"] for row in on_main if row["via"] is None} == {"main"}
    # the rate-limit work is all on its branch: nothing on main bears on it
    assert mcp.call("cortex_search", query="rate limits", branch="main")["results"] == []
    small = mcp.call("cortex_search", query="redis", budget_tokens=300, limit=10)
    assert small["tokens"] <= 300 and small["omitted"] > 0 and small["results"]
    assert all("text" in row or "snippet" in row for row in small["results"])
    result = mcp.raw("cortex_search", query="why arq and not celery")
    assert json.loads(result.content[0].text) == result.structured_content  # the model reads the same data


def test_search_decisions_gives_rationale_rejected_alternatives_and_what_replaced_one(mcp):
    active = mcp.call("cortex_search_decisions", query="shared Postgres server or SQLite files")["decisions"]
    sqlite = next(row for row in active if row["id"] == "9b3e5695d219")
    assert sqlite["rejected"] and sqlite["rationale"] and sqlite["status"] == "active"
    assert all(row["status"] == "active" for row in active)
    history = mcp.call("cortex_search_decisions", query="celery rabbitmq broker", include_superseded=True)["decisions"]
    celery = next(row for row in history if row["id"] == "f4a9463fdddd")
    assert celery["status"] == "superseded" and celery["superseded_by"] == ["035597ce1c99"]
    assert "status: superseded" in (mcp.project / ".cortex" / "memories" / "decision").joinpath(
        Path(celery["path"]).name).read_text(encoding="utf-8")  # reading did not restore it


def test_get_memory_follows_source_of_to_the_code(mcp):
    described = mcp.call("cortex_get_memory", id="407cf71b5a22")
    assert described["type"] == "code_description" and described["body"]
    assert [code["id"] for code in described["code"]] == ["281cc644d441"]
    assert described["code"][0]["type"] == "code" and "BEGIN IMMEDIATE" in described["code"][0]["body"]
    code = mcp.call("cortex_get_memory", id="281cc")  # a prefix works, as on the command line
    assert code["id"] == "281cc644d441" and [d["id"] for d in code["described_by"]] == ["407cf71b5a22"]
    assert code["missing_files"] == code["files"]  # the example's code is not in this repository


def test_plan_recent_status_and_briefing(mcp):
    plan = mcp.call("cortex_get_plan")
    assert plan["branch"] == "feature/rate-limits"
    assert [p["id"] for p in plan["plans"]] == ["33e6284da1a9"]
    assert {p["id"] for p in plan["progress"]} == {"8475da98cc5d", "2b6dde62f3fe"}
    assert plan["page"].startswith("# Active plan") and "per-key API rate limits" in plan["page"]
    assert mcp.call("cortex_get_plan", branch="main")["plans"][0]["id"] == "0e5c7a0c7ebf"
    recent = mcp.call("cortex_get_recent", limit=3)["memories"]
    assert len(recent) == 3 and recent[0]["updated"] >= recent[1]["updated"] >= recent[2]["updated"]
    assert all(row["type"] == "gotcha" for row in mcp.call("cortex_get_recent", types=["gotcha"])["memories"])
    status = mcp.call("cortex_get_status")
    cli_status = json.loads(cortex("status", "--json", cwd=mcp.project, env=mcp.env).stdout)
    assert status["by_status"] == cli_status["by_status"] and status["branch"] == "feature/rate-limits"
    assert status["semantic"]["on"] is True
    briefing = mcp.raw("cortex_get_briefing", budget_tokens=300)
    assert "aa6befda6083" in briefing.content[0].text  # the pinned memory, in the text the model reads
    assert briefing.structured_content["tokens"] <= 300


def test_resources(mcp):
    status = json.loads(mcp.read("cortex://status"))
    assert status["store"] == "project" and status["root"] == str(mcp.project / ".cortex")
    decisions = mcp.read("cortex://decisions")
    assert decisions.startswith("# Decisions") and "Replace Celery and RabbitMQ with arq" in decisions
    assert "### Run background jobs on Celery" not in decisions  # superseded: on the archive page
    assert "per-key API rate limits" in mcp.read("cortex://plan")
    text = mcp.read("cortex://memory/9b3e5695d219")
    assert text.startswith("---\nid: 9b3e5695d219\n")
    with pytest.raises(MCPError, match="no memory with id 'abcdef'"):
        mcp.read("cortex://memory/abcdef")


def test_remember_then_search_round_trip_then_forget(mcp):
    saved = mcp.call("cortex_remember", text="Exports are streamed as CSV from a read replica, never from the primary: "
                     "a full export held the write lock for minutes.", type="decision", tags=["exports"], priority=7)
    path = Path(saved["path"])
    assert path.is_file() and path.parent == mcp.project / ".cortex" / "memories" / "decision"
    assert saved["branch"] == "feature/rate-limits" and saved["store"] == "project"
    found = mcp.call("cortex_search", query="where do CSV exports read from?", limit=3)["results"]
    assert found[0]["id"] == saved["id"]
    shown = cortex("show", saved["id"], "--json", cwd=mcp.project, env=mcp.env)  # the CLI sees the same file
    assert json.loads(shown.stdout)["tags"] == ["exports"]
    newer = mcp.call("cortex_remember", text="Exports are built by a nightly job into object storage; "
                     "the dashboard links to the latest file.", type="decision", tags=["exports"])
    gone = mcp.call("cortex_forget", id=saved["id"], replaced_by=newer["id"])
    assert gone == {"id": saved["id"], "title": saved["title"], "status": "superseded", "replaced_by": newer["id"],
                    "store": "project"}
    assert "status: superseded" in path.read_text(encoding="utf-8")
    after = [row["id"] for row in mcp.call("cortex_search", query="where do CSV exports read from?")["results"]]
    assert saved["id"] not in after and newer["id"] in after
    back = mcp.call("cortex_restore", id=saved["id"])  # only an explicit restore brings it back
    assert back == {"id": saved["id"], "title": saved["title"], "status": "active", "store": "project"}
    assert "status: active" in path.read_text(encoding="utf-8")


def _wait_for_search(mcp: Client, query: str, memory_id: str) -> list[dict[str, Any]]:
    """The search's rows once the server's watcher has seen `memory_id`, written by another process."""
    import time

    deadline = time.monotonic() + 10
    while True:
        rows = mcp.call("cortex_search", query=query)["results"]
        if memory_id in [row["id"] for row in rows] or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_the_inbox_tool_lists_accepts_and_rejects_proposals_found_by_search_marked(mcp):
    source = {"kind": "transcript", "layer": "keyword"}
    kept = remember(mcp.project, "Invoice PDFs are rendered by weasyprint in the worker, never in the web process.",
                    status="proposed", source=source, link=False).id
    junk = remember(mcp.project, "Let me look at the invoice renderer once more.", status="proposed", source=source,
                    link=False).id
    rows = _wait_for_search(mcp, "where are invoice PDFs rendered?", kept)
    assert [row["proposed"] for row in rows if row["id"] == kept] == [True]
    listed = [row["id"] for row in mcp.call("cortex_inbox")["proposals"]]
    assert kept in listed and junk in listed
    refused = mcp.raw("cortex_inbox", action="accept", ids=[kept, "abcdef012345"])
    assert refused.is_error and "abcdef012345" in refused.content[0].text
    assert Store.locate(mcp.project).get(kept).status == "proposed"  # nothing half-done
    assert mcp.call("cortex_inbox", action="accept", ids=[kept])["accepted"][0]["id"] == kept
    assert mcp.call("cortex_inbox", action="reject", ids=[junk])["rejected"][0]["id"] == junk
    store = Store.locate(mcp.project)
    assert store.get(kept).status == "active" and junk not in store.ids_on_disk()
    assert [row["proposed"] for row in mcp.call("cortex_search", query="where are invoice PDFs rendered?")["results"]
            if row["id"] == kept] == [False]


def test_a_file_changed_by_another_process_is_found_by_the_next_search(mcp):
    made = remember(mcp.project, "Feature flags live in flags.toml, read once at start-up; a change needs a restart.",
                    type="gotcha").id  # written by this process, not the server's
    import time

    deadline = time.monotonic() + 10  # the watchdog event arrives within a moment
    while True:
        ids = [row["id"] for row in mcp.call("cortex_search", query="feature flags restart")["results"]]
        if made in ids or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert made in ids


def test_bad_calls_are_errors_naming_the_field_and_the_server_stays_up(mcp):
    with pytest.raises(MCPError, match="limit") as bad_limit:
        mcp.raw("cortex_search", query="redis", limit=0)
    assert bad_limit.value.code == -32602 and bad_limit.value.data["fields"] == ["limit"]
    neither = mcp.raw("cortex_search", limit=3)
    assert neither.is_error and "give a query, or a path" in neither.content[0].text
    with pytest.raises(MCPError, match="type") as bad_type:
        mcp.raw("cortex_remember", text="something", type="opinion")
    assert bad_type.value.code == -32602
    with pytest.raises(MCPError, match="unknown tool 'cortex_delete_everything'"):
        mcp.raw("cortex_delete_everything")
    with pytest.raises(MCPError, match="id"):
        mcp.raw("cortex_get_memory", id="not-hex")
    missing = mcp.raw("cortex_get_memory", id="abcdef")
    assert missing.is_error and "no memory with id 'abcdef'" in missing.content[0].text
    before = sorted(p.name for p in (mcp.project / ".cortex" / "memories").rglob("*.md"))
    secret = mcp.raw("cortex_remember", text="The staging database: PASSWORD=Zx9fQ2mLp0aVr7Tq")
    assert secret.is_error and "looks like a secret" in secret.content[0].text
    assert sorted(p.name for p in (mcp.project / ".cortex" / "memories").rglob("*.md")) == before
    assert mcp.call("cortex_search", query="which database did we pick?")["results"]  # still up


def test_the_server_init_claude_declares_finds_the_store_from_claude_project_dir(repo, isolated_env):
    cortex("init", "--claude", cwd=repo)
    remember(repo, "Invoices are numbered per shop, without gaps", type="decision")
    server = json.loads((repo / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]["cortex"]
    env = server_env(isolated_env) | {"CLAUDE_PROJECT_DIR": str(repo)}
    elsewhere = isolated_env / "elsewhere"  # Claude Code may start it anywhere; it passes CLAUDE_PROJECT_DIR
    elsewhere.mkdir()
    env["PATH"] = f"{Path(cortex_command()[0]).parent}:{env['PATH']}"
    with start_blocking_portal() as portal:
        with connect(portal, server["command"], server["args"], elsewhere, env) as session:
            result = portal.call(session.call_tool, "cortex_search", {"query": "how are invoices numbered?"})
            assert "Invoices are numbered per shop" in result.content[0].text


def test_a_server_started_before_cortex_init_says_so_and_works_once_the_store_exists(repo, isolated_env):
    command = cortex_command()
    with start_blocking_portal() as portal:
        with connect(portal, command[0], [*command[1:], "mcp"], repo, server_env(isolated_env)) as session:
            before = portal.call(session.call_tool, "cortex_get_status", {})
            assert before.is_error and "run `cortex init` first" in before.content[0].text
            Store.init(repo / ".cortex")  # as `cortex init` makes it
            remember(repo, "Deploys go out on Tuesdays only")
            after = portal.call(session.call_tool, "cortex_search", {"query": "when do we deploy?"})
            assert not after.is_error and "Deploys go out on Tuesdays only" in after.content[0].text


def _search_until(mcp: Client, query: str, wanted: str | None, seconds: float = 10.0) -> list[str]:
    import time

    deadline = time.monotonic() + seconds
    while True:
        ids = [row["id"] for row in mcp.call("cortex_search", query=query)["results"]]
        if (wanted in ids if wanted else not ids) or time.monotonic() > deadline:
            return ids
        time.sleep(0.1)


def test_a_memories_folder_replaced_under_the_server_is_watched_again(mcp):
    # `git checkout` of a branch without .cortex/ and back deletes the folder and makes a new one
    memories = mcp.project / ".cortex" / "memories"
    kept = mcp.project / "memories-elsewhere"
    shutil.copytree(memories, kept)
    shutil.rmtree(memories)
    assert _search_until(mcp, "webhooks idempotent raw event", None) == []
    kept.rename(memories)  # a new folder (another inode) with the memories back
    assert "711a50b8e669" in _search_until(mcp, "webhooks idempotent raw event", "711a50b8e669")
    made = remember(mcp.project, "Webhook secrets rotate every 90 days; the old one stays valid for a day.",
                    type="gotcha").id
    assert made in _search_until(mcp, "webhook secrets rotate", made)  # the new folder is watched
    # deleted and made again at once, as git does: the file system may hand back the same inode
    shutil.copytree(memories, kept)
    shutil.rmtree(memories)
    memories.mkdir()
    assert _search_until(mcp, "webhooks idempotent raw event", None) == []
    for folder in kept.iterdir():
        shutil.copytree(folder, memories / folder.name)
    shutil.rmtree(kept)
    later = remember(mcp.project, "Refund webhooks arrive before the refund API call returns; handle both orders.",
                     type="gotcha").id
    assert later in _search_until(mcp, "refund webhooks arrive before", later)



def test_search_keeps_to_a_time_window(mcp):
    """since/until: only memories created within the window (a bare day counts whole); a bad date is refused."""
    day = mcp.call("cortex_search", query="background work queues", since="2026-08-28", until="2026-08-28")
    ids = {row["id"] for row in day["results"]}
    made_that_day = {Store(mcp.project / ".cortex").get(ident).created[:10] for ident in ids}
    assert "02b91ef339ec" in ids and made_that_day == {"2026-08-28"}
    assert mcp.call("cortex_search", query="background work queues", since="2030-01-01")["results"] == []
    with pytest.raises(MCPError, match="since"):
        mcp.raw("cortex_search", query="background work queues", since="yesterday")


def test_forget_with_a_reason_warns_when_the_same_is_saved_again_and_a_because_link_comes_with_the_hit(mcp):
    text = "Invoices are numbered per tenant by a database sequence, never by the application."
    saved = mcp.call("cortex_remember", text=text, type="decision")
    mcp.call("cortex_forget", id=saved["id"], reason="numbering moved to the billing provider")
    trace = json.loads((mcp.project / ".cortex" / "forgotten" / f"{saved['id']}.json").read_text(encoding="utf-8"))
    assert trace["reason"] == "numbering moved to the billing provider" and trace["how"] == "archived"
    again = mcp.call("cortex_remember", text=text, type="decision")
    [warning] = again["warnings"]
    assert warning["reason"] == "forgotten" and warning["id"] == saved["id"]
    assert warning["why"] == "numbering moved to the billing provider" and warning["how"] == "archived"
    dated = mcp.call("cortex_remember", text="Tenants are billed on the first of the month.", created="2025-02-03")
    assert "warnings" not in dated
    assert Store(mcp.project / ".cortex").get(dated["id"]).created == "2025-02-03T00:00:00Z"  # brought in, dated
    with pytest.raises(MCPError, match="reason"):
        mcp.raw("cortex_forget", id=again["id"], reason="x" * 501)

    reason = mcp.call("cortex_remember", type="pattern",
                      text="Two application servers once handed out the same invoice number within one second.")
    linked = mcp.call("cortex_link", id=again["id"], other=reason["id"], rel="because")
    assert linked == {"id": again["id"], "rel": "because", "to": reason["id"], "added": True, "store": "project"}
    rows = mcp.call("cortex_search", query="how are invoices numbered per tenant?")["results"]
    hit = next(row for row in rows if row["id"] == again["id"])
    assert hit["because"] == [{"id": reason["id"], "title": reason["title"]}]
    missing = mcp.raw("cortex_link", id=again["id"], other="abcdef012345", rel="because")
    assert missing.is_error and "abcdef012345" in missing.content[0].text
    removed = mcp.call("cortex_link", id=again["id"], other=reason["id"], remove=True)
    assert {"in": again["id"], "rel": "because", "to": reason["id"]} in removed["removed"]  # every link between
    rows = mcp.call("cortex_search", query="how are invoices numbered per tenant?")["results"]
    assert "because" not in next(row for row in rows if row["id"] == again["id"])
