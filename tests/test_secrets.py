"""Issue 18: no secret reaches a memory or a remote. A planted-secret suite.

Each planted secret goes through the real paths that write or send text: `Store.create` and `events.remember` (what
remember, MCP, consolidation and edit call), capture from a transcript (in process, and the real `cortex hook stop`
for a few), the LLM queue (and, with `capture.llm: on`, the fake `claude` the detached worker runs), AGENTS.md, and
`cortex scan`. After each, no file under `.cortex/` (memories, queue, state) nor AGENTS.md holds any piece of it.
Ordinary text (commit ids in prose, UUIDs, `password_hash`, reading a secret from the environment, a lock file's
sha256, placeholders) must go through untouched. Secrets are made here at random, so this file holds none.
"""

from __future__ import annotations

import json
import random
import re
import string
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cortex.errors import SecretDetected
from cortex.guard import redact, scan_text
from cortex.memory import Memory, file_name, new_id, now_iso, render_new
from cortex.store import Store
from tests.helpers import add_bare_remote, commit_all, cortex, fake_claude, git, hook

_RANDOM = random.Random(18)
_ALNUM = string.ascii_letters + string.digits
_BASE64 = _ALNUM + "+/"


def _token(length: int, alphabet: str = _ALNUM) -> str:
    """Random characters with a digit, a lower- and an upper-case letter (as real keys have)."""
    while True:
        value = "".join(_RANDOM.choice(alphabet) for _ in range(length))
        if any(c.isdigit() for c in value) and any(c.islower() for c in value) and any(c.isupper() for c in value):
            return value


def _hex(length: int) -> str:
    return "".join(_RANDOM.choice("0123456789abcdef") for _ in range(length))


def _pem(kind: str) -> str:
    body = "\n".join(_token(64, _BASE64) for _ in range(8)) + "\n" + _token(40, _BASE64) + "=="
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


def _wrapped(text: str, width: int = 76) -> str:
    return "\n".join(text[i:i + width] for i in range(0, len(text), width))


@dataclass
class Plant:
    text: str  # as a person, the assistant or the model writes it
    secret: str  # the secret itself: no piece of it may be written
    title: str = "Deploy notes for staging"

    @property
    def needles(self) -> list[str]:
        """Every line of the secret (a key's body lines, a wrapped token's pieces), and its last 12 characters."""
        lines = [line.strip() for line in self.secret.splitlines() if len(line.strip()) >= 12 and "-----" not in line]
        return sorted({*lines, self.secret.strip()[-12:]})


OPENAI = "sk-" + "proj-" + _token(74) + "_" + _token(81)
PASSWORD = _token(14)
PLANTED: dict[str, Plant] = {}


def _plant(name: str, text: str, secret: str, **extra: str) -> None:
    PLANTED[name] = Plant(text, secret, **extra)


# A private key, all of it (RSA and OpenSSH): not just the BEGIN line.
for _name, _kind in (("RSA private key", "RSA "), ("OpenSSH private key", "OPENSSH "), ("PKCS#8 private key", "")):
    _key = _pem(_kind)
    _plant(_name, f"The deploy key for the staging box:\n{_key}\nRotate it after the audit.", _key)
# A file name containing "swagger" switched detect-secrets off.
_value = "ghp_" + _token(36)
_plant("swagger-named memory", f"The API explorer sends Authorization: token {_value}", _value,
       title="Swagger UI auth for the internal API")
# `.env` names with a prefix: `\b` does not match after `_`.
for _name in ("DB_PASSWORD", "GITHUB_TOKEN", "MYSQL_ROOT_PASSWORD", "JWT_SECRET", "AWS_SECRET_ACCESS_KEY"):
    _value = _token(32, _BASE64 if _name.startswith("AWS") else _ALNUM)
    _plant(f".env {_name}", f"For local runs put this in .env:\n{_name}={_value}\n", _value)
