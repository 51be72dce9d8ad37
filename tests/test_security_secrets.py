"""Issue 37, items 6 and 10: one secret rule for everything cortex shows or sends, in every encoding.

A person commits memory files by hand holding five kinds of secret (a GitHub token, an AWS key pair, a Slack token,
a PEM private key, an `api_key = "…"` assignment): the write guard never saw them. None of them may reach the
SessionStart briefing (the real hook), the prompt hook's context, `cortex recall` and `show`, the MCP answers,
`cortex report`, `cortex review` (printed and posted), or the log: each names the secret (`[REDACTED:<kind>]`),
never shows it. `cortex review --post` edits only a comment its own identity wrote. Pre-push and `cortex scan` read
UTF-16 and UTF-32 (with or without a BOM, either byte order), and a private key's bare base64 body (no BEGIN/END
lines) is a secret: refused by the guard, stopped at push, and never in a slice the LLM reads (a fake `claude`
records its stdin). Secrets are made here at random, so this file holds none.
"""

from __future__ import annotations

import base64
import json
import os
import random
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cortex.memory import Memory, new_id, now_iso, render_new
from cortex.review import MARKER
from cortex.store import Store
from tests.helpers import commit_all, cortex, fake_claude, git, hook, wait_for
from tests.test_review import TOKEN, _Forge, _github_env
from tests.test_prepush import pushed  # noqa: F401 (a fixture)
from tests.test_secrets import _BASE64, _token

_RANDOM = random.Random(37)


def _key_body() -> list[str]:
    """The base64 lines of a PKCS#8 RSA private key as `openssl genpkey` writes it: its real DER head (SEQUENCE,
    version 0, rsaEncryption), random bytes after."""
    head = bytes.fromhex("308204bd020100300d06092a864886f70d0101010500048204a7308204a30201000282010100")
    der = head + bytes(_RANDOM.randrange(256) for _ in range(1217 - len(head)))
    text = base64.b64encode(der).decode()
    return [text[i:i + 64] for i in range(0, len(text), 64)]


@dataclass
class Secret:
    kind: str
    title: str  # what a person typed as the title: the briefing's line
    body: str
    needles: list[str]  # pieces of the secret: none may be shown or sent
    summary: str = ""  # a `summary:` written by hand (what the briefing shows after the title)
    query: str = ""  # words that find it


GITHUB = "ghp_" + _token(36)
AWS_ID = "AKIA" + "".join(_RANDOM.choice(string.ascii_uppercase + string.digits) for _ in range(16))
AWS_SECRET = _token(40, _BASE64)
SLACK = f"xoxb-{_RANDOM.randrange(10**11, 10**12)}-{_RANDOM.randrange(10**12, 10**13)}-{_token(24)}"
PEM_LINES = [_token(64, _BASE64) for _ in range(8)] + [_token(40, _BASE64) + "=="]
API_KEY = _token(32)
KEY_BODY = _key_body()


def _pieces(secret: str) -> list[str]:
    return [secret, secret[:16], secret[-12:]]


FOLDED_PEM = "-----BEGIN RSA PRIVATE KEY----- " + " ".join(PEM_LINES) + " -----END RSA PRIVATE KEY-----"
SECRETS = [
    Secret("GitHub token", f"CI pushes release tags with {GITHUB}",
           f"CI pushes tags with {GITHUB} until the bot account exists.\n", _pieces(GITHUB),
           query="CI release tags push"),
    Secret("AWS keys", f"Staging uploads: AWS_ACCESS_KEY_ID={AWS_ID} AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
           f"The uploader reads these:\nAWS_ACCESS_KEY_ID={AWS_ID}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\n",
           _pieces(AWS_ID) + _pieces(AWS_SECRET), query="staging uploads AWS"),
    Secret("Slack token", f"The deploy bot posts with {SLACK}",
           f"The bot posts with {SLACK} to #deploys; it has chat:write only.\n", _pieces(SLACK),
           query="deploy bot posts"),
    Secret("PEM private key", "The staging box deploy key",
           "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(PEM_LINES) + "\n-----END RSA PRIVATE KEY-----\n"
           "Rotate it after the audit.\n", [p for line in PEM_LINES for p in (line[:16], line[-16:])],
           summary=f"The key: {FOLDED_PEM}", query="staging box deploy key"),
    Secret("api_key assignment", f'Payments sandbox: api_key = "{API_KEY}"',
           f'Sandbox config: api_key = "{API_KEY}" (not the live one).\n', _pieces(API_KEY),
           query="payments sandbox api key"),
]


