"""The secret guard: real keys, tokens and passwords are found; the hex ids and names cortex writes are not."""

from __future__ import annotations

import pytest
import yaml

from cortex.guard import scan_text
from cortex.memory import Link, Memory
from cortex.store import Store
from tests.helpers import REPO_ROOT, cortex

# Common formats, as they appear in notes (documented example values or made-up ones of the right shape).
SECRETS = {
    "AWS access key id": "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
    "AWS secret key": 'aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"',
    "GitHub token": "the CI token is ghp_1234567890abcdefghijklmnopqrstuvwxyzAB",
    "GitHub token in a clone URL": "git clone https://ghp_1234567890abcdefghijklmnopqrstuvwxyzAB@github.com/o/r.git",
    "GitLab token": "glpat-Ab3dEf6hIj9kLm2nOp5q",
    "Slack bot token": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "Slack webhook": "https://hooks.slack.com/services/T01234567/B01234567/Ab3dEf6hIj9kLm2nOp5qRs8t",
    "Stripe live key": "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "SendGrid key": "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",
    "npm token": "//registry.npmjs.org/:_authToken=npm_abcdefghijklmnopqrstuvwxyz0123456789",
    "RSA private key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
    "OpenSSH private key": "-----BEGIN OPENSSH PRIVATE KEY-----",
    "PKCS#8 private key": "-----BEGIN PRIVATE KEY-----",
    "JWT": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIy"
           "fQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "password in a URL": "postgres://admin:s3cretP4ss@db.internal:5432/app",
    "Azure storage key": "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f"
                         "Gh3iJk6lMn9oPq2rSt5uVw8xYz1aBc4dEf7gHi0jKl3mNo==;EndpointSuffix=core.windows.net",
    ".env password": "PASSWORD=correct-horse-battery-staple",
    "exported password": "export DATABASE_PASSWORD=hunter2hunter2",
    "YAML api key": "api_key: 9f8e7d6c5b4a39281706",
    "JSON client secret": '{"client_secret": "Zx9fQ2mLp0aVr7Tq"}',
    # Formats only detect-secrets knew until cortex dropped it (its import cost every read a third of a second).
    "Discord bot token": "bot token MTA4NzY1NDMyMTA5ODc2NTQzMg.GxYz12.abcdefghijklmnopqrstuvwxyz0123",
    "Mailchimp key": "list key 0123456789abcdef0123456789abcdef-us14",
    "IBM Cloud IAM key": "ibm_cloud_iam_key: abcdEFGH1234ijklMNOP5678qrstUVWX9012yzABcd34",
}

# What memories are full of and must never be mistaken for a secret.
ORDINARY = {
    "commit sha in prose": "Fixed in 3f9a1c07d2e4b5a6c7d8e9f00112233445566778 and merged to main.",
    "quoted commit sha": 'commit = "3f9a1c07d2e4b5a6c7d8e9f00112233445566778"',
    "short sha": 'see "3f9a1c0" for the fix',
    "UUID": 'session "5c1e2f3a-9b8d-4c7e-a6f5-0123456789ab" crashed',
    "upper-case UUID": 'request_id: "5C1E2F3A-9B8D-4C7E-A6F5-0123456789AB"',
    # A session id ending in ten digits, then a colon and another id: a Telegram bot token pattern without its
    # `AA` (`\d{8,10}:[0-9A-Za-z_-]{35}`) matched it, and a captured memory keyed by its session was refused (e2e).
    "two UUIDs joined by colons": "  key: report:5c1e2f3a-9b8d-4c7e-a6f5-012345678901:7d4e2f3a-9b8d-4c7e-a6f5-0123456789ab",
    "memory id": 'supersedes "3f9a1c07d2e4"',
    "identifier naming a password": "password_reset_token_ttl = 3600",
    "identifier naming tokens": "max_tokens: 4096",
    "prose about passwords": "The password is rotated every 90 days; ask in #ops for access.",
    "where a key lives": "The deploy key lives in the vault under ops/deploy; never paste it here.",
    "angle-bracket placeholder": "PASSWORD=<your password>",
    "variable placeholder": "API_KEY=${API_KEY}",
    "x placeholder": "token=xxxxxxxx",
    "stars placeholder": 'secret: "********"',
    "what cortex redacted": "password: [REDACTED:password]",
    "a path to a token file": "token_file: ~/.config/gh/hosts.yml",
}


@pytest.mark.parametrize("text", SECRETS.values(), ids=SECRETS.keys())
def test_secrets_of_common_formats_are_found(text):
    assert scan_text(text)


@pytest.mark.parametrize("text", ORDINARY.values(), ids=ORDINARY.keys())
def test_ordinary_ids_names_and_placeholders_pass(text):
    assert scan_text(text) == []


def test_a_finding_names_its_line_and_kind():
    text = "# Deploying\n\nUse the release branch.\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\nThen tag it.\n" \
           "PASSWORD=correct-horse-battery-staple\n"
    findings = scan_text(text)
    assert {f.line for f in findings} == {4, 6}
    assert ("AWS Access Key" in {f.kind for f in findings if f.line == 4})
    assert any("password" in f.kind.lower() for f in findings if f.line == 6)


def test_the_files_cortex_writes_itself_pass_the_guard(repo):
    """Ids, commit shas, session UUIDs, links and timestamps fill every memory file: none may trip the guard."""
    store = Store.init(repo / ".cortex")
    first = store.create(Memory(id="", type="decision", title="Use SQLite for the local cache",
                                body="Decided in 4a4529c5d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6.\n"))
    second = store.create(Memory(
        id="", type="gotcha", title="WAL files must be ignored in the CI cache", body="Seen twice.\n",
        source={"kind": "transcript", "session": "5c1e2f3a-9b8d-4c7e-a6f5-0123456789ab", "layer": "self-report",
                "commit": "3f9a1c07d2e4b5a6c7d8e9f00112233445566778"},
        links=[Link("relates_to", first.id, 0.42)]))
    for item in (first, second):
        assert scan_text(item.path.read_text(encoding="utf-8")) == []


def test_scan_command_and_pre_commit_hooks_file(tmp_path):
    clean, dirty = tmp_path / "clean.md", tmp_path / "dirty.md"
    clean.write_text("Rotate keys every 90 days.\n", encoding="utf-8")
    dirty.write_text("notes\nSECRET_KEY=s3cr3t-value-here\n", encoding="utf-8")
    assert cortex("scan", str(clean), cwd=tmp_path).returncode == 0
    result = cortex("scan", str(clean), str(dirty), cwd=tmp_path, check=False)
    assert result.returncode == 1 and f"{dirty}:2: possible secret" in result.stdout
    assert str(clean) not in result.stdout
    hooks = yaml.safe_load((REPO_ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert {h["id"]: h["entry"] for h in hooks} == {"cortex-projections": "cortex project --check",
                                                  "cortex-secrets": "cortex scan"}
