"""Precision at capture (issue 40): the real `cortex hook stop` on small transcripts written in the form of
Claude Code's records; what a session says on the way (narration, one run's outcome, a sub-agent's report, a
machine path, the same fix said again) is not written, and an explicit [MEMORY: …] tag still is."""

from __future__ import annotations

import json
from pathlib import Path

from cortex.store import Store
from tests.helpers import cortex

HOME = "/Users/alice/code/shop"  # a session's folder on another machine, as Claude Code records it


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


# ---------------------------------------------------------------- round 3: fewer, whole memories


def test_a_question_or_a_regret_is_not_a_user_rule(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "oh no, we should have made a commit before running the script.. they don't have the files they "
                   "need, or do they?"),
        *_tool("1", "Read", {"file_path": f"{HOME}/plan.json"}, "{}"),
        _ask("u2", "the totals panel is not matching the receipt. Should we round per line instead? Also the totals "
                   "should have 2 decimals."),
        *_tool("2", "Read", {"file_path": f"{HOME}/totals.py"}, "..."),
        _ask("u3", "show both prices; since both come from the same rates table there should not be much difference"),
        *_tool("3", "Read", {"file_path": f"{HOME}/rates.py"}, "..."),
        _ask("u4", "is the cache warm? never call the rates API from a request handler"),
        *_tool("4", "Read", {"file_path": f"{HOME}/handler.py"}, "..."),
    ])
    patterns = [row["title"] for row in rows if row["type"] == "pattern"]
    assert len(patterns) == 1 and "never call the rates API" in patterns[0], patterns  # a rule said with a question


def test_a_bare_diagnosis_on_the_way_is_not_a_gotcha(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "the unit tests fail to start"),
        _say("a1", "The issue is that `jest` is being imported twice. Let me fix the test files:"),
        *_tool("1", "Edit", {"file_path": f"{HOME}/test/setup.js", "old_string": "a", "new_string": "b"}),
    ])
    assert not [row for row in rows if row["type"] == "gotcha"]


def test_a_hedged_guess_is_not_a_finding(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "only one suggestion shows up"),
        _say("a1", "The code is requesting five moves, but the response handling on the panel side may only be "
                   "capturing one of them if the engine returns a single object instead of an array. Let me check:"),
        *_tool("1", "Read", {"file_path": f"{HOME}/panel.js"}, "..."),
    ])
    assert not [row for row in rows if row["type"] in ("gotcha", "decision")]


def test_options_laid_out_for_the_person_to_pick_are_not_a_memory(project, tmp_path):
    menu = ("The export stops at 1,000 rows because the query pages and only the first page is read.\n\n"
            "A) Read every page in a loop\n- Pros: simple, no new dependency\n- Cons: slow on big exports\n\n"
            "B) Stream the rows with a server-side cursor\n- Pros: constant memory\n- Cons: holds a connection open\n\n"
            "C) Export from a nightly snapshot instead\n- Pros: no load on the primary\n- Cons: data up to a day old\n\n"
            "Which approach would you like?")
    rows = _stop(project, tmp_path, [_ask("u1", "why does the export stop at 1000 rows?"), _say("a1", menu)])
    assert not [row for row in rows if "Pros" in row["body"] or "nightly snapshot" in row["body"]]


def test_an_offer_the_person_turns_down_is_not_kept(project, tmp_path):
    offer = ("Making the style guide page responsive is easy: the grid already collapses to one column under 768px, "
             "and a hamburger menu needs about twenty lines of CSS and a toggle in the page script, with larger touch "
             "targets for phones. Should I go ahead and add the mobile menu?")
    rows = _stop(project, tmp_path, [
        _ask("u1", "how hard is a mobile menu for the style guide page?"),
        _say("a1", offer),
        _ask("u2", "No, it's ok then, the page is only a reference for us."),
        *_tool("1", "Read", {"file_path": f"{HOME}/README.md"}, "..."),
    ])
    assert "hamburger" not in _texts(project), [row["title"] for row in rows]


