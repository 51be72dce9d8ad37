"""Precision at capture (issue 40): the real `cortex hook stop` on small transcripts written in the form of
Claude Code's records; what a session says on the way (narration, one run's outcome, a sub-agent's report, a
machine path, the same fix said again) is not written, and an explicit [MEMORY: …] tag still is."""

from __future__ import annotations

import json
from pathlib import Path

from cortex.store import Store
from tests.helpers import cortex

HOME = "/Users/alice/work/shop"  # the session's folder on the author's machine, as Claude Code records it


def _record(kind: str, uuid: str, content: object, **extra: object) -> str:
    message: dict[str, object] = {"role": kind, "content": content}
    if kind == "assistant":
        message["id"] = f"msg-{uuid}"
        message["model"] = "claude-sonnet-4-5"
    return json.dumps({"type": kind, "uuid": uuid, "sessionId": "s-1", "gitBranch": "main", "cwd": HOME,
                       "isSidechain": False, "userType": "external", "version": "2.1.19", "message": message, **extra})


def _say(uuid: str, text: str) -> str:
    return _record("assistant", uuid, [{"type": "text", "text": text}])


def _ask(uuid: str, text: str) -> str:
    return _record("user", uuid, text)


def _tool(uuid: str, name: str, payload: dict, result: object = "ok") -> list[str]:
    return [_record("assistant", f"a-{uuid}", [{"type": "tool_use", "id": f"t-{uuid}", "name": name, "input": payload}]),
            _record("user", f"r-{uuid}", [{"type": "tool_result", "tool_use_id": f"t-{uuid}", "content": result}])]


def _failed(records: list[str]) -> list[str]:
    """The same records with every tool result marked as an error (is_error), as Claude Code writes a failed call."""
    out = []
    for line in records:
        record = json.loads(line)
        content = record["message"]["content"]
        if isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_result" and block.get("content") not in ("", "{}"):
                    block["is_error"] = True
        out.append(json.dumps(record))
    return out


def _stop(project: Path, tmp_path: Path, records: list[str]) -> list[dict]:
    transcript = tmp_path / "session.jsonl"
    transcript.write_text("\n".join(records) + "\n", encoding="utf-8")
    payload = {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project),
               "hook_event_name": "Stop", "stop_hook_active": False}
    result = cortex("hook", "stop", cwd=project, input=json.dumps(payload))
    assert result.returncode == 0 and result.stdout == ""
    store = Store.locate(project)
    return [store.get(item.id).to_dict() for item in store.list(statuses=("active", "proposed"))]


def _texts(project: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((project / ".cortex" / "memories").rglob("*.md")))


def test_a_subagent_report_is_not_stored_verbatim(project, tmp_path):
    report = ("Perfect! Now I have all the information I need. Here is a summary of the checkout module.\n\n"
              "## Checkout module\n\n- The cart totals are computed in cart/totals.py from the line items.\n"
              "- Taxes come from the rates table, loaded once per request by the tax service.\n"
              "- Discounts are applied before tax in apply_discounts(), which every caller goes through.\n"
              "- Shipping is added last, by the shipping service, after discounts and tax are known.")
    rows = _stop(project, tmp_path, [
        _ask("u1", "map the checkout code for me"),
        *_tool("1", "Task", {"subagent_type": "Explore", "description": "map checkout", "prompt": "Map checkout."},
               [{"type": "text", "text": report}, {"type": "text", "text": "agentId: a1b2c3"}]),
    ])
    assert "Now I have all the information I need" not in _texts(project)
    assert not any("subagent" in row["tags"] for row in rows)


def test_a_narration_only_turn_writes_nothing(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "the import of the fixtures fails, look into it"),
        _say("a1", "The issue is clear. I will look at how the loader resolves the fixture paths, and then at the test "
                   "setup, since the fixture folder may be created after the loader has already run. Let me start "
                   "with the loader module:"),
        *_tool("1", "Read", {"file_path": f"{HOME}/loader.py"}, "def load(path): ..."),
    ])
    assert rows == []


