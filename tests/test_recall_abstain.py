"""Issue 42: recall abstains on a subject never written, and a hit shows the part of its body that answers.

Real parts: a git repository with a store written as `cortex remember` writes it, the `cortex` command and
`cortex hook prompt` with Claude Code's JSON on stdin, as subprocesses.
"""

from __future__ import annotations

import json
from pathlib import Path

from cortex.store import Store
from tests.helpers import cortex, cortex_json, hook, make_repo, remember

# Services named by two words each, every word used by one memory only: a question can name a service that was
# never written about with words the store knows well.
SERVICES = [
    ("decision", "The Heron gateway rejects request bodies over 2 MB with a 413."),
    ("gotcha", "The Kestrel queue keeps dead jobs for seven days, then drops them without a trace."),
    ("decision", "The Osprey scheduler retries a failed job three times, ten minutes apart, then pages the on-call."),
    ("pattern", "Session cookies expire after twelve hours of inactivity."),
    ("decision", "Receipts are rendered as PDF by WeasyPrint with the DejaVu fonts installed."),
    ("pattern", "Money amounts are stored as integer cents, never as floats."),
    ("decision", "Feature flags are read from LaunchDarkly at startup and cached for a minute."),
    ("architecture", "Nightly reports are built by a cron container at 02:00 UTC."),
]
NEVER_WRITTEN = "how often does the Kestrel gateway retry a failed request?"


def _services(root: Path) -> tuple[Path, list[str]]:
    project = make_repo(root / "birds")
    Store.init(project / ".cortex")
    return project, [remember(project, text, type=kind, link=False).id for kind, text in SERVICES]


def test_a_subject_never_written_gets_nothing_while_a_paraphrase_finds_its_memory(tmp_path):
    """"the Kestrel gateway" was never written about (a Kestrel queue and a Heron gateway were): the command
    says "nothing relevant" and the prompt hook says nothing, though the Osprey scheduler's retries are close
    in meaning; asked in other words about the Osprey scheduler, recall still finds its memory first."""
    project, ids = _services(tmp_path)
    out = cortex("recall", NEVER_WRITTEN, cwd=project)
    assert out.stdout.strip() == "nothing relevant", out.stdout
    assert cortex_json("recall", NEVER_WRITTEN, cwd=project) == []
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "cwd": str(project),
              "prompt": NEVER_WRITTEN, "transcript_path": str(project / "t.jsonl")}
    answer = hook("prompt", project, prompt)
    assert answer.returncode == 0
    assert not answer.stdout.strip() or "additionalContext" not in answer.stdout, answer.stdout
    rows = cortex_json("recall", "when does the Osprey scheduler give up on a job that keeps failing?", cwd=project)
    assert rows and rows[0]["id"] == ids[2]
    # --all still shows what the line left out, marked
    below = cortex_json("recall", NEVER_WRITTEN, "--all", cwd=project)
    assert below and not any(row["relevant"] for row in below)


DEPLOY = [
    "Deploys go out from the main branch through the release pipeline, never from a laptop.",
    "Each deploy builds one image and tags it with the commit it was built from.",
    "Rollbacks keep the previous three images on the registry so an older build can come back in a minute.",
    "The health check probes port 8081 on every container every ten seconds.",
    "Database migrations run in a separate job before the new containers start.",
    "Secrets come from the vault at start-up and are never baked into an image.",
    "The canary takes five percent of the traffic for fifteen minutes before the rest follows.",
]


def test_a_hit_shows_the_sentence_that_answers_not_the_whole_body(project):
    """A long memory about deploys answers "which port does the health check probe?": recall shows its title
    and the sentence about the port, not the opening sentences or the rest of the body; the whole text stays one
    `cortex show` away."""
    memory = remember(project, " ".join(DEPLOY), type="architecture", title="How deploys work", link=False)
    remember(project, "Session cookies expire after twelve hours of inactivity.", type="pattern", link=False)
    out = cortex("recall", "which port does the health check probe?", cwd=project).stdout
    assert "How deploys work" in out and "8081" in out, out
    for other in DEPLOY[:3] + DEPLOY[4:]:
        assert other[:40] not in out, out
    row = cortex_json("recall", "which port does the health check probe?", cwd=project)[0]
    assert row["id"] == memory.id and "8081" in row["snippet"] and len(row["snippet"]) <= 200
    assert "previous three images" not in json.dumps(row)
    assert all(sentence in cortex("show", memory.id, cwd=project).stdout for sentence in DEPLOY)