def test_a_list_of_labels_says_nothing_to_keep(project, tmp_path):
    report = ("## Polished server\n\n**Features Implemented:**\n- Extensive configuration validation\n"
              "- Environment variable support\n- Multiple transport protocols\n- Session management per client\n"
              "- Request timeout handling\n- Panic recovery middleware\n- Telemetry collection for monitoring\n")
    rows = _stop(project, tmp_path, [
        _ask("u1", "polish the server command"),
        *_tool("1", "Edit", {"file_path": f"{HOME}/cmd/serve.go", "old_string": "a", "new_string": "b"}),
        _say("a1", report),
    ])
    assert not [row for row in rows if "configuration validation" in row["body"]]


def test_status_lines_and_next_steps_are_not_kept(project, tmp_path):
    report = ("## Package check\n\n- Main entry point works (`src/installer.js`)\n"
              "- Configuration files implemented and functional\n- Test structure properly organized\n"
              "- Status: REMEDIATION_COMPLETE\n- TypeScript compilation successful\n- Dev server running on localhost:3000\n\n"
              "The installer reads its defaults from config/defaults.json because the CLI flags are parsed after the "
              "project type is detected, so a flag can never change which templates are offered.\n\n"
              "**Next Steps:**\n- Publish the package to the registry\n- Push the changes to the remote repository\n")
    rows = _stop(project, tmp_path, [
        _ask("u1", "check the package is complete"),
        *_tool("1", "Edit", {"file_path": f"{HOME}/src/installer.js", "old_string": "a", "new_string": "b"}),
        _say("a1", report),
    ])
    text = _texts(project)
    assert "config/defaults.json" in text, [row["title"] for row in rows]
    for noise in ("Main entry point works", "implemented and functional", "properly organized", "REMEDIATION_COMPLETE",
                  "compilation successful", "localhost:3000",
                  "Publish the package",
                  "Push the changes"):
        assert noise not in text, noise


def test_a_reaction_is_not_a_memory(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "use #D96E4B as the primary colour instead"),
        *_tool("1", "Edit", {"file_path": f"{HOME}/styles/theme.css", "old_string": "a", "new_string": "b"}),
        _say("a1", "That orange-red (#D96E4B) is much better - it's warm, professional, and distinctive without the "
                   "aggressive feel of pure red."),
    ])
    assert "much better" not in _texts(project), [row["title"] for row in rows]


def test_pending_work_of_a_compaction_that_later_requests_follow_is_not_kept(project, tmp_path):
    _stop(project, tmp_path, [
        _record("user", "c1", _summary("Run the generated cleanup script once the user has reviewed its list of branches"),
                isCompactSummary=True),
        _ask("u1", "run the script"),
        *_tool("1", "Bash", {"command": "./cleanup.sh"}, "removed 4 branches"),
    ])
    assert "cleanup script" not in _texts(project)


def test_a_proposed_choice_is_not_a_decision(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "how should the comparison panel look?"),
        _say("a1", "For the comparison I would show:\n\n- Both results side by side, so a shifted board stands out\n"
                   "- A one-line summary, \"10 squares differ\", instead of ten lines of differences\n\n"
                   "Does this approach look right before I design the details?"),
    ])
    assert not [row for row in rows if row["type"] == "decision"]


def test_a_cue_inside_a_code_span_is_output_not_a_decision(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "what do the ten differences look like?"),
        _say("a1", "All ten lines of the comparison log read the same way:\n\n"
                   "- `sees ♟ instead of ·` (the second model sees a black pawn where the first sees an empty square)\n"),
        *_tool("1", "Read", {"file_path": f"{HOME}/compare.js"}, "..."),
    ])
    assert not [row for row in rows if row["type"] == "decision"]


def test_a_title_whose_words_another_title_has_is_the_same_fact(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "only one best move shows up"),
        _say("a1", "Fixed by:\n- Switched from the old engine API to the Cloud Eval API (supports several lines)\n"
                   "- The old engine API stays as the fallback when the cloud has no entry"),
        _ask("u2", "and the rate limits?"),
        _say("a2", "Switched to the Cloud Eval API (`src/background/worker.js`)\n- Returns up to 5 lines in one request\n"
                   "- One request a second at most, and a minute of backoff after a 429"),
    ])
    switched = [row["title"] for row in rows if row["title"].startswith("Switched")]
    assert len(switched) == 1, switched