_value = _hex(128)
_plant(".env SECRET_KEY_BASE", f"Rails needs:\nSECRET_KEY_BASE={_value}\n", _value)
_value = _token(16)
_plant(".env REDIS_URL", f"REDIS_URL=redis://:{_value}@cache.internal:6379/0", _value)
# A hex string in a secret's context is no commit id.
_value = _hex(40)
_plant("hex signing secret", f'The signing secret is "{_value}" (webhooks).', _value)
_value = _hex(32)
_plant("hex api key in prose", f"Use api key {_value} for the sandbox.", _value)
# Provider formats no rule covered.
_plant("OpenAI project key", f"Set the model key to {OPENAI} before the eval.", OPENAI)
_value = "sk-" + "ant-api03-" + _token(93) + "AA"
_plant("Anthropic key", f"ANTHROPIC_API_KEY is {_value} on the runner.", _value)
_value = "AI" + "za" + _token(35)
_plant("Google API key", f"Maps calls use {_value} from the console.", _value)
_value = "npm" + "_" + _token(36)
_plant("npm token", f"//registry.npmjs.org/:_authToken={_value}", _value)
for _prefix in ("xoxb", "xoxp", "xoxa", "xoxr", "xoxs"):
    _value = f"{_prefix}-{_RANDOM.randrange(10**11, 10**12)}-{_RANDOM.randrange(10**12, 10**13)}-{_token(24)}"
    _plant(f"Slack {_prefix}", f"The bot posts with {_value} to #deploys.", _value)
for _prefix in ("sk_live_", "rk_live_"):
    _value = _prefix + _token(24)
    _plant(f"Stripe {_prefix}", f"Billing uses {_value} in production.", _value)
for _prefix in ("ghp_", "gho_", "ghs_"):
    _value = _prefix + _token(36)
    _plant(f"GitHub {_prefix}", f"CI pushes tags with {_value}.", _value)
_value = "github_pat_" + _token(22) + "_" + _token(59)
_plant("GitHub fine-grained PAT", f"The release job uses {_value}.", _value)
_value = "gl" + "pat-" + _token(20)
_plant("GitLab PAT", f"Mirror with {_value} (read_repository).", _value)
_plant("the password is X", f"The staging database password is {PASSWORD}.", PASSWORD)
_plant("the password is a word", "Log in as admin; the password is swordfish.", "swordfish")
_plant("a passphrase mid-sentence", "The password is correct-horse-battery-staple for the staging db.",
       "correct-horse-battery-staple")
# A token split over lines (a long key wrapped at 76 characters, bare and in an assignment).
_plant("wrapped token", "OPENAI_API_KEY=\n" + _wrapped(OPENAI), _wrapped(OPENAI))
_value = "sk-" + "proj-" + _token(150)
_plant("wrapped token in prose", "The eval key, as the console shows it:\n" + _wrapped(_value) + "\nKeep it local.",
       _wrapped(_value))
# A provider's token broken by a short line, where the break falls (issue 40: a `ghp_` token over two lines).
_value = "ghp_" + _token(36)
_plant("token split on a short line", f"CI pushes with {_value[:18]}\n{_value[18:]} for now.",
       f"{_value[:18]}\n{_value[18:]}")
_value = "ghp_" + _token(36)
_plant("token split right after its prefix", f"2026-11-28T09:14:02Z push rejected for token ghp_\n{_value[4:]} (expired)",
       f"ghp_\n{_value[4:]}")
# A line break inside the prefix itself, as a terminal's hard wrap leaves it in a pasted log (issue 40).
_value = "ghp_" + _token(36)
_plant("token split inside its prefix", f"CI pushes tags with gh\n{_value[2:]} since Monday.", f"gh\n{_value[2:]}")
_value = "sk-" + "proj-" + _token(74)
_plant("OpenAI key split before its hyphen", f"Set the eval key to sk\n{_value[2:]} first.", f"sk\n{_value[2:]}")
_value = f"xoxb-{_RANDOM.randrange(10**11, 10**12)}-{_RANDOM.randrange(10**12, 10**13)}-{_token(24)}"
_plant("Slack token split inside its prefix", f"The bot posts with xo\n  {_value[2:]} to #deploys.",
       f"xo\n  {_value[2:]}")
_value = "AKIA" + "".join(_RANDOM.choice(string.ascii_uppercase + string.digits) for _ in range(16))
_plant("AWS key split inside its prefix", f"The runner's access key AK\n{_value[2:]} is read-only.", f"AK\n{_value[2:]}")
CUT_IN_PREFIX = ["token split inside its prefix", "OpenAI key split before its hyphen",
                 "Slack token split inside its prefix", "AWS key split inside its prefix"]
# `password: …` said in a sentence (the assignment rule took the words after it for prose).
_plant("password: X in prose", "Staging password: correct-horse-battery-staple for now, rotate it after the demo.",
       "correct-horse-battery-staple")