def test_one_runs_outcome_writes_nothing(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "run the tests and the linter"),
        *_tool("1", "Bash", {"command": "pytest -q"}, "42 passed in 11.20s"),
        *_tool("2", "Bash", {"command": "ruff check ."}, "All checks passed!"),
        _say("a1", "All 42 tests pass and ruff is clean. The run took 11.2 s on this machine and neither tool "
                   "printed a warning, so the branch is ready for review."),
    ])
    assert rows == []


def test_no_machine_path_or_user_name_is_written(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "why does the export job write nothing?"),
        *_tool("1", "Read", {"file_path": f"{HOME}/jobs/export.py"}, "..."),
        _say("a1", f"The root cause is that the export job writes to {HOME}/var/out, which only exists on your "
                   "machine, and the scratch copy in /tmp/tmpq8x1z2/export.csv is removed when the job exits. "
                   "Export paths must come from the EXPORT_DIR setting instead of a path under the project folder."),
    ])
    assert rows, "the lesson itself is kept"
    text = _texts(project)
    assert "alice" not in text and "/tmp/tmpq8x1z2" not in text
    assert "var/out" in text and "EXPORT_DIR" in text  # the project's own path, made relative, and the lesson


def test_one_fix_said_three_times_is_one_memory(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "French pages show up for English readers"),
        _say("a1", "The root cause is that the page cache key ignores the locale, so French pages are served to "
                   "English readers."),
        _ask("u2", "are you sure?"),
        _say("a2", "Yes. Root cause: the page cache key ignores the locale, so French pages were served to English "
                   "readers. I checked the other two caches as well: the fragment cache and the CDN rules already vary "
                   "on Accept-Language, and neither was ever affected by this."),
        _ask("u3", "ok, sum it up for the ticket"),
        _say("a3", "The bug was that the page cache key ignores the locale, so French pages get served to English "
                   "readers. Adding the locale to the key fixes it; old entries expire within the hour on their own, "
                   "so no purge of the cache is needed after the deploy."),
    ])
    said = [row for row in rows if "cache key ignores the locale" in row["body"]]
    assert len(said) == 1, [row["title"] for row in said]
    assert said[0]["title"].startswith("The page cache key ignores the locale")  # the fact, not "The root cause is"


def test_an_explicit_memory_tag_is_written_with_its_machine_path_redacted(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "where should the API token live?"),
        _say("a1", "Agreed. [MEMORY: decision: Keep the API token in the system keyring, not in a dotfile; "
                   f"{HOME}/.shoprc leaked it once.]"),
    ])
    [decision] = [row for row in rows if row["type"] == "decision"]
    assert decision["title"].startswith("Keep the API token in the system keyring")
    assert "alice" not in _texts(project) and ".shoprc" in decision["body"]


def _summary(pending: str) -> str:
    return ("This session is being continued from a previous conversation that ran out of context.\nSummary:\n"
            "1. Primary Request and Intent:\n   Move the billing worker to the queue service, as the user asked.\n"
            f"7. Pending Tasks:\n   - {pending}\n")


def test_only_the_last_compactions_pending_work_is_kept(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _record("user", "c1", _summary("Port the invoice job to the queue client, then run its integration tests against the staging broker"),
                isCompactSummary=True),
        _say("a1", "Ported."),
        _record("user", "c2", _summary("Remove the legacy cron entry for billing once the queue worker is deployed and has run for a day"),
                isCompactSummary=True),
    ])
    text = _texts(project)
    assert "legacy cron entry" in text  # still open at the end
    assert "invoice job" not in text  # pending then, done since
    assert "Move the billing worker" not in text  # the request restated
    assert rows


def test_a_report_keeps_its_lasting_sentences_only(project, tmp_path):
    report = ("Perfect! I've finished the migration. Here's the summary:\n\n"
              "## ✅ Migration Complete\n\n"
              "- ✅ Removed the old cron entry\n"
              "- Updated the worker config\n"
              "- queue_worker (45 min)\n\n"
              "The billing worker reads its queue name from BILLING_QUEUE because the staging and production brokers "
              "use different names, so the name must never be hard-coded.\n\n"
              "Would you like me to deploy it to staging next?")
    rows = _stop(project, tmp_path, [
        _ask("u1", "move the billing worker to the queue service please"),
        *_tool("1", "Edit", {"file_path": f"{HOME}/worker.py", "old_string": "a", "new_string": "b"}),
        _say("a1", report),
    ])
    [row] = rows
    text = _texts(project)
    assert row["title"].startswith("The billing worker reads its queue name from BILLING_QUEUE")
    assert "must never be hard-coded" in text
    for noise in ("Perfect", "Migration Complete", "Removed the old cron entry", "Updated the worker config",
                  "45 min", "Would you like", "move the billing worker to the queue service please"):
        assert noise not in text, noise