def test_a_recurring_error_that_names_nothing_is_not_a_gotcha(project, tmp_path):
    records = [_ask("u1", "merge the three agent branches")]
    for n, branch in enumerate(("agent-a", "agent-b", "agent-c")):
        records += _tool(str(n), "Bash", {"command": f"git merge {branch}"},
                         "Automatic merge failed; fix conflicts and then commit the result.")
    rows = _stop(project, tmp_path, _failed(records))
    assert not [row for row in rows if row["type"] == "gotcha"]


def test_a_recurring_error_is_titled_by_its_command_without_machine_paths(project, tmp_path):
    error = "/nix/store/gvs84v19yx52n3g9q8-lint/bin/lint: line 31: basedpyright: command not found"
    records = [_ask("u1", "make the linter pass")]
    for n in range(3):
        records += _tool(str(n), "Bash", {"command": "nix develop -c lint"}, error)
    rows = _stop(project, tmp_path, _failed(records))
    [gotcha] = [row for row in rows if row["type"] == "gotcha"]
    assert gotcha["title"].startswith("basedpyright: command not found") and "`nix develop -c lint`" in gotcha["title"]
    assert "/nix/store" not in gotcha["title"]


def test_a_cue_is_titled_by_its_own_sentence(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "review the decomposition"),
        _say("a1", "Instead of 12 agents, consolidate to 5 agents:\n\n- Interactive installer system, one owner for "
                   "the whole flow\n- Hook manager and its tier folders\n- Templates for every project type"),
    ])
    [decision] = [row for row in rows if row["type"] == "decision"]
    assert decision["title"].startswith("Instead of 12 agents, consolidate to 5 agents")


def test_the_commands_a_project_is_checked_with_are_one_memory(project, tmp_path):
    records = [_ask("u1", "fix the failing CI checks")]
    for n, command in enumerate(("make lint", "make test", "go build ./...", "make test", f"cat {HOME}/ci.log")):
        records += _tool(str(n), "Bash", {"command": command}, "ok")
    rows = _stop(project, tmp_path, records)
    [commands] = [row for row in rows if "commands" in row["tags"]]
    assert "`make lint`" in commands["title"] and "`make test`" in commands["title"]
    assert "`go build ./...`" in commands["body"] and "cat" not in commands["body"] and "alice" not in commands["body"]


def test_a_commit_table_a_diff_and_narration_to_someone_are_not_kept(project, tmp_path):
    report = ("Sam — I primed on the repo and read all 65 open issues against the release branch.\n\n"
              "Publishing the v4 packages closes the most active issue, because the crash it reports is already fixed "
              "on the release branch and only the published version still has it.\n\n"
              "| Commit | Task | Description |\n|---|---|---|\n| `3bb8701` | fum.1 | Enriched the renderer |\n"
              "| `b9288c2` | fum.2 | Rebuilt the transcript panel |\n\n"
              "```diff\n- > Status: initial review\n+ > Status: issue triage done\n```\n")
    _stop(project, tmp_path, [
        _ask("u1", "triage the open issues"),
        *_tool("1", "Edit", {"file_path": f"{HOME}/docs/triage.md", "old_string": "a", "new_string": "b"}),
        _say("a1", report),
    ])
    text = _texts(project)
    assert "closes the most active issue" in text
    for noise in ("I primed", "3bb8701", "Rebuilt the transcript panel", "Status: issue triage done"):
        assert noise not in text, noise


def test_a_list_item_is_titled_under_its_heading(project, tmp_path):
    report = ("### Added rate limiting protection\n\n- One second at least between two requests to the cloud API\n"
              "- A minute of backoff after a 429 answer, then the fallback engine\n")
    rows = _stop(project, tmp_path, [
        _ask("u1", "add rate limiting for the cloud API"),
        *_tool("1", "Edit", {"file_path": f"{HOME}/src/worker.js", "old_string": "a", "new_string": "b"}),
        _say("a1", report),
    ])
    [row] = rows
    assert row["title"].startswith("Added rate limiting protection: One second at least between two requests")


