"""The secret guard: nothing that looks like a key, token or password may reach a pushed memory.

Two layers:

- detect-secrets (Yelp's maintained detector, its default plugins and
  filters) scans the text as a file: AWS, GitHub, Slack, Stripe and other
  token formats, private key blocks, JWTs, high-entropy quoted strings;
- cortex's own rule for `.env`-style assignments (`PASSWORD=…`,
  `api_key: …`), which detect-secrets does not report in markdown.

Used by the pre-push hook (and by capture, before anything is written).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

_ASSIGNMENT = re.compile(
    r"""(?ix)\b(password|passwd|pwd|passphrase|secret|secret[_-]?key|token|auth[_-]?token|access[_-]?token
    |api[_-]?key|apikey|access[_-]?key|private[_-]?key|client[_-]?secret)\s*[:=]\s*["']?([^\s"'`]{6,})"""
)
_GIT_LIKE_HEX = re.compile(r"[0-9a-f]{7,40}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PLACEHOLDER = re.compile(r"(?i)^(<[^>]*>|\$\{?\w+\}?|\*+|x{4,}|\.\.\.|changeme|example|placeholder|redacted.*|\[redacted.*)$")


@dataclass(frozen=True)
class Finding:
    line: int  # 1-based
    kind: str


def scan_text(text: str, name: str = "memory.md") -> list[Finding]:
    """Every likely secret in `text`, by line."""
    findings = set()
    for number, line in enumerate(text.splitlines(), start=1):
        for match in _ASSIGNMENT.finditer(line):
            if not _PLACEHOLDER.match(match.group(2)):
                findings.add(Finding(number, f"{match.group(1).lower()} assignment"))
    from detect_secrets import SecretsCollection
    from detect_secrets.settings import default_settings

    with tempfile.TemporaryDirectory(prefix="cortex-guard-") as folder:
        path = Path(folder) / Path(name).name
        path.write_text(text, encoding="utf-8")
        collection = SecretsCollection()
        with default_settings():
            collection.scan_file(str(path))
        for secrets in collection.data.values():
            for secret in secrets:
                value = getattr(secret, "secret_value", None) or ""
                if secret.type == "Hex High Entropy String" and _GIT_LIKE_HEX.fullmatch(value):
                    continue  # a commit sha, content hash or memory id: cortex writes these itself
                findings.add(Finding(int(secret.line_number), str(secret.type)))
    return sorted(findings, key=lambda f: (f.line, f.kind))