# Issue 40's forms, through the real commands (remember, the Stop hook, scan, pre-push).
ISSUE_40 = ["a passphrase mid-sentence", "password: X in prose", "token split on a short line",
            "token split right after its prefix", *CUT_IN_PREFIX]

# What memories are full of: none of it may be refused or changed.
ORDINARY: dict[str, str] = {
    "commit id in prose": "Fixed in commit 1a2b3c4; the regression came with 9fceb02d0ae598e95dc970b74767f19372d61af8.",
    "git show": "Run git show 9fceb02d0ae598e95dc970b74767f19372d61af8 to see the migration.",
    "UUID": "Session 5c1e2f3a-9b8d-4c7e-a6f5-0123456789ab crashed on resume.",
    "password_hash": "The users table keeps password_hash = bcrypt(password) and never the password itself.",
    "reading the secret from the environment": 'SECRET_KEY_BASE = os.environ["SECRET_KEY_BASE"] in config/app.py.',
    "getenv": "token = os.getenv('GITHUB_TOKEN') and api_key = settings.API_KEY are read at startup.",
    "lock file sha256": 'The lock pins hash = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".',
    "npm integrity": '"integrity": "sha512-' + "z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUR" + '=="',
    "Stripe placeholder": "Tests use STRIPE_KEY=sk_live_xxx; the real key is in the vault.",
    "token placeholder": "Export GITHUB_TOKEN=<your-token> first, or API_KEY=${API_KEY} in CI.",
    "prose about passwords": "The password is rotated every 90 days; the token is valid for one hour.",
    "type annotations": "def login(password: str, token: Optional[str] = None) -> bool: ...",
    "token budget": "max_tokens: 4096 and briefing.budget_tokens: 500 keep prompts short.",
    "primary key": "The primary key is user_id; the cache key is the content hash.",
    "key path": "private_key: ~/.ssh/id_ed25519 (never committed).",
    "version": "The SDK token API changed in v2.3.1-beta.",
    "hyphenated prose after password is": "The password is set-by-the-admin daily, and longer-than-eight characters.",
    "password: prose after the colon": "Password: required for admins, optional for the read-only role.",
    "password: a policy": "password: must-be-rotated-monthly for every service account.",
    # Lines broken where a provider's prefix could start: only a token after the joined prefix makes a secret.
    "hard-wrapped prose": "Open it with gh\npr create --fill --base release-2024-11-28; keep s\nk-learn-estimators-v2 "
                          "and hf\n_hub_download(revision=v2) pinned; option A\nKIA2024 is the ticket; xo\nxo from Ann.",
    "code broken over lines": "total = (sk\n-proj_count_2024_total + AK\nIA_2024_FACTOR)\nuse = gh\np_2024_threshold",
}


# ---------------------------------------------------------------- what the checks read


def _cortex_files(project: Path) -> dict[Path, str]:
    """Every file under .cortex/ (memories, queue, state, cache) and AGENTS.md, as text."""
    texts = {}
    for path in [*(project / ".cortex").rglob("*"), project / "AGENTS.md"]:
        try:
            texts[path] = path.read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError):
            continue  # a folder, or a temp file a detached worker just renamed into place
    return texts


def _leaks(plant: Plant, texts: dict[Path, str] | dict[str, str]) -> list[str]:
    return [f"{where}: {needle[:16]}…" for where, text in texts.items() for needle in plant.needles if needle in text]