# Round 4: what a later message of the session changes, lists that are this run's, and titles that name the fact.

def _edit(uuid: str, path: str) -> list[str]:
    return _tool(uuid, "Edit", {"file_path": f"{HOME}/{path}", "old_string": "a", "new_string": "b"})


def test_a_revised_proposal_replaces_the_earlier_one(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "how should we cache the product pages?"),
        _say("a1", "Cache the rendered product pages in Redis, keyed by product id and locale, because rendering a "
                   "page takes 400 ms and the catalogue changes only a few times a day. Entries expire after ten "
                   "minutes so that price changes show up quickly. Does this look right?"),
        _ask("u2", "prices differ by currency, think again"),
        _say("a2", "Revised: cache the rendered product pages in Redis keyed by product id, locale and currency, since "
                   "a key without the currency would serve euro prices to dollar shoppers. Rendering a product page "
                   "takes 400 ms while the catalogue changes a few times a day, so cached entries still expire "
                   "after ten minutes. Shall I go ahead?"),
    ])
    cached = [row for row in rows if "Redis" in row["body"]]
    assert len(cached) == 1, [row["title"] for row in cached]
    assert "currency" in cached[0]["body"]


def test_a_figure_the_person_sets_later_overrules_the_proposed_one(project, tmp_path):
    _stop(project, tmp_path, [
        _ask("u1", "the export times out behind the proxy, what do you propose?"),
        _say("a1", "The export job streams every order through one HTTP request, and the proxy closes requests after "
                   "60 seconds of silence. I propose a request timeout of 300 seconds on the export route and a "
                   "progress line every 1000 orders, so that the proxy sees traffic. Does this look right?"),
        _ask("u2", "make it 900 seconds, big shops take longer"),
        *_edit("1", "export/routes.py"),
        _say("a2", "Done."),
    ])
    assert "300 seconds" not in _texts(project)


def test_a_list_item_that_only_names_something_heads_its_items(project, tmp_path):
    report = ("### Three importer workers:\n\n"
              "1. **csv_reader** (30 min)\n   - Parses supplier files with the dialect sniffed from the first 4 KB\n"
              "   - Rejects rows whose column count differs from the header row\n\n"
              "2. **price_mapper** (45 min)\n   - Maps supplier prices to the shop currency with the daily ECB rates\n\n"
              "3. **stock_writer** (20 min)\n   - Writes stock levels in one transaction per supplier file, so a "
              "failed file never leaves half an update\n\nEach worker reads the queue the one before it writes.\n")
    rows = _stop(project, tmp_path, [
        _ask("u1", "split the importer into workers"),
        *_edit("1", "importer/workers.py"),
        _say("a1", report),
    ])
    [row] = rows
    assert all(name in row["body"] for name in ("csv_reader", "price_mapper", "stock_writer"))
    assert "30 min" not in row["body"]
    assert row["title"] == "Three importer workers"  # the section, not "Parses supplier files …", one worker's item


def test_what_to_check_and_what_it_is_ready_for_are_this_runs(project, tmp_path):
    report = ("Changes made:\n\n- Switched the default theme in layout.tsx from theme-blue to theme-amber, because "
              "the brand colour has been amber since the rebrand.\n\n"
              "**What to check in the app:**\n\n- Primary buttons should now be amber instead of blue\n"
              "- Focus rings should now use the amber border instead of the grey one\n\n"
              "The release is ready for:\n1. **Staging deploy** (after the review)\n2. **Customer demo** on Friday\n")
    _stop(project, tmp_path, [
        _ask("u1", "switch the app to the amber theme"),
        *_edit("1", "app/layout.tsx"),
        _say("a1", report),
    ])
    text = _texts(project)
    assert "theme-amber" in text
    for noise in ("Primary buttons", "Focus rings", "Staging deploy", "Customer demo"):
        assert noise not in text, noise