def _leaks(texts: dict[str, str]) -> list[str]:
    return [f"{where}: {secret.kind} ({needle[:8]}…)" for where, text in texts.items() for secret in SECRETS
            for needle in secret.needles if needle in text]


def _hand_commit(project: Path, message: str = "notes by hand") -> list[Memory]:
    """The five memories written as files by a person (no `remember`, so no write guard), pinned, committed."""
    store = Store.locate(project)
    written = []
    for secret in SECRETS:
        stamp = now_iso()
        item = Memory(id=new_id(), type="gotcha", title=secret.title, body=secret.body, confidence=0.9, priority=9,
                      pinned=True, created=stamp, updated=stamp, source={"kind": "manual"}, summary=secret.summary)
        path = store.memories_dir / "gotcha" / f"hand-written-{item.id}.md"  # named by the person
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_new(item), encoding="utf-8")
        item.path = path
        written.append(item)
    commit_all(project, message)
    return written


# ---------------------------------------------------------------- item 6: every channel


def test_the_session_start_briefing_names_hand_committed_secrets_never_shows_them(project):
    planted = _hand_commit(project)
    result = hook("session-start", project, {"session_id": "", "transcript_path": "/dev/null", "cwd": str(project),
                                             "hook_event_name": "SessionStart", "source": "startup"})
    assert result.returncode == 0, result.stderr
    context = json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]
    assert _leaks({"briefing": context}) == []
    assert all(item.id in context for item in planted), context  # every memory shown: only its secret taken out
    assert "[REDACTED:" in context


def test_the_prompt_hook_context_names_hand_committed_secrets_never_shows_them(project):
    planted = _hand_commit(project)
    prompts = [f"what do our notes say about the {secret.query}" for secret in SECRETS]
    contexts = {}
    for n, prompt in enumerate(prompts):
        result = hook("prompt", project, {"session_id": f"p{n}", "cwd": str(project),
                                          "hook_event_name": "UserPromptSubmit", "prompt": prompt})
        assert result.returncode == 0, result.stderr
        contexts[prompt] = json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"] if result.stdout else ""
    assert _leaks(contexts) == []
    shown = [item.id for item in planted if any(item.id in text for text in contexts.values())]
    assert len(shown) >= 3, contexts  # the memories are injected; what they say of a secret is not


def test_recall_and_show_name_hand_committed_secrets_never_show_them(project):
    planted = _hand_commit(project)
    outputs = {}
    for item, secret in zip(planted, SECRETS):
        outputs[f"recall {secret.kind}"] = cortex("recall", secret.query, "--keyword", cwd=project).stdout
        outputs[f"recall --json {secret.kind}"] = cortex("recall", secret.query, "--keyword", "--json",
                                                         cwd=project).stdout
        for form in ([], ["--json"], ["--raw"]):
            outputs[f"show {' '.join(form)} {secret.kind}"] = cortex("show", item.id, *form, cwd=project).stdout
    assert _leaks(outputs) == []
    assert all(item.id in outputs[f"recall {s.kind}"] for item, s in zip(planted, SECRETS))
    assert "[REDACTED:" in outputs["show  GitHub token"]


def _pythonpath() -> dict[str, str]:
    """The server's environment is built from scratch: keep the code under test the one it runs."""
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}