def _squashed(text: str) -> str:
    """As a file name's slug keeps it: lowercase letters and digits."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _named(plant: Plant, texts: dict[Path, str] | dict[str, str]) -> list[str]:
    """The file names (or messages) that spell a piece of the secret, as a slug would."""
    return [str(where) for where in texts for needle in plant.needles if _squashed(needle) in _squashed(str(where))]


def _line(record_type: str, uuid: str, content: object) -> str:
    message: dict[str, object] = {"role": record_type, "content": content}
    if record_type == "assistant":
        message["id"] = f"msg-{uuid}"
    return json.dumps({"type": record_type, "uuid": uuid, "sessionId": "s-1", "gitBranch": "main", "message": message})


def _transcript(path: Path, plant: Plant) -> Path:
    """A session where the secret is tagged for memory, said in passing, typed by the person, and run in a command."""
    lines = [
        _line("user", "u1", f"Here are the credentials: {plant.text}"),
        _line("assistant", "a1", [{"type": "text", "text": f"[MEMORY: gotcha: {plant.title}\n{plant.text}\n]"}]),
        _line("assistant", "a2", [{"type": "text", "text": f"We decided to keep the staging settings as they are: "
                                                           f"{plant.text}"}]),
        _line("assistant", "a3", [{"type": "tool_use", "id": "t1", "name": "Bash",
                                   "input": {"command": f"deploy --env staging <<'EOF'\n{plant.text}\nEOF"}}]),
        _line("user", "u2", [{"type": "tool_result", "tool_use_id": "t1", "content": f"error: {plant.text}",
                              "is_error": True}]),
        _line("assistant", "a4", [{"type": "tool_use", "id": "t2", "name": "Bash",
                                   "input": {"command": f"deploy --env staging --retry <<'EOF'\n{plant.text}\nEOF"}}]),
        _line("user", "u3", [{"type": "tool_result", "tool_use_id": "t2", "content": "ok"}]),
        _line("assistant", "a5", [{"type": "text", "text": f"<private>{PRIVATE_NOTE}</private> Deployed."}]),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


PRIVATE_NOTE = "the on-call phone number is in my notebook"


def _hand_written(store: Store, type: str, title: str, body: str, **fields: object) -> Memory:
    """A memory file written by hand (as before the guard knew the format): the store's own guard never saw it."""
    stamp = now_iso()
    item = Memory(id=new_id(), type=type, title=title, body=body, confidence=0.9, created=stamp, updated=stamp,
                  source={"kind": "manual"}, **fields)  # type: ignore[arg-type]
    path = store.memories_dir / type / file_name(item)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_new(item), encoding="utf-8")
    item.path = path
    return item


# ---------------------------------------------------------------- the planted secrets, path by path


@pytest.mark.parametrize("name", PLANTED)
def test_the_guard_finds_it_and_redact_takes_all_of_it_out(name):
    plant = PLANTED[name]
    assert scan_text(plant.text), name
    redacted, found = redact(plant.text)
    assert found and "[REDACTED:" in redacted and not _leaks(plant, {"redacted": redacted})
    assert scan_text(redacted) == []


@pytest.mark.parametrize("name", PLANTED)
def test_the_store_refuses_it_through_create_and_remember(project, name):
    from cortex import events

    plant, store = PLANTED[name], Store.locate(project)
    with pytest.raises(SecretDetected) as refused:
        store.create(Memory(id="", type="gotcha", title=plant.title, body=plant.text + "\n"))
    assert refused.value.rule and refused.value.path is not None
    with pytest.raises(SecretDetected):
        events.remember(store, f"{plant.title}.\n{plant.text}")
    assert not _leaks(plant, _cortex_files(project)) and store.list() == []


@pytest.mark.parametrize("name", PLANTED)
def test_capture_redacts_it_from_every_layer(project, tmp_path, name):
    from cortex.capture import capture

    plant, store = PLANTED[name], Store.locate(project)
    report = capture(store, _transcript(tmp_path / "t.jsonl", plant), session="s-1")
    files = _cortex_files(project)
    assert not _leaks(plant, files)
    assert PRIVATE_NOTE not in "".join(files.values())
    assert report.redacted and any("[REDACTED:" in text for text in files.values())  # the note kept, the secret out


@pytest.mark.parametrize("name", PLANTED)
def test_the_llm_queue_holds_it_redacted_and_without_private_text(project, name):
    from cortex.capture import enqueue, events, render_slice

    plant, store = PLANTED[name], Store.locate(project)
    records = [json.loads(line) for line in _transcript(store.state_dir / "t.jsonl", plant).read_text().splitlines()]
    job = enqueue(store, "s-1", render_slice(events(records)), f"branch: main\nnote: {plant.text}")
    assert job is not None
    queued = json.loads(job.read_text(encoding="utf-8"))
    assert "[REDACTED:" in queued["slice"] and "Deployed." in queued["slice"]
    assert PRIVATE_NOTE not in queued["slice"]
    assert not _leaks(plant, {"slice": queued["slice"], "context": queued["context"]})


# Not a token cut at or inside its prefix: its second line alone as a title is a bare random string, a secret to no rule.
@pytest.mark.parametrize("name", [name for name in PLANTED
                                  if name not in ("token split right after its prefix", *CUT_IN_PREFIX)])