def test_a_list_of_labels_with_a_reason_only_in_an_aside_is_not_kept(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "file the remaining work as one issue in the tracker"),
        _say("a1", "The issue includes:\n\n- **Twelve numbered requirements** that will split well into agents\n"
                   "- **Specific technologies** (Node.js, commander.js, inquirer.js, TypeScript)\n"
                   "- **Progressive complexity** (infrastructure → modules → configuration → testing)\n"
                   "- **Detailed acceptance criteria** for the validation step\n"
                   "- **Technical constraints** to guide the implementation\n"),
    ])
    assert rows == []


def test_a_title_names_the_fact_not_a_test_step_a_prior_state_or_a_bare_this(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "the nightly import gives up too early"),
        *_edit("1", "import/client.py"),
        _say("a1", "**Fix complete.**\n\n| Change | Before | After |\n|---|---|---|\n"
                   "| Request timeout | 30 s | 120 s |\n| Retries | 0 | 3 |\n\n"
                   "**To test:** run the nightly import with the big sample file and check the log for the retries "
                   "it made and the timeout it used."),
        _ask("u2", "and the memory use of the importer?"),
        *_edit("2", "import/reader.py"),
        _say("a2", "The current importer reads the whole file into memory. Streaming the file row by row keeps the "
                   "memory flat at 40 MB for any file size, which is why the reader now iterates csv.reader over the "
                   "open file."),
        _ask("u3", "how do agents avoid stepping on each other?"),
        *_edit("3", "scripts/spawn.sh"),
        _say("a3", "Git worktrees are the cleanest way to do this. Each agent gets its own worktree under "
                   "../work-trees, so agents never share an index, and the main checkout stays on main for merges."),
    ])
    titles = sorted(row["title"] for row in rows)
    assert titles == ["Each agent gets its own worktree under ../work-trees", "Request timeout: 30 s → 120 s",
                      "Streaming the file row by row keeps the memory flat at 40 MB for any file size"], titles


def test_a_user_rule_is_titled_from_the_clause_that_sets_it(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "ok go with the queue - we should never drop a webhook, retry it for up to a day"),
    ])
    [row] = [row for row in rows if row["type"] == "pattern"]
    assert row["title"].startswith("User: we should never drop a webhook")


def test_a_proposal_the_next_turn_makes_a_plan_is_not_kept(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "move the app to the new palette without breaking anything"),
        _say("a1", "Key concerns:\n\n- Incremental changes - update the components one group at a time, not all at "
                   "once\n- Test after each change so that nothing breaks unnoticed\n- Rollback ability, in case the "
                   "new colours clash with the charts\n\nShould I start by auditing where the colours are defined?"),
        _ask("u2", "ok, go ahead"),
        *_tool("1", "TodoWrite", {"todos": [{"content": "Audit where colours are defined", "status": "completed"},
                                            {"content": "Add the palette as CSS variables", "status": "in_progress"},
                                            {"content": "Switch the buttons", "status": "pending"}]}),
        *_edit("2", "styles/globals.css"),
        _say("a2", "The palette now lives in CSS variables in styles/globals.css, so every component picks it up "
                   "from one place instead of hard-coded hex values."),
    ])
    assert "Rollback ability" not in _texts(project)
    assert any(row["type"] == "plan" for row in rows)


# Round 5: a memory states the lasting fact, in the words a reader needs.


def test_test_steps_predictions_and_fix_guesses_are_not_kept(project, tmp_path):
    report = ("**Issue 1: Wrong totals**\n\nFixed by:\n- Changed the default rounding from banker's rounding to "
              "half-up, because invoices must match the tax office's figures\n\n"
              "The new rounding should significantly improve the match with the accountant's reports. "
              "This might be resolved for old invoices by running the migration again.\n\n"
              "- Changes committed to git\n\nCheck your running application to see how the invoices look now.\n\n"
              "**To test:** open last month's invoice in the admin page and compare it with the accountant's export.\n\n"
              "To test the export: reload the app in the browser and you should then see:\n"
              "- Totals shown with two decimals on every invoice line\n- The tax line printed last, under the subtotal\n\n"
              "**Testing:**\n- Reload the admin page and open one of last month's invoices\n")
    _stop(project, tmp_path, [
        _ask("u1", "invoice totals are off by a cent"),
        *_edit("1", "billing/rounding.py"),
        _say("a1", report),
    ])
    text = _texts(project)
    assert "half-up, because invoices must match" in text
    for noise in ("should significantly improve", "might be resolved", "committed to git", "Check your running",
                  "open last month's invoice", "Totals shown", "Reload the admin page"):
        assert noise not in text, noise