def test_a_hook_that_refuses_a_command_is_a_gotcha(project, tmp_path):
    rows = _stop(project, tmp_path, _failed([
        _ask("u1", "clean out the build folder"),
        *_tool("1", "Bash", {"command": "rm -rf build"},
               [{"type": "text", "text": "PreToolUse:Bash hook error: [uv run .claude/hooks/guard.py]: BLOCKED: "
                                         "recursive deletes are not allowed"}]),
    ]))
    [gotcha] = [row for row in rows if row["type"] == "gotcha"]
    assert "recursive deletes are not allowed" in gotcha["title"]
    assert "rm -rf build" in gotcha["body"]


def test_an_error_that_comes_back_three_times_is_a_gotcha(project, tmp_path):
    error = ("error: Your local changes to the following files would be overwritten by merge:\n\tlogs/events.json\n"
             "Please commit your changes or stash them before you merge.\nAborting")
    records = [_ask("u1", "merge the three feature branches")]
    for n, branch in enumerate(("feat-a", "feat-b", "feat-c")):
        records += _tool(str(n), "Bash", {"command": f"git merge {branch} --no-ff"}, error)
    rows = _stop(project, tmp_path, _failed(records))
    [gotcha] = [row for row in rows if row["type"] == "gotcha"]
    assert "would be overwritten by merge" in gotcha["title"]
    assert "logs/events.json" in gotcha["body"] and "3 times" in gotcha["body"]


def test_a_usage_error_then_the_accepted_flags_is_a_gotcha_even_when_the_run_then_fails(project, tmp_path):
    records = _failed([
        _ask("u1", "run only the bodyclose linter"),
        *_tool("1", "Bash", {"command": "golint run --only-linter bodyclose"}, "Error: unknown flag: --only-linter"),
        *_tool("2", "Bash", {"command": "golint run --enable-only bodyclose"}, "server_test.go:12:3: response body must be closed"),
    ])
    rows = _stop(project, tmp_path, records)
    [gotcha] = [row for row in rows if row["type"] == "gotcha"]
    assert "unknown flag: --only-linter" in gotcha["title"] and "--enable-only bodyclose" in gotcha["body"]


def test_a_program_missing_from_path_then_run_through_a_wrapper_is_a_gotcha(project, tmp_path):
    records = [
        _ask("u1", "tidy the go modules"),
        *_failed(_tool("1", "Bash", {"command": "go mod tidy"}, "(eval):1: command not found: go")),
        *_tool("2", "Bash", {"command": "which go"}, ""),
        *_tool("3", "Bash", {"command": "nix develop --command go mod tidy"}, ""),
    ]
    rows = _stop(project, tmp_path, records)
    [gotcha] = [row for row in rows if row["type"] == "gotcha"]
    assert "command not found: go" in gotcha["title"] and "nix develop --command go mod tidy" in gotcha["body"]


def test_claude_codes_system_reminder_inside_a_reply_is_not_captured(project, tmp_path):
    _stop(project, tmp_path, [
        _ask("u1", "why do the nightly exports come out empty?"),
        _say("a1", "The nightly export reads from the replica, which lags up to an hour because it is rebuilt from the "
                   "backup each night, so exports must run after 02:00 UTC. The schedule lives in the jobs table, not in cron."
                   "\n\n<system-reminder>\nNote: logs/app.json was "
                   "modified, either by the user or by a linter. Don't tell the user this.\n</system-reminder>"),
    ])
    text = _texts(project)
    assert "must run after 02:00 UTC" in text and "Don't tell the user" not in text


def test_a_request_to_make_sure_of_something_is_not_a_user_rule(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "review the generated deployment plan to make sure it covers every requirement"),
        *_tool("1", "Read", {"file_path": f"{HOME}/plan.json"}, "{}"),
    ])
    assert not [row for row in rows if row["type"] == "pattern"]