def test_mcp_answers_name_hand_committed_secrets_never_send_them(project, tmp_path):
    from anyio.from_thread import start_blocking_portal

    from tests.helpers import cortex_command
    from tests.test_mcp import Client, connect, server_env

    planted = _hand_commit(project)
    command = cortex_command()
    answers: dict[str, str] = {}
    with start_blocking_portal() as portal:
        with connect(portal, command[0], [*command[1:], "mcp"], project, server_env(tmp_path / "home") | _pythonpath()) as session:
            client = Client(portal, session, project, {})
            for item, secret in zip(planted, SECRETS):
                found = client.raw("cortex_search", query=secret.query)
                answers[f"search {secret.kind}"] = found.content[0].text + json.dumps(found.structured_content)
                got = client.raw("cortex_get_memory", id=item.id)
                answers[f"get {secret.kind}"] = got.content[0].text + json.dumps(got.structured_content)
                answers[f"resource {secret.kind}"] = client.read(f"cortex://memory/{item.id}")
            briefing = client.raw("cortex_get_briefing")
            answers["briefing"] = briefing.content[0].text
    assert _leaks(answers) == []
    assert all(item.id in answers[f"get {s.kind}"] for item, s in zip(planted, SECRETS))


def test_the_report_names_hand_committed_secrets_never_shows_them(project):
    planted = _hand_commit(project)
    page = cortex("report", "-o", "-", cwd=project).stdout
    data = cortex("report", "--json", cwd=project).stdout
    assert _leaks({"report.html": page, "report --json": data}) == []
    assert all(item.id in data for item in planted) and "[REDACTED:" in data


def test_log_lines_name_a_secret_never_write_it(project):
    store = Store.locate(project)
    for secret in SECRETS:
        store.log(f"capture: could not parse the reply: {secret.body}")
    log = (store.state_dir / "cortex.log").read_text(encoding="utf-8")
    assert _leaks({"cortex.log": log}) == []
    assert log.count("capture: could not parse the reply") == len(SECRETS) and "[REDACTED:" in log


@pytest.fixture
def forge():
    server = _Forge()
    yield server
    server.close()


@pytest.fixture
def reviewed(project: Path) -> Path:
    """main with one commit, and a branch `feature` that hand-commits the five memories."""
    commit_all(project, "base")
    git(project, "checkout", "-q", "-b", "feature")
    _hand_commit(project, "the secrets, by hand")
    return project


def test_review_and_the_posted_comment_name_secrets_never_show_them(reviewed, forge, tmp_path):
    printed = cortex("review", "main..feature", cwd=reviewed).stdout
    as_json = cortex("review", "main..feature", "--json", cwd=reviewed).stdout
    posted = cortex("review", "main..feature", "--post", cwd=reviewed, env=_github_env(forge, tmp_path))
    [comment] = forge.threads["/repos/acme/shop/issues/7/comments"]
    assert _leaks({"review": printed, "review --json": as_json, "posted comment": comment["body"]}) == []
    assert "#### New gotchas" in comment["body"] and "Remove it and rotate it" in comment["body"]
    assert "[REDACTED:" in comment["body"] and comment["body"] == posted.stdout


def test_post_never_edits_a_comment_another_author_started_with_the_marker(reviewed, forge, tmp_path):
    thread = "/repos/acme/shop/issues/7/comments"
    theirs = {"id": 1, "body": f"{MARKER}\nI wrote this myself.", "user": {"login": "mallory", "type": "User"}}
    forge.threads[thread] = [dict(theirs)]
    env = _github_env(forge, tmp_path)
    first = cortex("review", "main..feature", "--post", cwd=reviewed, env=env)
    assert "review comment created" in first.stderr
    assert forge.threads[thread][0] == theirs and len(forge.threads[thread]) == 2
    ours = forge.threads[thread][1]
    assert ours["user"]["login"] == "github-actions[bot]"

    forge.requests.clear()
    cortex("review", "main..feature", "--post", "--limit", "2", cwd=reviewed, env=env)  # another text: ours updated
    changed = [(r["method"], r["path"]) for r in forge.requests if r["method"] != "GET"]
    assert changed == [("PATCH", f"/repos/acme/shop/issues/comments/{ours['id']}")]
    assert forge.threads[thread][0] == theirs

    forge.github_login = "release-bot"  # a personal token, which may read GET /user: the same rule by its login
    forge.threads[thread] = [dict(theirs)]
    cortex("review", "main..feature", "--post", cwd=reviewed, env=env)
    assert forge.threads[thread][0] == theirs and forge.threads[thread][1]["user"]["login"] == "release-bot"