def test_the_assistants_own_tool_errors_are_not_a_gotcha(project, tmp_path):
    summary = ("This session is being continued from a previous conversation.\n\nSummary:\n"
               "1. Primary Request and Intent:\n   The user wants the export fixed.\n\n"
               "4. Errors and fixes:\n"
               "   - **File creation error**: Attempted to write to non-existent report file\n"
               "     - Fixed by creating the directory with `mkdir -p reports` before writing the report file\n"
               "   - **File access**: Initial attempts to edit files that hadn't been read\n"
               "     - Fixed by reading the existing files first, then using the Edit tool for the updates\n\n"
               "5. Pending Tasks:\n   - none\n")
    rows = _stop(project, tmp_path, [
        _record("user", "c1", summary, isCompactSummary=True),
        _ask("u1", "thanks"),
    ])
    assert rows == [], [row["title"] for row in rows]


def test_a_table_that_says_what_changed_is_kept(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "the nightly import gives up too early"),
        *_edit("1", "import/client.py"),
        _say("a1", "**Fix complete.**\n\n| Change | Before | After |\n|---|---|---|\n"
                   "| Request timeout | 30 s | 120 s |\n| Retries per request | 0 | 3 |\n| Backoff between retries | none | "
                   "exponential, from 2 s |\n"),
    ])
    [row] = rows
    assert "| Retries per request | 0 | 3 |" in row["body"]


def test_an_overruled_proposal_replaces_no_later_report(project, tmp_path):
    _stop(project, tmp_path, [
        _ask("u1", "the summaries are cut off, what do you propose?"),
        _say("a1", "The summariser stops at max_tokens: 1000, and a long release note needs about 1300 tokens, so "
                   "its last section is cut. I propose max_tokens: 1500 for the summariser, which leaves room for the "
                   "longest note we have seen while keeping the cost per call low. The prompt itself can stay as it "
                   "is, since the model already answers in the requested format. Does this look right?"),
        _ask("u2", "make it 5000 tokens max for both models"),
        *_edit("1", "summariser/client.py"),
        _say("a2", "| Setting | Before | After |\n|---|---|---|\n| Summariser max_tokens | 1000 | 5000 |\n"
                   "| Classifier max_tokens | 1000 | 5000 |\n| Summariser timeout | 30 s | 90 s |\n"),
    ])
    text = _texts(project)
    assert "1500" not in text
    assert "| Summariser max_tokens | 1000 | 5000 |" in text


def test_a_cause_carries_the_fix_said_right_after_it(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "the end-to-end tests time out"),
        _say("a1", "The issue is that Playwright is configured to start its own server on port 3000, but a dev server "
                   "is already running on port 3001. Let me stop the dev server and let Playwright start its own:"),
        *_tool("1", "Bash", {"command": "npx playwright test"}, "12 passed"),
    ])
    [row] = [row for row in rows if row["type"] == "gotcha"]
    assert "Fix: stop the dev server and let Playwright start its own." in row["body"]


def test_a_recurring_error_says_what_ran_and_why(project, tmp_path):
    failing = "/nix/store/x1-lint/bin/lint: line 31: basedpyright: command not found\nRunning: basedpyright hooks"
    records = [_ask("u1", "make the linter pass")]
    for n in range(3):
        records += _failed(_tool(f"{n}", "Bash", {"command": 'echo "linting ..." &&\nnix develop -c lint'}, failing))
    records += [_say("a1", "The remaining issue:\n\n1. **basedpyright hooks**: This fails because the `basedpyright` "
                           "command is not installed in the dev shell (exit code 127). It is not a code problem.")]
    rows = _stop(project, tmp_path, records)
    [row] = [row for row in rows if row["type"] == "gotcha"]
    assert "first from `nix develop -c lint`" in row["body"]
    assert "Why: basedpyright hooks: This fails because the `basedpyright` command is not installed" in row["body"]


