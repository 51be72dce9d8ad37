"""Salience learned from use, ratings, hot and cold tiers, bounded queries and sub-agent briefings.

Real hooks run as `cortex hook …` subprocesses with Claude Code's JSON on stdin, on real git repositories and
real transcripts written the way Claude Code writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cortex import salience
from cortex.store import Store
from tests.helpers import cortex, cortex_command, cortex_json, hook, remember

CACHE = "The cache tests need CORTEX_HOME pointed at a temp folder, or they read the real home folder"
SQLITE = "We keep the rate cache in SQLite, not Postgres: no database server to run in development"
# A prompt that both bear on, by the prompt hook's one relevance rule (`events.prompt_context`).
BOTH = "why do the cache tests fail, and where is the rate cache kept?"


def _record(kind: str, uuid: str, content: Any, session: str = "s1", **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message["id"] = f"msg_{uuid}"
    return {"type": kind, "uuid": uuid, "sessionId": session, "message": message, **extra}


def _turn(path: Path, prompt: str, reply: str, command: str | None = None, n: int = 0) -> None:
    """Append one turn (a prompt, an optional Bash call and its result, a reply) to a JSONL transcript."""
    records = [_record("user", f"u{n}", prompt)]
    if command:
        records += [_record("assistant", f"a{n}", [{"type": "tool_use", "id": f"t{n}", "name": "Bash",
                                                     "input": {"command": command}}]),
                    _record("user", f"r{n}", [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok"}])]
    records.append(_record("assistant", f"b{n}", [{"type": "text", "text": reply}]))
    with open(path, "a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def _prompt(project: Path, text: str, session: str = "s1") -> str:
    out = hook("prompt", project, {"session_id": session, "cwd": str(project), "hook_event_name": "UserPromptSubmit",
                                   "prompt": text})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"] if out.stdout.strip() else ""


def _stop(project: Path, transcript: Path, session: str = "s1") -> None:
    out = hook("stop", project, {"session_id": session, "cwd": str(project), "hook_event_name": "Stop",
                                 "transcript_path": str(transcript), "stop_hook_active": False})
    assert out.returncode == 0 and out.stdout == "", out.stderr


@pytest.fixture
def two(project: Path) -> tuple[Path, str, str]:
    cache = remember(project, CACHE, type="gotcha").id
    sqlite = remember(project, SQLITE, type="decision").id
    return project, cache, sqlite


# ---------------------------------------------------------------- the usage judgement


def test_the_stop_hook_counts_a_shown_memory_used_when_the_next_turn_acts_on_it(two, tmp_path):
    project, cache, sqlite = two
    shown = _prompt(project, BOTH)
    assert cache in shown and sqlite in shown  # both came up for "cache"
    lines = (project / ".cortex" / "state" / "injections" / "s1.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["ids"] == [i for i in (cache, sqlite) if i in shown] or set(json.loads(lines[-1])["ids"]) == {cache, sqlite}
    transcript = tmp_path / "s1.jsonl"
    _turn(transcript, BOTH, "They pass with a private home now.",
          command="CORTEX_HOME=$(mktemp -d) pytest tests/test_cache.py")
    _stop(project, transcript)
    store = Store.locate(project)
    usage = salience.usages(store)
    assert usage[cache].used == 1 and usage[cache].ignored == 0
    assert "cortex_home" in usage[cache].evidence[0]
    assert usage[sqlite].used == 0 and usage[sqlite].ignored == 1
    # `cortex show` explains it: the prior's terms, the counts, the evidence.
    shown_cache = cortex("show", cache, cwd=project).stdout
    assert "salience" in shown_cache and "used 1" in shown_cache and "cortex_home" in shown_cache
    ranking = cortex_json("show", sqlite, cwd=project)["ranking"]
    assert ranking["usage"]["ignored"] == 1 and ranking["parts"]["salience"] < 0 < ranking["parts"]["confidence"]


def test_the_fast_path_through_cortex_serve_records_what_it_injected(two):
    import subprocess

    from cortex import serve
    from tests.helpers import wait_for

    project, cache, _sqlite = two
    root = str(project / ".cortex")
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "30"], cwd=project, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: serve.ask(root, {"op": "ping"}) is not None)
        assert cache in _prompt(project, "why do the cache tests fail on my machine?", session="fast")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    line = json.loads((project / ".cortex" / "state" / "injections" / "fast.jsonl").read_text().splitlines()[-1])
    assert line["event"] == "UserPromptSubmit" and cache in line["ids"]


def test_words_the_prompt_already_held_are_no_evidence_of_use(two, tmp_path):
    project, cache, _sqlite = two
    _prompt(project, "is CORTEX_HOME needed for the cache tests?")
    transcript = tmp_path / "s1.jsonl"
    _turn(transcript, "is CORTEX_HOME needed for the cache tests?", "I cannot tell: CORTEX_HOME is not mentioned anywhere.")
    _stop(project, transcript)
    usage = salience.usages(Store.locate(project))[cache]
    assert usage.used == 0 and usage.ignored == 1


def test_a_briefing_memory_may_show_its_use_over_the_first_turns(two, tmp_path):
    project, cache, sqlite = two
    out = hook("session-start", project, {"session_id": "s1", "cwd": str(project), "hook_event_name": "SessionStart",
                                          "source": "startup"})
    assert cache in out.stdout and sqlite in out.stdout
    transcript = tmp_path / "s1.jsonl"
    _turn(transcript, "add a health endpoint", "Added /health.", n=1)
    _stop(project, transcript)
    store = Store.locate(project)
    assert salience.usages(store)[sqlite].ignored == 0  # still within its window
    _turn(transcript, "now store the rate limits", "Stored them next to the rate cache; no database server needed.",
          command="sqlite3 rates.db '.tables'", n=2)
    _stop(project, transcript)
    _turn(transcript, "thanks", "You're welcome.", n=3)
    _stop(project, transcript)
    usage = salience.usages(store)
    assert usage[sqlite].used == 1 and usage[cache].ignored == 1 and usage[cache].used == 0


def test_use_raises_a_memory_in_the_ranking_and_disuse_lowers_it(project):
    from cortex.index import Index
    from cortex.memory import now_epoch
    from cortex.recall import Prior

    a = remember(project, "Deploys go through the blue-green switch in deploy/switch.sh", type="pattern", link=False)
    b = remember(project, "Deploys are announced in the release channel before the switch", type="pattern", link=False)
    store = Store.locate(project)
    index = Index(store).ensure()
    before = Prior(store, index, now_epoch(), "main")
    assert before(a) == pytest.approx(before(b))  # no history: salience changes nothing
    state = {"memories": {a.id: salience.Usage(shown=4, used=4).to_dict(),
                          b.id: salience.Usage(shown=4, ignored=4).to_dict()}}
    salience._save(store, state)
    after = Prior(store, index, now_epoch(), "main")
    assert after(a) > before(a) > after(b)
    ids = [h["id"] for h in cortex_json("recall", "deploys switch", cwd=project)]
    assert ids.index(a.id) < ids.index(b.id)


def test_a_memory_shown_often_and_never_used_is_muted_at_prompt_time_but_recall_finds_it(two, tmp_path):
    project, cache, sqlite = two
    transcript = tmp_path / "s1.jsonl"
    for n in range(3):
        assert sqlite in _prompt(project, BOTH)
        _turn(transcript, BOTH, "Fixed with a private home.",
              command="CORTEX_HOME=$(mktemp -d) pytest", n=n)
        _stop(project, transcript)
    shown = _prompt(project, BOTH)
    assert cache in shown and sqlite not in shown
    assert sqlite in [h["id"] for h in cortex_json("recall", "rate cache", cwd=project)]
    report = cortex_json("status", cwd=project)["tiers"]
    assert sqlite in report["muted"] and report["used"] == 3


# ---------------------------------------------------------------- ratings, tiers


def test_feedback_rates_a_memory_and_moves_it_between_tiers(two):
    project, cache, sqlite = two
    up = cortex_json("feedback", cache, "up", "--note", "saved an hour", cwd=project)
    assert up["salience"] > 0.5 and up["tier"] == "hot" and up["up"] == 1
    briefing = cortex("briefing", cwd=project).stdout
    assert "## Most used" in briefing and briefing.index(cache) < briefing.index(sqlite)
    status = cortex("status", cwd=project).stdout
    assert f"promoted {cache} to hot" in status
    cortex("feedback", cache, "down", cwd=project)
    cortex("feedback", cache, "down", cwd=project)
    status = cortex("status", cwd=project).stdout
    assert f"demoted {cache} to cold" in status
    assert "## Most used" not in cortex("briefing", cwd=project).stdout
    (project / ".cortex" / "state" / "briefing.json").unlink(missing_ok=True)  # what the briefing showed is left out
    shown_now = _prompt(project, BOTH)
    assert cache not in shown_now and sqlite in shown_now  # rated down more than up: muted at prompt time at prompt time
    shown = cortex("show", cache, cwd=project).stdout
    assert "rated +1/-2" in shown and "saved an hour" in shown and "tier: cold" in shown
    # The tracked file never changes: ratings live in state/.
    assert "salience" not in Store.locate(project).get(cache).path.read_text()


def test_feedback_refuses_a_bad_rating_or_an_unknown_id_in_one_line(two):
    project, cache, _sqlite = two
    bad = cortex("feedback", cache, "sideways", cwd=project, check=False)
    assert bad.returncode != 0 and "sideways" in bad.stderr
    missing = cortex("feedback", "abcdefabcdef", "up", cwd=project, check=False)
    assert missing.returncode != 0 and "abcdefabcdef" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    assert not (project / ".cortex" / "state" / "salience.json").exists()


def test_the_hot_set_keeps_to_its_token_budget(project):
    store = Store.locate(project)
    ids = [remember(project, f"Service {name} restarts with `make restart-{name}` after a config change", link=False).id
           for name in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")]
    store.config_path.write_text("salience:\n  hot_tokens: 60\n", encoding="utf-8")
    for memory_id in ids:
        salience.feedback(store, memory_id, "up")
    hot = salience.hot_ids(store)
    assert 0 < len(hot) < len(ids)
    assert sum(len(f"- [context] {store.get(i).title} `{i}`\n") for i in hot) / 4 <= 60 + len(hot)


# ---------------------------------------------------------------- bounded queries and budgets


def test_an_empty_or_stop_word_query_is_refused_in_the_cli_and_the_prompt_hook(two):
    project, _cache, _sqlite = two
    for query in ("", "   ", "the of a ?"):
        out = cortex("recall", query, cwd=project, check=False)
        assert out.returncode != 0 and "query" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert _prompt(project, "the?") == ""


def test_a_query_matching_most_of_the_store_is_narrowed_and_says_so(project):
    for n in range(24):
        remember(project, f"Cache note {n}: entry {n} of the cache keeps item{n} for {n} minutes", link=False)
    out = cortex("recall", "cache", "--json", cwd=project)
    assert len(json.loads(out.stdout)) <= 3
    assert "matches" in out.stderr and "more specific" in out.stderr
    specific = cortex("recall", "item7", "--json", cwd=project)
    assert "more specific" not in specific.stderr


def test_cli_recall_keeps_to_its_token_budget(two):
    project, _cache, _sqlite = two
    out = cortex("recall", "cache", "--budget", "50", "--json", cwd=project)
    assert len(json.loads(out.stdout)) == 1 and "left out" in out.stderr and "--budget" in out.stderr


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.test_mcp import example_client

    with example_client(tmp_path_factory.mktemp("mcp-salience")) as client:
        yield client


def test_mcp_refuses_an_empty_query_and_budgets_decisions(mcp):
    refused = mcp.raw("cortex_search", query="  ")
    assert refused.is_error and "query is empty" in refused.content[0].text
    small = mcp.call("cortex_search_decisions", query="database cache", budget_tokens=50)
    full = mcp.call("cortex_search_decisions", query="database cache")
    assert len(small["decisions"]) == 1 and small["omitted"] == len(full["decisions"]) - 1 > 0


def test_mcp_feedback_rates_a_memory(mcp):
    rated = mcp.call("cortex_feedback", id="9b3e5695d219", rating="down", note="not this project")
    assert rated["down"] == 1 and rated["salience"] < 0.5 and rated["tier"] == "cold"
    from mcp.shared.exceptions import MCPError

    with pytest.raises(MCPError, match="rating"):
        mcp.raw("cortex_feedback", id="9b3e5695d219", rating="meh")
    store = Store(mcp.project / ".cortex", "project")
    assert salience.usages(store)["9b3e5695d219"].down == 1


# ---------------------------------------------------------------- sub-agents


def _subagent_start(project: Path, description: str, prompt: str, agent: str = "ag1",
                    kind: str = "general-purpose") -> str:
    pre = hook("pre-tool-use", project, {"session_id": "s1", "cwd": str(project), "hook_event_name": "PreToolUse",
                                         "tool_name": "Agent", "tool_use_id": f"toolu_{agent}",
                                         "tool_input": {"description": description, "prompt": prompt,
                                                        "subagent_type": kind}})
    assert pre.returncode == 0 and pre.stdout == ""
    out = hook("subagent-start", project, {"session_id": "s1", "cwd": str(project), "hook_event_name": "SubagentStart",
                                           "agent_id": agent, "agent_type": "" if kind == "general-purpose" else kind})
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)["hookSpecificOutput"]
    assert payload["hookEventName"] == "SubagentStart"
    return str(payload["additionalContext"])


def test_a_sub_agent_gets_a_briefing_scoped_to_its_task_and_files(project):
    (project / "billing").mkdir()
    (project / "billing" / "invoice.py").write_text("def total(): ...\n", encoding="utf-8")
    invoice = remember(project, "Invoice totals are rounded per line, never on the sum", type="gotcha",
                       files=["billing/invoice.py"], link=False)
    unrelated = remember(project, "The marketing site deploys from the www branch on Fridays", type="context",
                         link=False)
    pinned = remember(project, "Every API response carries an X-Request-Id header", type="pattern", pinned=True,
                      link=False)
    text = _subagent_start(project, "Fix invoice rounding",
                           f"Open {project}/billing/invoice.py and fix the rounding of totals.")
    assert invoice.id in text and pinned.id in text and unrelated.id not in text
    assert "billing/invoice.py" in text and "Fix invoice rounding" in text
    # The session's own briefing carries the unrelated memory; the sub-agent's does not.
    assert unrelated.id in cortex("briefing", cwd=project).stdout
    # What it was shown is judged on its own transcript at SubagentStop.
    agent_file = project.parent / "agent-ag1.jsonl"
    records = [_record("user", "x0", "Fix invoice rounding", isSidechain=True),
               _record("assistant", "x1", [{"type": "tool_use", "id": "tx", "name": "Edit",
                                            "input": {"file_path": f"{project}/billing/invoice.py",
                                                      "old_string": "sum", "new_string": "per line"}}],
                       isSidechain=True),
               _record("assistant", "x2", [{"type": "text", "text": "Done.\n\n[MEMORY: gotcha: Invoice line amounts "
                                            "must be Decimal, floats drift by a cent on long invoices]"}],
                       isSidechain=True)]
    agent_file.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    stop = hook("subagent-stop", project, {"session_id": "s1", "cwd": str(project), "hook_event_name": "SubagentStop",
                                           "agent_id": "ag1", "agent_type": "", "agent_transcript_path": str(agent_file),
                                           "last_assistant_message": "Rounded per line."})
    assert stop.returncode == 0 and stop.stdout == ""
    store = Store.locate(project)
    usage = salience.usages(store)
    assert usage[invoice.id].used == 1 and usage[pinned.id].ignored == 1
    # What it said in a [MEMORY:] tag is kept, with the sub-agent as the source.
    [learned] = [m for m in store.scan().memories if "Decimal" in m.title]
    assert learned.type == "gotcha" and learned.source["agent"] == "ag1"
    assert learned.source["agent_type"] == "general-purpose" and learned.source["session"] == "s1"


def test_parallel_sub_agents_each_get_their_own_task(project):
    a = remember(project, "The search index is rebuilt nightly by the indexer cron job", link=False)
    b = remember(project, "Email templates live in mail/templates and use MJML", link=False)
    hook("pre-tool-use", project, {"session_id": "s1", "cwd": str(project), "tool_name": "Agent", "tool_use_id": "t1",
                                   "tool_input": {"description": "Check the search index rebuild",
                                                  "prompt": "Find when the search index is rebuilt", "subagent_type": "Explore"}})
    hook("pre-tool-use", project, {"session_id": "s1", "cwd": str(project), "tool_name": "Agent", "tool_use_id": "t2",
                                   "tool_input": {"description": "Review the email templates",
                                                  "prompt": "Where do the email templates live?", "subagent_type": "Explore"}})
    first = hook("subagent-start", project, {"session_id": "s1", "cwd": str(project), "agent_id": "x1", "agent_type": "Explore"})
    second = hook("subagent-start", project, {"session_id": "s1", "cwd": str(project), "agent_id": "x2", "agent_type": "Explore"})
    assert "search index" in first.stdout and a.id in first.stdout and b.id not in first.stdout
    assert "email templates" in second.stdout and b.id in second.stdout and a.id not in second.stdout


def test_a_sub_agents_report_is_captured_with_the_sub_agent_as_its_source(project, tmp_path):
    report = ("The retry queue drops jobs after five attempts because the broker's max_retries default is 5; "
              "raising it in worker/config.py to 10 keeps slow webhook deliveries alive through an outage window.")
    records = [_record("user", "u0", "why do webhook jobs vanish?"),
               _record("assistant", "a0", [{"type": "tool_use", "id": "toolu_9", "name": "Agent",
                                            "input": {"description": "Investigate retries", "prompt": "Find why jobs vanish",
                                                      "subagent_type": "Explore"}}]),
               _record("user", "r0", [{"type": "tool_result", "tool_use_id": "toolu_9",
                                       "content": [{"type": "text", "text": report}, {"type": "text", "text": "agentId: a1b2c3d4e5"}]}]),
               _record("assistant", "b0", [{"type": "text", "text": "The broker retries five times."}])]
    transcript = tmp_path / "s9.jsonl"
    transcript.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    _stop(project, transcript, session="s9")
    store = Store.locate(project)
    memories = store.scan().memories
    reports = [m for m in memories if "subagent" in m.tags]
    assert reports, [m.title for m in memories]
    assert reports[0].source["agent"] == "a1b2c3d4e5" and reports[0].source["agent_type"] == "Explore"


def test_installed_settings_send_sub_agent_events_and_only_agent_tool_uses(repo):
    cortex("init", "--claude", cwd=repo)
    hooks = json.loads((repo / ".claude" / "settings.json").read_text())["hooks"]
    assert {"PreToolUse", "SubagentStart", "SubagentStop"} <= set(hooks)
    # The sub-agent tools, and the edit tools (the memories bound to a file: issue 42); no other tool use.
    assert set(hooks["PreToolUse"][0]["matcher"].split("|")) == {"Task", "Agent", "Edit", "Write", "MultiEdit",
                                                                  "NotebookEdit"}
    again = cortex("init", "--claude", cwd=repo)
    assert again.returncode == 0
    assert len(json.loads((repo / ".claude" / "settings.json").read_text())["hooks"]["PreToolUse"]) == 1


@pytest.mark.parametrize("junk", ['garbage{', '[]', '{"memories": [1], "sessions": "x", "tiers": {"hot": 5}}',
                                  '{"memories": {"abc": {"used": "x"}}, "tiers": {"hot": [5], "changes": 3},'
                                  ' "sessions": {"s1": {"offset": "x"}, "s2": {"open": [1, {"ids": 3}]}}}'])
def test_damaged_salience_state_is_dropped_never_fatal(two, tmp_path, junk):
    project, cache, _sqlite = two
    state = project / ".cortex" / "state"
    state.mkdir(exist_ok=True)
    (state / "salience.json").write_text(junk, encoding="utf-8")
    (state / "injections").mkdir(exist_ok=True)
    (state / "injections" / "s1.jsonl").write_text("not json\n{\"ids\": 7}\n", encoding="utf-8")
    assert cache in _prompt(project, "why do the cache tests fail on my machine?")
    transcript = tmp_path / "s1.jsonl"
    _turn(transcript, "why do the cache tests fail on my machine?", "ok", command="CORTEX_HOME=/tmp/x pytest")
    _stop(project, transcript)
    assert "salience" in cortex("show", cache, cwd=project).stdout
    assert "tiers:" in cortex("status", cwd=project).stdout
    assert cortex_json("feedback", cache, "up", cwd=project)["up"] == 1
    assert salience.usages(Store.locate(project))[cache].used == 1