def test_post_on_gitlab_never_edits_a_note_another_author_started_with_the_marker(reviewed, forge):
    notes = "/api/v4/projects/42/merge_requests/3/notes"
    theirs = {"id": 5, "body": f"{MARKER}\nmine", "author": {"id": 12, "username": "mallory"}}
    forge.threads[notes] = [dict(theirs)]
    env = {"GITLAB_CI": "true", "GITHUB_ACTIONS": "", "CORTEX_GITLAB_TOKEN": TOKEN,
           "CI_API_V4_URL": f"{forge.url}/api/v4", "CI_PROJECT_ID": "42", "CI_MERGE_REQUEST_IID": "3"}
    cortex("review", "main..feature", "--post", cwd=reviewed, env=env)
    assert forge.threads[notes][0] == theirs and len(forge.threads[notes]) == 2
    assert forge.threads[notes][1]["author"]["id"] == 77


# ---------------------------------------------------------------- item 10: encodings and bare key bodies

ENCODINGS = {  # name -> how the file's bytes are made
    "utf-16le-bom": lambda text: b"\xff\xfe" + text.encode("utf-16-le"),  # PowerShell 5's `>`
    "utf-16be-bom": lambda text: b"\xfe\xff" + text.encode("utf-16-be"),
    "utf-16le": lambda text: text.encode("utf-16-le"),
    "utf-16be": lambda text: text.encode("utf-16-be"),
    "utf-32le-bom": lambda text: b"\xff\xfe\x00\x00" + text.encode("utf-32-le"),
    "utf-32be": lambda text: text.encode("utf-32-be"),
}
NOTE = f"Deploy notes\r\n\r\nCI pushes tags with {GITHUB}.\r\n"


def test_pre_push_stops_a_token_in_utf16_and_utf32_files(pushed, project, tmp_path):
    notes = project / ".cortex" / "notes"
    notes.mkdir()
    for name, encode in ENCODINGS.items():
        (notes / f"deploy-{name}.txt").write_bytes(encode(NOTE))
    git(project, "add", ".cortex/notes")
    git(project, "commit", "-q", "-m", "notes from PowerShell")
    refused = git(project, "push", "origin", "main", check=False)
    assert refused.returncode != 0
    missed = [name for name in ENCODINGS
              if f"possible secret in .cortex/notes/deploy-{name}.txt:3 (GitHub token)" not in refused.stderr]
    assert missed == [], refused.stderr


def test_cortex_scan_finds_a_token_in_utf16_and_utf32_files(tmp_path):
    files = {}
    for name, encode in ENCODINGS.items():
        files[name] = tmp_path / f"deploy-{name}.txt"
        files[name].write_bytes(encode(NOTE))
    result = cortex("scan", *map(str, files.values()), cwd=tmp_path, check=False)
    assert result.returncode == 1
    missed = [name for name, path in files.items() if f"{path}:3: possible secret (GitHub token)" not in result.stdout]
    assert missed == [], result.stdout
    clean = tmp_path / "clean.txt"
    clean.write_bytes(ENCODINGS["utf-16le-bom"]("Deploy notes\r\nTag first, then push.\r\n"))
    assert cortex("scan", str(clean), cwd=tmp_path).stdout == ""


