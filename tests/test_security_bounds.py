"""Bounded everything (issue 37, items 8, 9 and 11's prompts and transcripts): a held write lock is waited for a
while, then named (a command fails, a hook logs and exits 0); one capture of a transcript at a time; a huge
prompt and a newline-free transcript are read up to a cap, in bounded memory.

Nothing here asserts a duration: a hang is caught by the subprocess timeout (120 s, `tests.helpers.cortex`)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.helpers import cortex, cortex_command, hook, remember

DATA = Path(__file__).resolve().parent / "data"
TRANSCRIPT = DATA / "transcripts" / "drmaciver-stop-hook-feedback.jsonl"  # one capture writes a memory
STOP_PAYLOAD = json.loads((DATA / "hook-payloads" / "CoorpAcademy-serverless-plugins" / "stop.json").read_text())[0]
MB = 1024 * 1024

# Another process holding a lock, as `cortex maintain` at 100,000 memories held the write lock for 30 minutes.
HOLD = "import fcntl, sys, time\nf = open(sys.argv[1], 'a+b')\nfcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)\n"


@contextlib.contextmanager
def held(lock: Path) -> Iterator[subprocess.Popen[str]]:
    """A helper process holding an exclusive flock on `lock` for the `with` block."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def memory_files(project: Path) -> list[Path]:
    return sorted((project / ".cortex" / "memories").rglob("*.md"))


def log_of(project: Path) -> str:
    path = project / ".cortex" / "state" / "cortex.log"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def with_a_lasting_reply(folder: Path) -> Path:
    """TRANSCRIPT with one more reply that states a lasting fact: its own last report is one run's progress,
    which capture leaves out (issue 40), and these tests need a capture that writes a memory."""
    lines = TRANSCRIPT.read_text(encoding="utf-8").splitlines()
    last = json.loads(next(line for line in reversed(lines) if json.loads(line).get("type") == "assistant"))
    last["uuid"], last["message"]["id"] = "5e55-lasting-reply", "msg_5e55_lasting"
    last["message"]["content"] = [{"type": "text", "text": (
        "The repository's pre-commit hook rewrites test.txt line endings to LF, so a commit made from Windows "
        "shows the whole file as changed; set core.autocrlf=input before committing here.")}]
    copy = folder / "lasting.jsonl"
    copy.write_text("\n".join([*lines, json.dumps(last)]) + "\n", encoding="utf-8")
    return copy


def stop_payload(project: Path, transcript: Path = TRANSCRIPT) -> dict[str, Any]:
    """Claude Code's real Stop payload, about `transcript` in `project`, its last reply the transcript's own."""
    last = ""
    for line in transcript.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("type") == "assistant":
            texts = [b.get("text", "") for b in record["message"]["content"] if isinstance(b, dict) and b.get("type") == "text"]
            last = "\n".join(texts) or last
    return STOP_PAYLOAD | {"session_id": "5e55-bounds", "cwd": str(project), "transcript_path": str(transcript),
                           "last_assistant_message": last}


def max_rss_of(args: list[str], cwd: Path, stdin: bytes) -> tuple[subprocess.CompletedProcess[bytes], int]:
    """Run `args` from a small Python parent that reports its children's peak RSS (bytes): the hook's own."""
    code = ("import resource, subprocess, sys\n"
            "done = subprocess.run(sys.argv[1:], stdin=sys.stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
            "sys.stdout.buffer.write(done.stdout)\n"
            "sys.stderr.write(f'{done.returncode} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n")
    result = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, input=stdin, capture_output=True, timeout=120)
    code_and_rss = result.stderr.decode().split()
    assert result.returncode == 0 and len(code_and_rss) == 2, result.stderr
    result.returncode = int(code_and_rss[0])
    return result, int(code_and_rss[1]) * 1024  # ru_maxrss is in KiB on Linux


# ---------------------------------------------------------------- 8. the write lock has a timeout


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands and hooks wait 1 s for a held lock (`CORTEX_LOCK_WAIT`), not the 10 s / 5 s of a person's run."""
    monkeypatch.setenv("CORTEX_LOCK_WAIT", "1")


def test_remember_under_a_held_write_lock_says_who_holds_it_and_writes_nothing(project, short_wait):
    """Before: `cortex remember` waited forever while another process held the write lock. After: it waits a
    while, then fails with one line naming the lock and the holding process; no memory is written."""
    with held(project / ".cortex" / "state" / "write.lock") as holder:
        result = cortex("remember", "Deploys go through the staging cluster first, never straight to production.",
                        cwd=project, check=False)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "write.lock" in lines[0] and f"pid {holder.pid}" in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert memory_files(project) == []