def test_agents_md_never_copies_it(project, name):
    from cortex import agents

    plant, store = PLANTED[name], Store.locate(project)
    holding = next(line for line in plant.text.splitlines() if scan_text(line) or any(n in line for n in plant.needles))
    pinned = _hand_written(store, "context", holding.strip()[:150], "Seen in the deploy log.\n", pinned=True)
    # AGENTS.md names no branch (issue 39): it shows the plans that belong to none
    plan = _hand_written(store, "plan", "Rotate the staging credentials", f"- [ ] {plant.text}\n- [ ] redeploy\n",
                         branch=None)
    agents.update(store, create=True)
    section = (project / "AGENTS.md").read_text(encoding="utf-8")
    assert pinned.id in section and plan.id in section  # both shown: only the secret was taken out
    assert not _leaks(plant, {"AGENTS.md": section})


@pytest.fixture(scope="module")
def scanned(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], str, dict[str, Path], object]:
    """`cortex scan` run once over a file per planted secret (the swagger one named swagger.yaml) and once over the
    ordinary texts."""
    folder = tmp_path_factory.mktemp("scan")
    planted = {}
    for n, (name, plant) in enumerate(PLANTED.items()):
        planted[name] = folder / ("swagger.yaml" if "swagger" in name else f"planted-{n}.md")
        planted[name].write_text(f"# {plant.title}\n\n{plant.text}\n", encoding="utf-8")
    result = cortex("scan", *map(str, planted.values()), cwd=folder, check=False)
    ordinary = {}
    for n, (name, text) in enumerate(ORDINARY.items()):
        ordinary[name] = folder / f"swagger-ordinary-{n}.md"
        ordinary[name].write_text(f"# Notes\n\n{text}\n", encoding="utf-8")
    clean = cortex("scan", *map(str, ordinary.values()), cwd=folder, check=False)
    return planted, result.stdout if result.returncode == 1 else "", ordinary, clean


@pytest.mark.parametrize("name", PLANTED)
def test_cortex_scan_reports_it_whatever_the_file_is_called(scanned, name):
    files, stdout, _ordinary, _clean = scanned
    assert f"{files[name]}:" in stdout and "possible secret" in stdout


HOOK_CASES = ["RSA private key", "OpenSSH private key", ".env DB_PASSWORD", "hex signing secret", "wrapped token",
              "Slack xoxb", *ISSUE_40]


@pytest.mark.parametrize("name", HOOK_CASES)
def test_the_real_stop_hook_redacts_it_from_the_transcript_and_the_payload(project, tmp_path, name):
    plant = PLANTED[name]
    transcript = _transcript(tmp_path / "t.jsonl", plant)
    last = f"Done. [MEMORY: context: {plant.title} (from the reply)\n{plant.text}\n]"
    result = hook("stop", project, {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project),
                                    "hook_event_name": "Stop", "last_assistant_message": last})
    assert result.returncode == 0 and result.stdout == ""
    files = _cortex_files(project)
    assert not _leaks(plant, files) and not _named(plant, files)
    titles = {m.title for m in Store.locate(project).list()}
    assert plant.title in titles and f"{plant.title} (from the reply)" in titles  # kept, redacted