def test_a_bare_private_key_body_is_a_secret_to_scan_the_guard_and_pre_push(project, tmp_path, request):
    body = "The deploy key (pasted without its armour):\n" + "\n".join(KEY_BODY) + "\nRotate it.\n"
    cut = "\n".join(KEY_BODY[3:]) + "\n"  # its middle only: no recognisable start
    (tmp_path / "key.txt").write_text(body, encoding="utf-8")
    (tmp_path / "cut.txt").write_text(cut, encoding="utf-8")
    scanned = cortex("scan", str(tmp_path / "key.txt"), str(tmp_path / "cut.txt"), cwd=tmp_path, check=False)
    assert scanned.returncode == 1
    assert f"{tmp_path / 'key.txt'}:2: possible secret (private key)" in scanned.stdout
    assert f"{tmp_path / 'cut.txt'}:1: possible secret (private key)" in scanned.stdout

    refused = cortex("remember", body, "--title", "The deploy key", cwd=project, check=False)
    assert refused.returncode != 0 and "private key" in refused.stderr and Store.locate(project).list() == []

    request.getfixturevalue("pushed")  # the hooks installed, main pushed, only now
    (project / ".cortex" / "notes").mkdir()
    (project / ".cortex" / "notes" / "key.md").write_text(body, encoding="utf-8")
    git(project, "add", ".cortex/notes")
    git(project, "commit", "-q", "-m", "the key, by hand")
    push = git(project, "push", "origin", "main", check=False)
    assert push.returncode != 0 and "possible secret in .cortex/notes/key.md:2 (private key)" in push.stderr


def _line(record_type: str, uuid: str, content: object) -> str:
    message: dict[str, object] = {"role": record_type, "content": content}
    if record_type == "assistant":
        message["id"] = f"msg-{uuid}"
    return json.dumps({"type": record_type, "uuid": uuid, "sessionId": "s-1", "gitBranch": "main", "message": message})


def test_a_bare_private_key_body_never_reaches_the_llm_slice(project, tmp_path):
    """The Stop hook with `capture.llm: on`: the fake `claude` the worker runs records the prompt it reads."""
    prompts = tmp_path / "prompts.txt"
    script = f"""
import sys
prompt = sys.stdin.read()
with open({str(prompts)!r}, "a") as handle:
    handle.write(prompt + "\\n----\\n")
print("[]")
"""
    env = fake_claude(tmp_path / "bin", script) | {"CORTEX_LLM": "on"}  # this machine allows what the repo asks
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("llm: off", "llm: on"), encoding="utf-8")
    key = "\n".join(KEY_BODY)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("\n".join([
        _line("user", "u1", f"Here is the deploy key body for the staging box:\n{key}\nPlease set up the deploy."),
        _line("assistant", "a1", [{"type": "text", "text": f"I will use this key:\n{key}\nThe deploy is set up now."}]),
        _line("user", "u2", "Thanks. Remember that staging deploys go through the bastion host."),
        _line("assistant", "a2", [{"type": "text", "text": "Noted: staging deploys go through the bastion host."}]),
    ]) + "\n", encoding="utf-8")
    result = hook("stop", project, {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project),
                                    "hook_event_name": "Stop"}, env=env)
    assert result.returncode == 0, result.stderr
    assert wait_for(lambda: prompts.exists() and "----" in prompts.read_text(encoding="utf-8"), 90)
    sent = prompts.read_text(encoding="utf-8")
    assert [line[:16] for line in KEY_BODY if line[:16] in sent or line[-16:] in sent] == []
    assert "bastion host" in sent and "[REDACTED:private key]" in sent  # the slice sent, the key named in it


def test_a_hand_committed_secret_is_not_copied_into_decisions_md(project):
    """decisions.md is regenerated from the memories: a token a person committed by hand in a decision's body
    stays in that one file (the pre-push hook names it), never copied into the page."""
    token = "ghp_" + "Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3Vb5N"
    folder = project / ".cortex" / "memories" / "decision"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ci-token-4c1d2e3f4a5b.md").write_text(
        "---\nid: 4c1d2e3f4a5b\ntype: decision\ntitle: CI pushes with a bot token\nstatus: active\n"
        "created: 2026-11-01T00:00:00Z\nupdated: 2026-11-01T00:00:00Z\n---\n"
        f"We push from CI with the bot's token {token} so releases are signed by the bot.\n", encoding="utf-8")
    cortex("project", cwd=project)
    page = (project / ".cortex" / "decisions.md").read_text(encoding="utf-8")
    assert "CI pushes with a bot token" in page and token not in page