def test_forget_under_a_held_write_lock_fails_and_leaves_the_memory(project, short_wait):
    """Before: `cortex forget` waited forever on a held write lock. After: one line, non-zero, the file as it was."""
    kept = remember(project, "Use ruff for linting; flake8 was dropped.", type="decision", link=False)
    before = Path(str(kept.path)).read_bytes()
    with held(project / ".cortex" / "state" / "write.lock"):
        result = cortex("forget", kept.id, "--yes", cwd=project, check=False)
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1 and "write.lock" in result.stderr, result.stderr
    assert Path(str(kept.path)).read_bytes() == before


def test_the_stop_hook_under_a_held_write_lock_logs_exits_0_and_the_next_stop_captures(project, short_wait):
    """Before: the Stop hook waited forever on the write lock. After: it gives up, logs which lock is held,
    exits 0, and keeps its cursor: the next Stop writes what this one could not."""
    payload = stop_payload(project, with_a_lasting_reply(project.parent))
    with held(project / ".cortex" / "state" / "write.lock"):
        result = hook("stop", project, payload)
    assert result.returncode == 0 and result.stdout == "" and "Traceback" not in result.stderr
    assert "gave up waiting" in log_of(project) and "write.lock" in log_of(project), log_of(project)
    assert memory_files(project) == []
    again = hook("stop", project, payload)
    assert again.returncode == 0
    assert len(memory_files(project)) >= 1, log_of(project)  # nothing was lost: the cursor had not moved


# ---------------------------------------------------------------- 9. one capture at a time per transcript