def test_a_refused_call_quotes_the_part_the_hook_refused(project, tmp_path):
    refusal = ("Bash operation blocked by hook:\n- [uv run .claude/hooks/pre_tool_use.py]: BLOCKED: Dangerous rm "
               "command detected and prevented")
    rows = _stop(project, tmp_path, [
        _ask("u1", "clean up the logs and reset"),
        *_failed(_tool("1", "Bash", {"command": "git reset --hard HEAD &&\nrm -rf logs/"}, refusal)),
    ])
    [row] = rows
    assert row["body"].startswith("`rm -rf logs/` was refused by a hook")


def test_a_proposal_answered_with_a_request_for_advice_or_another_pick_is_set_aside(project, tmp_path):
    _stop(project, tmp_path, [
        _ask("u1", "the comparison list is too long"),
        _say("a1", "The service already returns the pawn counts of both models, so the comparison can show them side "
                   "by side: 6/6 against 7/8 tells at once that one model misread the board. Does this data "
                   "approach look right before I design the code changes?"),
        _ask("u2", "what do you suggest?"),
        _say("a2", "Replace the verbose disagreement list with a compact table of the pawn counts per provider, "
                   "because the counts show a misread board at once and the square list is noise."),
        _ask("u3", "I've set the brand colour to red, will that cause problems?"),
        _say("a3", "Red is strongly associated with errors and destructive actions in interfaces, so a red brand "
                   "colour makes every primary button look like a warning. Deep blue or forest green convey trust "
                   "instead. Would you like me to build the palette around one of them?"),
        _ask("u4", "ok, let's use this orange one instead and update the rest"),
    ])
    text = _texts(project)
    assert "compact table of the pawn counts" in text
    assert "Does this data approach" not in text and "6/6 against 7/8" not in text
    assert "Red is strongly associated" not in text


def test_steps_a_report_asks_about_and_nobody_approved_are_left_out(project, tmp_path):
    _stop(project, tmp_path, [
        _ask("u1", "commit everything so I can work on another machine"),
        _say("a1", "Both `api/` and `firmware/` are separate git repositories (they have `.git` folders). Adding "
                   "them as plain files would repeat the mistake of the last commit, which had to remove them.\n\n"
                   "I'd recommend:\n1. Adding `api/` and `firmware/` to `.gitignore`\n2. Committing the rest\n\n"
                   "Should I proceed that way, or add them as submodules?"),
        _ask("u2", "where is the template repository?"),
    ])
    text = _texts(project)
    assert "separate git repositories" in text
    assert ".gitignore" not in text


def test_titles_name_the_fact_a_list_a_clause_and_not_a_status_mark(project, tmp_path):
    rows = _stop(project, tmp_path, [
        _ask("u1", "shorten the vision prompt"),
        _say("a1", "## Prompt condensation\n\nThe current prompt is ~50 lines with detailed step explanations.\n"
                   "This cuts the prompt from ~50 lines to ~20 lines while preserving:\n"
                   "- The validation checklist (critical for accuracy)\n- Piece shape hints (prevents confusion)\n\n"
                   "Shall I write it?"),
        _ask("u2", "yes"),
        _say("a2", "The most impactful change is an explicit instruction that the model should output only JSON, "
                   "keeping all of its reasoning internal and out of the reply text. The model then answers with the JSON "
                   "object alone, which the parser reads without stripping any prose around it."),
        _ask("u3", "and the templ warnings?"),
        _say("a3", "## Summary of fixes\n\n✅ **Fixed syntax errors in deps.go** - Removed escaped characters\n"
                   "✅ **Fixed ComponentScript issues** - Used templ.ComponentScript{Call: onclick} instead of "
                   "templ.SafeScript\n"),
    ])
    titles = {row["title"] for row in rows}
    assert "This cuts the prompt from ~50 lines to ~20 lines while preserving: the validation checklist, piece " \
           "shape hints" in titles, titles
    assert "The most impactful change is an explicit instruction that the model should output only JSON" in titles
    assert "Fixed ComponentScript issues - Used templ.ComponentScript{Call: onclick} instead of templ.SafeScript" \
        in titles, titles