def test_with_capture_llm_on_neither_the_queue_nor_the_model_sees_a_secret(project, tmp_path):
    """One session holding every planted secret; the fake model also answers with them (as a model may echo)."""
    script = f"""
import json, os, sys
prompt = sys.stdin.read()
with open({str(tmp_path / 'prompts.txt')!r}, "a") as handle:
    handle.write(prompt + "\\n----\\n")
print(open({str(tmp_path / 'answer.json')!r}).read())
"""
    env = fake_claude(tmp_path / "bin", script) | {"CORTEX_LLM": "on"}  # allowed on this machine
    answer = [{"type": "gotcha", "title": f"Echoed {n}", "content": f"About staging.\n{plant.text}", "confidence": 0.9}
              for n, plant in enumerate(PLANTED.values())]
    (tmp_path / "answer.json").write_text(json.dumps(answer), encoding="utf-8")
    config = project / ".cortex" / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("llm: off", "llm: on"), encoding="utf-8")
    transcript = tmp_path / "t.jsonl"
    lines = [_transcript(tmp_path / f"part-{n}.jsonl", plant).read_text().replace('"uuid": "', f'"uuid": "{n}-')
             for n, plant in enumerate(PLANTED.values())]
    transcript.write_text("".join(lines), encoding="utf-8")
    result = hook("stop", project, {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project)},
                  env=env)
    assert result.returncode == 0
    log = project / ".cortex" / "state" / "cortex.log"
    deadline = time.time() + 90
    while time.time() < deadline and "proposed" not in (log.read_text(encoding="utf-8") if log.exists() else ""):
        time.sleep(0.2)
    prompts = (tmp_path / "prompts.txt").read_text(encoding="utf-8")
    assert "ASSISTANT:" in prompts and "[REDACTED:" in prompts and PRIVATE_NOTE not in prompts
    leaks = [leak for plant in PLANTED.values() for leak in _leaks(plant, {"prompt": prompts, **_cortex_files(project)})]
    assert leaks == [], f"{len(leaks)} leaks: {leaks[:5]}"
    echoed = [m for m in Store.locate(project).list(statuses=()) if m.title.startswith("Echoed")]
    assert echoed and all("[REDACTED:" in m.body for m in echoed)  # written through the guard, redacted


# ---------------------------------------------------------------- the other paths of the issue


def test_cortex_edit_refuses_an_appended_token_and_keeps_the_draft(project, tmp_path):
    store = Store.locate(project)
    item = store.create(Memory(id="", type="context", title="Staging deploys from the release branch",
                               body="Tag first.\n"))
    token = PLANTED["GitHub ghp_"].secret
    editor = tmp_path / "append.py"
    editor.write_text(f"import sys\nopen(sys.argv[1], 'a').write('CI token: {token}\\n')\n", encoding="utf-8")
    before = item.path.read_text(encoding="utf-8")
    result = cortex("edit", item.id, cwd=project, env={"EDITOR": f"{sys.executable} {editor}"}, check=False)
    assert result.returncode == 1
    [error] = result.stderr.strip().splitlines()  # one line: the file, the rule, where the draft is
    assert str(item.path) in error and "GitHub token" in error and "draft is kept" in error
    assert item.path.read_text(encoding="utf-8") == before
    draft = store.state_dir / f"edit-{item.id}.md"
    assert token in draft.read_text(encoding="utf-8")  # the person's work is kept, outside what git tracks
    assert not any(token in text for path, text in _cortex_files(project).items() if path != draft)


def test_a_swagger_named_memory_is_scanned_like_any_other(project):
    plant = PLANTED["swagger-named memory"]
    store = Store.locate(project)
    assert "swagger" in file_name(Memory(id="0" * 12, type="context", title=plant.title, body=""))
    with pytest.raises(SecretDetected):
        store.create(Memory(id="", type="context", title=plant.title, body=plant.text + "\n"))


def _pushed_with_hooks(project: Path, tmp_path: Path) -> None:
    """The store, its git hooks and its pages committed and pushed to a bare remote (a later push is what is tested)."""
    cortex("init", "--git-hooks", cwd=project)
    cortex("project", cwd=project)
    commit_all(project, "cortex store")
    add_bare_remote(project, tmp_path)
    git(project, "push", "-q", "origin", "main")


def test_the_pre_push_hook_stops_a_swagger_named_memory_with_a_key(project, tmp_path):
    plant = PLANTED["swagger-named memory"]
    _pushed_with_hooks(project, tmp_path)
    leaky = _hand_written(Store.locate(project), "context", plant.title, plant.text + "\n")
    assert leaky.path is not None and "swagger" in leaky.path.name
    git(project, "add", str(leaky.path))
    git(project, "commit", "-q", "-m", "api notes")
    refused = git(project, "push", "origin", "main", check=False)
    assert refused.returncode != 0 and "possible secret in" in refused.stderr and "swagger" in refused.stderr


def test_a_huge_reply_is_capped_fast_and_no_memory_body_is_longer_than_the_cap(project, tmp_path):
    """A 50 MB `last_assistant_message` (and the same reply in the transcript): the Stop hook reads at most
    `capture.max_message_chars` of it, and the memory it writes stays under the cap."""
    filler = ("The importer retries each batch with backoff; " * 1_100_000)[:50_000_000]
    reply = f"[MEMORY: decision: Retry failed import batches with backoff]\n[MEMORY: context: The importer log\n{filler}]"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(_line("assistant", "a1", [{"type": "text", "text": reply}]) + "\n", encoding="utf-8")
    result = hook("stop", project, {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project),
                                    "last_assistant_message": reply})
    assert result.returncode == 0
    sizes = [p.stat().st_size for p in (project / ".cortex" / "memories").rglob("*.md")]
    assert all(size < 20_000 + 2_000 for size in sizes), sizes  # the cap, plus the front matter
    assert "Retry failed import batches with backoff" in {m.title for m in Store.locate(project).list()}