@pytest.mark.parametrize("parallel", [2, 8])
def test_parallel_stop_hooks_on_one_transcript_write_each_memory_once(project, parallel):
    """Before: 2 parallel Stops on one transcript wrote 2 copies of its memory, 8 wrote up to 8. After: the
    captures of one transcript take turns; each memory is written once, and every hook exits 0."""
    raw = json.dumps(stop_payload(project, with_a_lasting_reply(project.parent)))
    runs = [subprocess.Popen([*cortex_command(), "hook", "stop"], cwd=project, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(parallel)]
    for run in runs:
        assert run.stdin is not None
        run.stdin.write(raw)
        run.stdin.close()
    for run in runs:
        run.wait(timeout=120)
        assert run.returncode == 0, run.stderr.read() if run.stderr else ""
    titles = [path.read_text(encoding="utf-8").split("\ntitle: ", 1)[1].split("\n", 1)[0]
              for path in memory_files(project)]
    assert titles, log_of(project)
    assert len(titles) == len(set(titles)), (titles, log_of(project))
    assert "Error" not in log_of(project), log_of(project)


# ---------------------------------------------------------------- 11. prompts and transcripts read up to a cap


def _prompt_payload(project: Path, prompt: str) -> bytes:
    return json.dumps({"session_id": "5e55-prompt", "cwd": str(project), "hook_event_name": "UserPromptSubmit",
                       "transcript_path": str(project / "t.jsonl"), "permission_mode": "default",
                       "prompt": prompt}).encode()


QUESTION = "Why does the payment service retry webhooks with backoff?"


@pytest.fixture
def paying(project: Path) -> tuple[Path, str]:
    """A project with one decision a question about webhooks recalls."""
    made = remember(project, "The payment service retries webhooks with exponential backoff; never lower the retry "
                             "ceiling below five attempts.", type="decision", link=False)
    return project, made.id


def test_a_4mb_prompt_is_answered_from_its_head_in_the_memory_of_a_short_one(paying):
    """Before: a 4 MB prompt (a pasted log) was recalled on whole: 30 s on a big store, 4x the memory of a
    short prompt's hook. After: its first 64 KiB are read, the hook answers as for the question alone, and its
    peak memory stays that of a short prompt's hook plus the payload it was sent."""
    project, wanted = paying
    log = "".join(f"2026-01-01T10:{n % 60:02d}:00 INFO worker-{n % 7} request {n} handled in {n % 13} ms\n"
                  for n in range(70000))
    big = f"{QUESTION} Here is the log:\n{log}"
    assert len(big) > 4 * MB
    short, short_rss = max_rss_of([*cortex_command(), "hook", "prompt"], project, _prompt_payload(project, QUESTION))
    answer, big_rss = max_rss_of([*cortex_command(), "hook", "prompt"], project, _prompt_payload(project, big))
    assert short.returncode == 0 and wanted in short.stdout.decode()
    assert answer.returncode == 0
    context = json.loads(answer.stdout)["hookSpecificOutput"]["additionalContext"]
    assert wanted in context
    assert big_rss < short_rss + 64 * MB, (short_rss // MB, big_rss // MB)


def test_a_prompt_of_many_pasted_hook_context_blocks_is_answered(paying):
    """Before: the `<hook_context>` blocks of a prompt were cut out one at a time, each cut copying the rest of
    the text (quadratic: 20,000 blocks took 0.2 s, 600,000 ~200 s, twice per hook). After: one pass, and the
    question after them is answered."""
    project, wanted = paying
    pasted = "<hook_context></hook_context>" * 600_000
    result = subprocess.run([*cortex_command(), "hook", "prompt"], cwd=project, capture_output=True, timeout=120,
                            input=_prompt_payload(project, pasted + QUESTION))
    assert result.returncode == 0
    assert wanted in json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]


def test_a_2gb_newline_free_transcript_keeps_the_stop_hook_small(project, tmp_path):
    """Before: the Stop hook read what was new in a transcript whole: a 2 GB file without a newline took 4.2 GB.
    After: lines are streamed and one over the cap is skipped unread: exit 0, memory far below the file's size,
    the skip logged, and the next Stop does not read the file again."""
    transcript = tmp_path / "huge.jsonl"
    with open(transcript, "wb") as handle:  # sparse: 2 GB that take no disk
        handle.write(b'{"type": "user", "message": {"role": "user", "content": "')
        handle.truncate(2048 * MB)
    payload = json.dumps({"session_id": "5e55-huge", "cwd": str(project), "hook_event_name": "Stop",
                          "transcript_path": str(transcript)}).encode()
    result, rss = max_rss_of([*cortex_command(), "hook", "stop"], project, payload)
    assert result.returncode == 0
    assert rss < 400 * MB, rss // MB
    assert "skipped 1 line(s) over" in log_of(project), log_of(project)
    with open(transcript, "ab") as handle:  # the session goes on: the long line ends, a memory follows
        handle.write(b'"}}\n' + json.dumps(_tagged("a1", "The ledger uses Postgres row locks; SQLite was rejected.")).encode() + b"\n")
    again, rss = max_rss_of([*cortex_command(), "hook", "stop"], project, payload)
    assert again.returncode == 0 and rss < 400 * MB
    assert [p.name for p in memory_files(project) if "ledger" in p.name], log_of(project)
    assert log_of(project).count("skipped 1 line(s) over") == 1  # the rest of the long line was passed, not counted again


def _tagged(uuid: str, text: str) -> dict[str, Any]:
    return {"type": "assistant", "uuid": uuid, "sessionId": "5e55-huge", "message": {
        "role": "assistant", "id": f"m-{uuid}", "content": [{"type": "text", "text": f"[MEMORY: decision: {text}]"}]}}


def test_an_over_long_line_is_skipped_and_the_lines_around_it_captured(project, tmp_path):
    """Guards new behaviour (today's code read the line whole, and fails here only for the missing log line): a
    20 MB line between two records is skipped, both records kept, even when a Stop comes mid-line."""
    transcript = tmp_path / "t.jsonl"
    first = json.dumps(_tagged("a1", "Invoices are stored in S3 under the tenant prefix.")).encode()
    long_head = json.dumps({"type": "user", "uuid": "u2", "message": {"role": "user", "content": "x" * (20 * MB)}}).encode()
    transcript.write_bytes(first + b"\n" + long_head[: 18 * MB])
    payload = {"session_id": "5e55-long", "cwd": str(project), "transcript_path": str(transcript)}
    assert hook("stop", project, payload).returncode == 0
    with open(transcript, "ab") as handle:
        handle.write(long_head[18 * MB:] + b"\n" + json.dumps(_tagged("a3", "Sessions live in Redis with a one hour TTL.")).encode() + b"\n")
    assert hook("stop", project, payload).returncode == 0
    names = [p.name for p in memory_files(project)]
    assert any("invoices" in n for n in names) and any("sessions" in n for n in names), (names, log_of(project))
    assert log_of(project).count("skipped 1 line(s) over") == 1, log_of(project)


def test_a_config_yaml_that_is_a_link_to_a_fifo_is_refused_unread(project, tmp_path):
    """A repository can commit `.cortex/config.yaml` as a link to /dev/zero (read without end: memory grows until
    the machine kills something) or to a FIFO (read blocks forever): every command and hook hung. A FIFO here, so a
    hang costs a timeout, not the machine's memory."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    config = project / ".cortex" / "config.yaml"
    config.unlink()
    config.symlink_to(fifo)
    payload = {"session_id": "s1", "cwd": str(project), "hook_event_name": "SessionStart", "source": "startup"}
    for args, given in ((["list"], None), (["hook", "session-start"], json.dumps(payload))):
        try:
            done = subprocess.run([*cortex_command(), *args], cwd=project, input=given, capture_output=True,
                                  text=True, timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"cortex {' '.join(args)} read the FIFO and hung")
        assert done.returncode == 0, done.stderr
    said = cortex("status", cwd=project, check=False)
    assert said.stderr.startswith(f"cortex: {config}: not a regular file") and said.stderr.count("\n") == 1
