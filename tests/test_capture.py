"""Capture: the real `cortex hook stop` on real transcripts, and the local layers on small transcripts written here
(the LLM layer, run detached from a queue, is tests/test_worker.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cortex.store import Store
from tests.helpers import cortex, cortex_json, remember

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts"
FIXTURES = Path(__file__).resolve().parent / "data" / "transcripts"
TRANSCRIPTS = sorted(FIXTURES.glob("*.jsonl")) + sorted(
    [*SHARED.rglob("*.jsonl"), *SHARED.rglob("chat.json")] if SHARED.is_dir() else [], key=str
)


def _stop(project: Path, transcript: Path, **extra: object) -> object:
    payload = {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project),
               "hook_event_name": "Stop", "stop_hook_active": False} | extra
    return cortex("hook", "stop", cwd=project, input=json.dumps(payload))


def _memories(project: Path) -> list[Path]:
    return sorted((project / ".cortex" / "memories").rglob("*.md"))


def _list(project: Path, *types: str) -> list[dict]:
    """The memories the hook wrote (active or proposed), as `cortex list --json` rows (read in process)."""
    return [item.to_dict() for item in Store.locate(project).list(types=types, statuses=("active", "proposed"))]


def _show(project: Path, memory_id: str) -> dict:
    return Store.locate(project).get(memory_id).to_dict()


@pytest.mark.parametrize("source", TRANSCRIPTS, ids=lambda p: p.name if p.is_relative_to(FIXTURES) else p.relative_to(SHARED).as_posix())
def test_stop_hook_on_every_shared_transcript_is_quiet_and_idempotent(project, tmp_path, source):
    transcript = tmp_path / source.name
    shutil.copy(source, transcript)
    first = _stop(project, transcript)
    assert first.returncode == 0 and first.stdout == ""
    written = _memories(project)
    again = _stop(project, transcript)
    assert again.returncode == 0 and again.stdout == "" and _memories(project) == written
    fresh = cortex_json("capture", str(transcript), "--from-start", cwd=project)
    assert fresh["written"] == [] and _memories(project) == written  # re-reading everything writes nothing new
    assert "stop:" in (project / ".cortex" / "state" / "cortex.log").read_text(encoding="utf-8")


def _line(record_type: str, uuid: str, content: object, **extra: object) -> str:
    message = {"role": record_type, "content": content}
    if record_type == "assistant":
        message["id"] = extra.pop("message_id", f"msg-{uuid}")
    return json.dumps({"type": record_type, "uuid": uuid, "sessionId": "s-1", "gitBranch": "main",
                       "message": message, **extra})


def _write(path: Path, lines: list[str], mode: str = "w") -> None:
    with open(path, mode, encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def test_self_report_tags_become_memories_and_the_cursor_reads_only_new_turns(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [
        _line("user", "u1", "Which cache should we use?"),
        _line("assistant", "a1", [{"type": "text", "text": "SQLite it is. [MEMORY: decision: Use SQLite for the local "
                                                            "cache because it needs no server]"}], message_id="m1"),
        _line("assistant", "a2", [{"type": "text", "text": "[MEMORY: gotcha priority=8 tags=ci,sqlite: WAL files must "
                                                            "be ignored in the CI cache]"}], message_id="m1"),
    ])
    _stop(project, transcript)
    records = {r["title"]: r for r in _list(project)}
    assert records["Use SQLite for the local cache because it needs no server"]["type"] == "decision"
    gotcha = records["WAL files must be ignored in the CI cache"]
    assert gotcha["priority"] == 8 and gotcha["tags"] == ["ci", "sqlite"] and gotcha["branch"] == "main"
    shown = _show(project, gotcha["id"])
    assert shown["source"] == {"kind": "transcript", "session": "s-1", "layer": "self-report",
                               "commit": shown["source"]["commit"]}
    _write(transcript, [_line("assistant", "a3", [{"type": "text", "text": "[MEMORY: context: The staging database "
                                                                           "is rebuilt every night]"}])], mode="a")
    _stop(project, transcript)
    assert len(_list(project)) == 3


def test_a_tagged_message_is_not_mined_by_the_keyword_layer_too(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [
        _line("user", "u1", "Which store for the rate cache?"),
        _line("assistant", "a1", [{"type": "text", "text": "We'll use SQLite instead of Postgres for the rate cache, "
                                                            "since it needs no server.\n\n[MEMORY: decision: The rate "
                                                            "cache lives in SQLite, not Postgres: no server to run]"}]),
        _line("assistant", "a2", [{"type": "text", "text": "We decided to keep the retry budget at three attempts "
                                                            "for every webhook call."}]),
    ])
    _stop(project, transcript)
    titles = sorted(r["title"] for r in _list(project))
    assert "The rate cache lives in SQLite, not Postgres: no server to run" in titles
    assert not any(t.startswith("We'll use SQLite") for t in titles)  # said once, by the tag
    assert any(t.startswith("We decided to keep the retry budget") for t in titles)  # untagged: still mined


def test_the_last_assistant_message_is_used_when_the_transcript_lags(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [_line("user", "u1", "go")])
    _stop(project, transcript, last_assistant_message="Done. [MEMORY: pattern: Every handler validates input with pydantic]")
    assert [r["type"] for r in _list(project)] == ["pattern"]
    _write(transcript, [_line("assistant", "a1", [{"type": "text", "text": "Done. [MEMORY: pattern: Every handler "
                                                                           "validates input with pydantic]"}])], mode="a")
    _stop(project, transcript)
    assert len(_list(project)) == 1  # the same memory, not twice
    log = (project / ".cortex" / "state" / "cortex.log").read_text(encoding="utf-8").splitlines()
    stops = [line for line in log if " stop: " in line]  # a detached upkeep may log after the hook
    assert "wrote 0, updated 0, duplicates 0" in stops[-1]  # the reply that caught up is known: not even a duplicate


def test_claude_codes_api_error_lines_are_not_the_models_words(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [
        _line("user", "u1", "add the limits"),
        _line("assistant", "a1", [{"type": "text", "text": "API Error: 500 fake failure. We decided to retry later."}],
              isApiErrorMessage=True, error="server_error"),
        _line("assistant", "a2", [{"type": "text", "text": "API Error: Connection refused (ECONNREFUSED)"}]),
    ])
    lines = transcript.read_text(encoding="utf-8").splitlines()
    synthetic = json.loads(lines[2])
    synthetic["message"]["model"] = "<synthetic>"  # as Claude Code 2.1.330 writes it
    _write(transcript, [*lines[:2], json.dumps(synthetic)])
    _stop(project, transcript)
    assert _memories(project) == []


def test_todo_plan_is_one_memory_updated_as_the_plan_moves(project, tmp_path):
    transcript = tmp_path / "t.jsonl"

    def todo(uuid: str, statuses: list[str]) -> str:
        items = [{"content": f"Step {n}", "status": s, "activeForm": f"Doing step {n}"} for n, s in enumerate(statuses, 1)]
        return _line("assistant", uuid, [{"type": "tool_use", "id": f"t-{uuid}", "name": "TodoWrite", "input": {"todos": items}}])

    _write(transcript, [todo("a1", ["in_progress", "pending"])])
    _stop(project, transcript)
    [plan] = _list(project, "plan")
    assert plan["title"] == "Plan: Step 1"
    _write(transcript, [todo("a2", ["completed", "in_progress"])], mode="a")
    _stop(project, transcript)
    [updated] = _list(project, "plan")
    assert updated["id"] == plan["id"] and updated["title"] == "Plan: Step 2"
    assert "- [x] Step 1" in _show(project, plan["id"])["body"]


def _bash(uuid: str, command: str, output: str, failed: bool) -> list[str]:
    result = {"type": "tool_result", "tool_use_id": f"t-{uuid}", "content": output}
    if failed:
        result["is_error"] = True
    return [_line("assistant", f"a-{uuid}", [{"type": "tool_use", "id": f"t-{uuid}", "name": "Bash", "input": {"command": command}}]),
            _line("user", f"u-{uuid}", [result])]


def test_a_failure_then_a_fix_is_a_gotcha_but_a_red_test_run_is_not(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [
        *_bash("1", "cd app && alembic upgrade head", "Exit code 1\nFAILED: Can't locate revision identified by 'ae1027a6acf'", True),
        *_bash("2", "alembic -c app/alembic.ini upgrade head", "Running upgrade -> ae1027a6acf", False),
        *_bash("3", "pytest -q", "Exit code 1\n1 failed, 11 passed", True),
        *_bash("4", "pytest -q", "12 passed", False),
    ])
    _stop(project, transcript)
    [gotcha] = _list(project, "gotcha")
    assert gotcha["title"].startswith('alembic upgrade head fails with "FAILED: Can\'t locate revision')
    assert "alembic -c app/alembic.ini upgrade head" in _show(project, gotcha["id"])["body"]


def test_keyword_layer_gotchas_corrections_and_a_progress_note(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [
        _line("user", "u0", "Make the importer handle BOMs"),
        _line("assistant", "a0", [{"type": "tool_use", "id": "e1", "name": "Edit",
                                   "input": {"file_path": str(project / "app.py"), "old_string": "a", "new_string": "b"}}]),
        _line("user", "u1", [{"type": "tool_result", "tool_use_id": "e1", "content": "updated"}]),
        _line("user", "u2", "no, keep the CSV reader and only strip the BOM in the loader"),
        _line("assistant", "a1", [{"type": "text", "text": "Let me look again. The problem was that Excel writes a UTF-8 BOM "
                                                            "that csv.DictReader keeps in the first column name. "
                                                            "The loader now strips the BOM before parsing, and the importer is unchanged."}]),
    ])
    _stop(project, transcript)
    rows = {r["type"]: r for r in _list(project)}
    assert rows["gotcha"]["title"].startswith("Excel writes a UTF-8 BOM")  # the fact, not "The problem was that …"
    assert rows["pattern"]["title"].startswith("Correction: no, keep the CSV reader") and rows["pattern"]["tags"] == ["correction"]
    # the correction's request, answered in one short message: the gotcha holds it, no second memory says it again
    assert "context" not in rows and "The loader now strips the BOM" in _show(project, rows["gotcha"]["id"])["body"]


SECRETS = [
    "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
    "token ghp_1234567890abcdefghijklmnopqrstuvwxyzAB",
    "-----BEGIN RSA PRIVATE KEY-----",
    "PASSWORD=correct-horse-battery-staple",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
]


def test_planted_secrets_never_reach_any_file_under_cortex(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    lines = []
    for n, secret in enumerate(SECRETS):
        text = f"[MEMORY: gotcha: Deploy credentials live in the vault, item {n}\n{secret}\n]"
        lines.append(_line("assistant", f"a{n}", [{"type": "text", "text": text}]))
        lines.append(_line("assistant", f"b{n}", [{"type": "text", "text": f"[MEMORY: context: {secret}]"}]))
        lines.append(_line("assistant", f"c{n}", [{"type": "text", "text": f"<private>[MEMORY: context: private {n}]</private>"}]))
    lines.append(_line("assistant", "z", [{"type": "tool_use", "id": "b1", "name": "Bash",
                                           "input": {"command": f"deploy --key {SECRETS[0]}"}}]))
    _write(transcript, lines)
    _stop(project, transcript)
    everything = "".join(p.read_text(encoding="utf-8", errors="replace") for p in (project / ".cortex").rglob("*")
                         if p.is_file())
    for needle in ("AKIAIOSFODNN7EXAMPLE", "ghp_1234567890", "BEGIN RSA PRIVATE", "correct-horse", "eyJhbGciOiJIUzI1"):
        assert needle not in everything
    assert "private 0" not in everything
    assert "[REDACTED:" in everything  # the memory about the vault was kept, the key line redacted


def test_nested_guard_and_garbage_stdin(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [_line("assistant", "a1", [{"type": "text", "text": "[MEMORY: context: nested runs write nothing]"}])])
    payload = json.dumps({"session_id": "s", "transcript_path": str(transcript), "cwd": str(project)})
    nested = cortex("hook", "stop", cwd=project, input=payload, env={"CORTEX_NESTED": "1"})
    assert nested.returncode == 0 and nested.stdout == "" and _memories(project) == []
    garbage = cortex("hook", "stop", cwd=project, input="{not json")
    assert garbage.returncode == 0 and garbage.stdout == ""
    assert "stop:" in (project / ".cortex" / "state" / "cortex.log").read_text(encoding="utf-8")


def test_a_transcript_that_shrank_restarts_safely(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    facts = ["the build uses make", "releases are tagged on fridays", "docs live in the wiki"]
    _write(transcript, [_line("assistant", f"a{n}", [{"type": "text", "text": f"[MEMORY: context: {fact}]"}])
                        for n, fact in enumerate(facts)])
    _stop(project, transcript)
    _write(transcript, [_line("assistant", "x", [{"type": "text", "text": "[MEMORY: context: a brand new fact]"}])])
    _stop(project, transcript)
    titles = {r["title"] for r in _list(project)}
    assert "a brand new fact" in titles and len(titles) == 4


def test_task_tools_build_the_plan_and_the_report_is_the_progress_note(project, tmp_path):
    transcript = tmp_path / "t.jsonl"

    def tool(uuid: str, name: str, payload: dict) -> list[str]:
        return [_line("assistant", uuid, [{"type": "tool_use", "id": f"t-{uuid}", "name": name, "input": payload}]),
                _line("user", f"r-{uuid}", [{"type": "tool_result", "tool_use_id": f"t-{uuid}", "content": "ok"}])]

    _write(transcript, [
        *tool("1", "TaskCreate", {"subject": "Add the BOM test", "description": "", "activeForm": "Adding"}),
        *tool("2", "TaskCreate", {"subject": "Strip the BOM in the loader", "description": "", "activeForm": "Stripping"}),
        *tool("3", "TaskUpdate", {"taskId": "1", "status": "completed"}),
        *tool("4", "Write", {"file_path": str(project / "loader.py"), "content": "x = 1\n"}),
        *tool("5", "Bash", {"command": 'git commit -am "Strip the UTF-8 BOM before parsing CSV"'}),
        _line("assistant", "6", [{"type": "text", "text": "The loader strips the UTF-8 BOM before the CSV reader sees it; "
                                                         "the new test covers Excel exports."}]),
    ])
    _stop(project, transcript)
    [plan] = _list(project, "plan")
    assert plan["title"] == "Plan: Strip the BOM in the loader"
    body = _show(project, plan["id"])["body"]
    assert "- [x] Add the BOM test" in body and "- [ ] Strip the BOM in the loader" in body
    [progress] = _list(project, "progress")
    assert progress["files"] == ["loader.py"]
    # the report's own words; the commit list is git's (issue 40: a memory holds what lasts, not the run's log)
    body = _show(project, progress["id"])["body"]
    assert "strips the UTF-8 BOM before the CSV reader sees it" in body and "Commits:" not in body


HOOK_PAYLOADS = Path(__file__).resolve().parent / "data" / "hook-payloads"  # copies of the shared real payloads


def test_real_stop_and_pre_compact_payloads(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    shutil.copy(FIXTURES / "marot-spotter-short.jsonl", transcript)
    payloads = []
    for path in sorted(HOOK_PAYLOADS.rglob("*.json")):
        for payload in json.loads(path.read_text(encoding="utf-8")):
            if payload.get("hook_event_name") in ("Stop", "PreCompact", "SessionStart"):
                payloads.append(payload)
    assert payloads
    for payload in payloads:
        event = {"Stop": "stop", "PreCompact": "pre-compact", "SessionStart": "session-start"}[payload["hook_event_name"]]
        real = dict(payload, transcript_path=str(transcript), cwd=str(project))
        result = cortex("hook", event, cwd=project, input=json.dumps(real))
        assert result.returncode == 0, (event, result.stderr)
        if event == "session-start":  # the briefing, as the JSON Claude Code reads
            assert json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"].startswith("<!-- cortex:injected -->")
        else:
            assert result.stdout == "", (event, result.stdout)


@pytest.mark.parametrize("threshold, written", [(0.8, False), (0.95, True)])
def test_cosine_dedup_uses_the_index_vectors(project, tmp_path, threshold, written):
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("dedup_cosine: 0.9", f"dedup_cosine: {threshold}"),
                      encoding="utf-8")
    remember(project, "The CI image ships SQLite 3.31 which lacks DROP COLUMN", type="gotcha")  # linking it
    # (as `cortex remember` does) builds the index and its vectors
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [_line("assistant", "a1", [{"type": "text", "text": "[MEMORY: gotcha: SQLite 3.31 in the CI image "
                                                                           "has no DROP COLUMN support]"}])])
    _stop(project, transcript)
    titles = [r["title"] for r in _list(project, "gotcha")]
    assert ("SQLite 3.31 in the CI image has no DROP COLUMN support" in titles) is written


def test_session_end_returns_at_once_and_captures_in_the_background(project, tmp_path):
    import time

    transcript = tmp_path / "t.jsonl"
    _write(transcript, [_line("assistant", "a1", [{"type": "text", "text": "[MEMORY: context: Session-end captures "
                                                                           "the last turn too]"}])])
    payload = json.dumps({"session_id": "s-end", "transcript_path": str(transcript), "cwd": str(project),
                          "hook_event_name": "SessionEnd", "reason": "prompt_input_exit"})
    result = cortex("hook", "session-end", cwd=project, input=payload)
    assert result.returncode == 0 and result.stdout == ""
    deadline = time.time() + 60
    while time.time() < deadline and not _memories(project):
        time.sleep(0.1)
    assert [r["title"] for r in _list(project)] == ["Session-end captures the last turn too"]


def _tool(uuid: str, name: str, payload: dict, result: str = "ok", failed: bool = False, **extra: object) -> list[str]:
    block = {"type": "tool_result", "tool_use_id": f"t-{uuid}", "content": result} | ({"is_error": True} if failed else {})
    return [_line("assistant", f"a-{uuid}", [{"type": "tool_use", "id": f"t-{uuid}", "name": name, "input": payload}], **extra),
            _line("user", f"r-{uuid}", [block], **extra)]


def _say(uuid: str, text: str) -> str:
    return _line("assistant", uuid, [{"type": "text", "text": text}])


REPORT = ("Found the root cause! The rate limiter keyed its buckets by the request path, so every query string got its own "
          "bucket and the limit never applied. I changed the key to the route template and added a regression test.")


def test_each_request_gets_its_final_report_with_a_summary_title(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [
        _line("user", "u1", "Why does the rate limit never trigger?"),
        _say("a1", "Let me look at the limiter."),
        *_tool("1", "Edit", {"file_path": str(project / "limiter.py"), "old_string": "a", "new_string": "b"}),
        _say("a2", REPORT),
        _line("user", "u2", "What does the nightly export job do with archived accounts in the warehouse?"),
        _say("a3", "| table | rows |\n|---|---|\n\nPerfect! The nightly export skips archived accounts entirely: the "
                   "query filters on status = 'active' and the warehouse keeps the last snapshot of each archived account "
                   "for ninety days before the purge job removes it."),
    ])
    _stop(project, transcript)
    # the root cause is written once (the gotcha its cue made); the report adds only "I changed …": too little
    said = [r for r in _list(project) if "keyed its buckets by the request path" in _show(project, r["id"])["body"]]
    assert len(said) == 1
    [context] = [r for r in _list(project, "context")]
    assert context["title"].startswith("The nightly export skips archived accounts entirely")  # no filler, no table row
    assert "Asked:" not in _show(project, context["id"])["body"]  # the request restated is not kept (issue 40)


def test_claude_style_root_causes_and_choices_are_kept_with_their_paragraph(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [
        _line("user", "u1", "fix the flaky upload"),
        _say("a1", "Found the issue: the upload helper reuses one multipart boundary for every request, because the "
                   "boundary is created at import time.\n\nI'll use a fresh boundary per request instead of the "
                   "module-level constant."),
        _say("a2", "Done."),
    ])
    _stop(project, transcript)
    types = {r["type"] for r in _list(project)}
    assert {"gotcha", "decision"} <= types


def test_user_rules_and_it_needs_to_be_corrections_are_patterns(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [
        _line("user", "u1", "add a max_tokens option to the vision call"),
        *_tool("1", "Edit", {"file_path": str(project / "vision.js"), "old_string": "a", "new_string": "b"}),
        _line("user", "u2", "It needs to be 5000 for both providers, not 1024."),
    ])
    _stop(project, transcript)
    [rule] = _list(project, "pattern")
    assert "5000 for both providers" in rule["title"]


def test_compaction_summaries_and_a_subagents_short_finding_are_read(project, tmp_path):
    summary = ("This session is being continued from a previous conversation that ran out of context.\nSummary:\n"
               "1. Primary Request and Intent:\n   Move the billing worker to the queue service.\n"
               "4. Errors and fixes:\n   - The worker crashed with ECONNRESET because the queue client was created "
               "before fork; creating it in the child process fixed it.\n"
               "6. All user messages:\n   - move the worker\n")
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [
        _line("user", "c1", summary, isCompactSummary=True),
        *_tool("1", "Task", {"subagent_type": "Explore", "description": "map the queue", "prompt": "look"},
               result="The queue service exposes three topics; billing events go to `billing.v2` and the consumer group "
                      "is configured in config/queues.yaml, which every worker reads at start-up before it subscribes."),
    ])
    _stop(project, transcript)
    rows = _list(project)
    gotcha = next(r for r in rows if r["type"] == "gotcha")
    assert "ECONNRESET" in _show(project, gotcha["id"])["body"] and gotcha["tags"] == ["compaction"]
    assert not any("All user messages" in r["title"] or "Primary Request" in r["title"] for r in rows)
    # a sub-agent's short finding is kept in its own words, without a "Sub-agent … reported:" frame (issue 40)
    agent = next(r for r in rows if "subagent" in r["tags"])
    body = _show(project, agent["id"])["body"]
    assert "billing.v2" in body and "Sub-agent" not in body


def test_a_queued_prompt_is_read_once(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    queued = json.dumps({"type": "queue-operation", "operation": "enqueue", "content": "Never push to the release branch."})
    _write(transcript, [_line("user", "u1", "tidy the readme"), queued])
    _stop(project, transcript)
    assert [r["title"] for r in _list(project, "pattern")] == ["User: Never push to the release branch"]


def test_a_command_gotcha_needs_the_same_command_not_the_same_program(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [
        *_bash("1", "uv run ruff check src", "Exit code 1\nFound 1 error.", True),
        *_bash("2", "uv run pytest -q", "3 passed", False),
        *_bash("3", "golangci-lint run --disable-all -E bodyclose", "Exit code 3\nError: unknown flag: --disable-all", True),
        *_bash("4", "golangci-lint run --enable-only bodyclose", "0 issues.", False),
    ])
    _stop(project, transcript)
    [gotcha] = _list(project, "gotcha")
    assert "unknown flag: --disable-all" in gotcha["title"]
    assert "--enable-only bodyclose" in _show(project, gotcha["id"])["body"]


def test_a_heredoc_commit_and_windows_paths(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    win = {"cwd": "C:\\Users\\ana\\shop"}
    commit = "git add -A && git commit -m \"$(cat <<'EOF'\nFix the BOM in the CSV loader\n\nLonger text\nEOF\n)\""
    _write(transcript, [
        _line("user", "u1", "strip the BOM", **win),
        *_tool("1", "Write", {"file_path": "C:\\Users\\ana\\shop\\src\\loader.py", "content": "x"}, **win),
        *_tool("2", "Edit", {"file_path": "/c/Users/ana/shop/README.md", "old_string": "a", "new_string": "b"}, **win),
        *_tool("3", "Bash", {"command": commit}, **win),
        _say("a9", "The loader strips the UTF-8 BOM before parsing; the README explains Excel exports."),
    ])
    _stop(project, transcript)
    [progress] = _list(project, "progress")
    assert progress["files"] == ["README.md", "src/loader.py"]
    body = _show(project, progress["id"])["body"]
    assert "strips the UTF-8 BOM before parsing" in body and "$(cat" not in body and "C:" not in body


def test_dry_run_prints_layer_and_record_and_writes_nothing(project, tmp_path):
    transcript = tmp_path / "t.jsonl"
    _write(transcript, [_line("user", "u1", "go"), _say("a1", "[MEMORY: context: The staging database is rebuilt nightly]")])
    report = cortex_json("capture", str(transcript), "--dry-run", "--json", cwd=project)
    [row] = report["candidates"]
    assert row["layer"] == "self-report" and row["record"] == "a1" and row["index"] == 1
    assert _memories(project) == [] and not list((project / ".cortex" / "state").glob("cursors/*"))


def test_a_candidate_the_write_guard_refuses_costs_only_itself(project):
    """Redaction cleans a candidate's text; should the write guard still refuse one (here its key, which is not
    redacted, holds a token), that memory is left out and logged, and the candidates after it are written."""
    from cortex.capture import Candidate, CaptureReport, write_candidates

    store = Store.locate(project)
    token = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
    candidates = [Candidate("decision", "Chose SQLite for the local cache", "Chose SQLite: one file, no server.\n",
                            "self-report", key=f"plan:{token}"),
                  Candidate("gotcha", "WAL mode breaks on NFS", "SQLite WAL mode breaks on NFS mounts.\n", "self-report")]
    report = CaptureReport()
    written = write_candidates(store, candidates, session="s1", report=report)
    titles = {m.title for m in store.list(types=("decision", "gotcha"), statuses=("active", "proposed"))}
    assert titles == {"WAL mode breaks on NFS"} and len(written) == 1
    assert "looks like a secret" in (store.state_dir / "cortex.log").read_text(encoding="utf-8")
    assert token not in "".join(p.read_text(encoding="utf-8") for p in store.memories_dir.rglob("*.md"))