def test_a_long_candidate_body_is_cut_to_the_cap(project):
    from cortex.capture import Candidate, write_candidates

    store = Store.locate(project)
    body = "\n".join(f"Step {n}: import the batch and check the counts." for n in range(5000))
    written = write_candidates(store, [Candidate("context", "How the import runs", body + "\n", "llm")], "s-1")
    [item] = [store.get(i) for i in written]
    assert len(item.body) <= 20_000 + 10 and item.body.rstrip().endswith("[…]")


# ---------------------------------------------------------------- ordinary text, untouched


@pytest.mark.parametrize("name", ORDINARY)
def test_ordinary_text_passes_every_path_untouched(project, tmp_path, name):
    from cortex.capture import capture

    text = ORDINARY[name]
    assert scan_text(text) == [] and redact(text) == (text, [])
    store = Store.locate(project)
    made = store.create(Memory(id="", type="context", title="Notes on the build", body=text + "\n"))
    assert made.body == text + "\n"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(_line("assistant", "a1", [{"type": "text", "text": f"[MEMORY: gotcha: Build notes\n{text}\n]"}])
                          + "\n", encoding="utf-8")
    report = capture(store, transcript, session="s-1")
    [note] = [m for m in store.list() if m.title == "Build notes"]
    assert report.redacted == 0 and "[REDACTED" not in note.body
    assert text.split("]")[0] in note.body  # a self-report tag ends at the first "]"


def test_cortex_scan_passes_ordinary_files_named_anything(scanned):
    _planted, _stdout, _ordinary, clean = scanned
    assert clean.returncode == 0 and clean.stdout == ""  # type: ignore[attr-defined]


# ---------------------------------------------------------------- the literal cases of the issue, and speed


@pytest.mark.parametrize("text", [
    "REDIS_URL=redis://:password@host", "DB_PASSWORD=hunter2hunter2", "MYSQL_ROOT_PASSWORD=rootpass1",
    "JWT_SECRET=s3cr3t-jwt", "SECRET_KEY_BASE=" + "ab12" * 16, "export GITHUB_TOKEN=abcdef123456",
])
def test_the_env_lines_of_the_issue(text):
    assert scan_text(text)


@pytest.mark.parametrize("name", ["the password is X", "GitHub ghp_", "Anthropic key", *ISSUE_40])
def test_a_refused_memory_never_spells_the_secret_in_its_message(project, name):
    """Issue 40: the refusal named the file it would have written, and the file name (the title's slug) held
    the secret. The slug names the secret's kind instead; nothing is written."""
    plant = PLANTED[name]
    result = cortex("remember", plant.text, cwd=project, check=False)
    assert result.returncode != 0 and "looks like a secret" in result.stderr, result.stderr
    said = result.stdout + result.stderr  # a slug lowercases and drops punctuation: compared squashed
    assert not [needle for needle in plant.needles if _squashed(needle) in _squashed(said)], said
    assert not list((project / ".cortex" / "memories").rglob("*.md"))


@pytest.mark.parametrize("name", ISSUE_40)
def test_the_pre_push_hook_stops_issue_40s_forms_and_never_prints_them(project, tmp_path, name):
    """A memory file written by hand (the write guard never saw it) holding the secret: the push is refused, and the
    refusal names the file and line, never the secret."""
    plant = PLANTED[name]
    _pushed_with_hooks(project, tmp_path)
    leaky = _hand_written(Store.locate(project), "context", plant.title, plant.text + "\n")
    git(project, "add", str(leaky.path))
    git(project, "commit", "-q", "-m", "deploy notes")
    refused = git(project, "push", "origin", "main", check=False)
    assert refused.returncode != 0 and "possible secret in" in refused.stderr, refused.stderr
    said = refused.stdout + refused.stderr
    assert not [n for n in plant.needles if _squashed(n) in _squashed(said)], said

