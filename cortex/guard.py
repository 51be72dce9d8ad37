"""The secret guard: nothing that looks like a key, token or password may reach a memory or a remote.

One scanner for every path that writes, shows or sends text. It reads the text and nothing else (no file
name can switch a rule off), and a finding covers the whole secret over all its lines so `redact` takes all
of it out. `redacted(text)` is the one rule for everything shown or sent. docs/security.md.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeVar, cast

_Data = TypeVar("_Data")


@dataclass(frozen=True)
class Finding:
    line: int  # 1-based, where the secret starts
    kind: str
    start: int = field(default=0, compare=False)  # the secret's span in the scanned text (end exclusive)
    end: int = field(default=0, compare=False)


def scan_text(text: str) -> list[Finding]:
    """Every likely secret in `text`, by line."""
    spans = _spans(text)
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    found = [Finding(bisect_right(starts, start), kind, start, end) for start, end, _rank, kind in spans]
    return sorted(found, key=lambda f: (f.line, f.kind, f.start))  # two secrets on a line are two findings


def redact(text: str) -> tuple[str, list[Finding]]:
    """`text` with each secret, all of its lines, replaced by `[REDACTED:<kind>]`; and what was found."""
    findings = scan_text(text)
    out, last = [], 0
    for finding in sorted(findings, key=lambda f: f.start):
        out.append(text[last:finding.start])
        out.append(f"[REDACTED:{finding.kind}]")
        last = finding.end
    out.append(text[last:])
    return "".join(out), findings


def redacted(text: str) -> str:
    """The one secret rule for everything cortex shows or sends (the briefing, prompt context, MCP answers, recall,
    `show`, review comments, the report, log lines, LLM prompts): `text` with every secret named, never shown."""
    return redact(text)[0] if len(text) >= _SHORTEST else text


_SHORTEST = 8  # no rule finds a secret in fewer characters (a name, a sign and a 6-character value at least)


def redacted_data(data: _Data) -> _Data:
    """`data` (JSON-like: dicts, lists, tuples, strings, numbers) with every string passed through `redacted`;
    keys are kept as they are (cortex's own field names)."""
    return cast(_Data, _redacted_value(data))


def _redacted_value(value: Any) -> Any:
    if isinstance(value, str):
        return redacted(value)
    if isinstance(value, dict):
        return {key: _redacted_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted_value(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_redacted_value(item) for item in value)
    return value


# ---------------------------------------------------------------- bytes in any encoding git can hold

_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xef\xbb\xbf", "utf-8-sig"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))  # UTF-32LE's BOM starts with UTF-16LE's: first


def decode(data: bytes) -> str:
    """A file's bytes as text for the scan: by its BOM (UTF-8, UTF-16, UTF-32, either byte order); without one,
    UTF-16 or UTF-32 told by where its NUL bytes fall (ASCII in UTF-16LE: every odd byte); else UTF-8. A file
    with NULs in no such pattern is read with them dropped, so text in a mixed or cut file is still seen."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(encoding, errors="replace")
    if b"\0" not in data:
        return data.decode("utf-8", errors="replace")
    wide = _wide_encoding(data)
    if wide is not None:
        return data.decode(wide, errors="replace")
    return data.replace(b"\0", b"").decode("utf-8", errors="replace")


def _wide_encoding(data: bytes) -> str | None:
    """UTF-16 or UTF-32 (and its byte order) from the NUL bytes of a sample: in mostly-ASCII text each character
    has its NULs at the same places."""
    sample = data[:8192]
    sample = sample[:len(sample) - len(sample) % 4]
    if len(sample) < 4:
        sample = data[:len(data) - len(data) % 2]
        if len(sample) < 2:
            return None
        return "utf-16-le" if sample[1] == 0 and sample[0] != 0 else "utf-16-be" if sample[0] == 0 else None
    quarters = len(sample) // 4
    nul = [sum(1 for i in range(k, len(sample), 4) if sample[i] == 0) / quarters for k in range(4)]
    high, low = 0.6, 0.1
    if nul[1] >= high and nul[2] >= high and nul[3] >= high and nul[0] <= low:
        return "utf-32-le"
    if nul[0] >= high and nul[1] >= high and nul[2] >= high and nul[3] <= low:
        return "utf-32-be"
    if nul[1] >= high / 2 and nul[3] >= high / 2 and nul[0] <= low and nul[2] <= low:
        return "utf-16-le"
    if nul[0] >= high / 2 and nul[2] >= high / 2 and nul[1] <= low and nul[3] <= low:
        return "utf-16-be"
    return None


def scan_bytes(data: bytes) -> list[Finding]:
    """`scan_text` of a file's bytes in whatever encoding they are (`decode`)."""
    return scan_text(decode(data))


# ---------------------------------------------------------------- spans

Span = tuple[int, int, int, str]  # start, end, rank (lower wins an overlap), kind


def _spans(text: str) -> list[Span]:
    found: list[Span] = []
    for rule in _RULES:
        found.extend(rule(text))
    joined, to_original = _unwrapped(text)
    if to_original is not None:  # a long token wrapped over lines: the rules again, on the lines joined
        for rule in _RULES:
            for start, end, rank, kind in rule(joined):
                found.append((to_original(start, False), to_original(end, True), rank, kind))
    return _merged(found)


def _merged(spans: list[Span]) -> list[Span]:
    """Overlapping spans as one (the whole secret), named by the most specific rule."""
    out: list[Span] = []
    for start, end, rank, kind in sorted(spans):
        if out and start < out[-1][1]:
            s, e, r, k = out[-1]
            out[-1] = (s, max(e, end), min(r, rank), k if r <= rank else kind)
        else:
            out.append((start, end, rank, kind))
    return out


_TOKEN_RUN = re.compile(r"[A-Za-z0-9+/=_\-]{40}")
_WRAP_NEXT = re.compile(r"[ \t>]*(?=[A-Za-z0-9+/=_])")
# A provider's token cut by a line break wherever it falls (a short line too, right after its prefix).
_PREFIXES = r"gh[pousr]_|github_pat_|gl(?:pat|dt|rt|ptt)-|xox[abposre]-|sk-ant-|sk-|(?:sk|rk)_(?:live|test)_|AIza|npm_|" \
    r"pypi-|hf_|A(?:KIA|SIA)"
_PREFIXED_END = re.compile(rf"(?<![A-Za-z0-9])(?:{_PREFIXES})[A-Za-z0-9_\-]*$")
# A line ending inside a provider's prefix ("gh" / "p_…", "AK" / "IA…"): its last word and the next line's first,
# joined, must open a token (the prefix, then 16 or more token characters with a digit).
_PREFIX_PIECE = re.compile(r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{1,10}$")
_PREFIX_JOINED = re.compile(rf"(?:{_PREFIXES})(?=[A-Za-z0-9_\-]*[0-9])[A-Za-z0-9_\-]{{16,}}")
_INDENT = re.compile(r"[ \t>]*")


def _unwrapped(text: str) -> tuple[str, Callable[[int, bool], int] | None]:
    """The text with lines that end in a long token joined to the next (a wrapped token as one string), and how a
    position in it maps back; (text, None) when nothing is wrapped."""
    cuts: list[int] = []  # where each join is, in the joined text
    removed: list[int] = []  # characters removed up to and including that join
    pieces, last, total = [], 0, 0
    line_start = 0
    for newline in re.finditer("\n", text):
        start = newline.start() - (text[newline.start() - 1:newline.start()] == "\r")
        line, line_start = line_start, newline.end()
        if (start - line < 60 or not _TOKEN_RUN.fullmatch(text, start - 40, start)) \
                and not _PREFIXED_END.search(text, max(line, start - 300), start):
            follow = _prefix_cut(text, max(line, start - 11), start, newline.end())
        else:
            follow = _WRAP_NEXT.match(text, newline.end())
        if follow is None:  # a short line (a sha in front matter) is not a wrapped one, nor one ending in a word
            continue
        end = follow.end()
        pieces.append(text[last:start])
        last = end
        cuts.append(start - total)
        total += end - start
        removed.append(total)
    if not cuts:
        return text, None
    pieces.append(text[last:])

    def to_original(position: int, is_end: bool) -> int:
        count = bisect_left(cuts, position) if is_end else bisect_right(cuts, position)
        return position + (removed[count - 1] if count else 0)

    return "".join(pieces), to_original


def _prefix_cut(text: str, line_end_from: int, line_end: int, next_line: int) -> re.Match[str] | None:
    """The next line's indentation when the line ends inside a provider's prefix, else None."""
    piece = _PREFIX_PIECE.search(text, line_end_from, line_end)
    if piece is None or piece.group()[0] not in "gxsrAnph":  # the first letters of `_PREFIXES`
        return None
    follow = _INDENT.match(text, next_line)
    at = follow.end()  # type: ignore[union-attr]
    return follow if _PREFIX_JOINED.match(piece.group() + text[at:at + 300]) else None


# ---------------------------------------------------------------- values

_PLACEHOLDER = re.compile(
    r"""(?ix)^(?:<[^>]*>?|\$\{?[\w.:\-]*\}?|%\(?\w*\)?s?|\{\{.*\}\}|\{[\w.\-]*\}|\[redacted.*|redacted.*
    |[*•.…x_\-]+|x{3,}\w*|\w*x{6,}|changeme|change[_-]?me|example|placeholder|dummy|fake|todo|tbd|n/?a
    |null|none|nil|true|false|yes|no|undefined|empty|required|optional
    |str|string|bytes|int|number|bool|boolean|secretstr|any|object|text|password_hash
    |__\w+__|your[\w\-. ]*|my[_-]?\w*[_-]here|\w+[_-]here|insert[\w\-. ]*|enter[\w\-. ]*|<.*)$"""
)
_CODE = re.compile(r"[(\[{]|^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$|^(?:process\.env|os\.environ|ENV|env)\b")
_TEMPLATE = re.compile(r"\[[^\]]*\]|<[^>]*>|\{[^}]*\}| [/+|] ")  # "sk-[20 alnum]…", "<token>", "a / b": not a value
_PATH = re.compile(r"^(?:~|\.{1,2})?/|^[A-Za-z]:\\|^\w[\w\-]*(?:/[\w.\-]+)+\.(?:pem|key|json|ya?ml|txt|env|p12|crt)$")
_WORDY = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*")
_STOPWORDS = frozenset("""
required optional correct incorrect wrong right valid invalid empty blank missing expired secret sensitive strong weak
long short fine good bad ok okay new old same different set unset null none there here needed enough present absent
public private unique random static temporary known unknown stored hashed encrypted shared reused mandatory ignored
hidden visible plain plaintext cleartext available unavailable too not also only still now then the a an in on at of
for to from with by managed generated rotated different rejected accepted allowed disabled enabled active inactive
this that these those it its our your their my his her which what where when how why lost leaked compromised
""".split())
_ENGLISH_SUFFIX = re.compile(r"(?i)(?:ed|ing|ly|ive|able|ible|al|ful|less|ous|ion|ment|ness)$")


def _placeholder(value: str) -> bool:
    return bool(_PLACEHOLDER.match(value.strip().strip("\"'`")))


def _entropy(value: str) -> float:
    counts: dict[str, int] = {}
    for char in value:
        counts[char] = counts.get(char, 0) + 1
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _credential_like(value: str) -> bool:
    """A bare word that reads like a credential: letters with digits or symbols, not prose or a version."""
    if len(value) < 6 or _placeholder(value):
        return False
    letters, digits = any(c.isalpha() for c in value), any(c.isdigit() for c in value)
    if re.fullmatch(r"v?\d+(?:\.\d+)+(?:[-+.]\w+)?|\d{4}-\d\d-\d\d\w*|\d+[smhdwy]|\d+(?:ms|px|kb|mb|gb|%)", value, re.I):
        return False
    return (letters and digits) or (letters and bool(re.search(r"[!@#$%^&*+=?~]", value)))


def _passphrase(value: str) -> bool:
    """"correct-horse-battery-staple": three or more words joined by hyphens, none of them a little word."""
    parts = value.lower().split("-")
    return len(parts) >= 3 and all(len(part) >= 3 and part not in _LITTLE for part in parts)


_LITTLE = frozenset("the and for with than then that this from into onto per via not are was".split())


def _englishy(value: str) -> bool:
    low = value.lower()
    return low in _STOPWORDS or bool(_ENGLISH_SUFFIX.search(low)) or len(value) < 6


# ---------------------------------------------------------------- private keys

_KEY_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]{0,30} PRIVATE KEY(?: BLOCK)?-----|-----BEGIN PRIVATE KEY-----")
_KEY_END = re.compile(r"-----END[A-Z0-9 ]{0,30} PRIVATE KEY(?: BLOCK)?-----|-----END PRIVATE KEY-----")
_KEY_LINE = re.compile(r"[ \t>\"'`,]*(?:[A-Za-z0-9+/=]{8,}|(?:Proc-Type|DEK-Info|Comment|Version|Hash): ?[^\n]*)[ \t\"'`,\\n]*")


def _private_keys(text: str) -> Iterator[Span]:
    """BEGIN, the key's lines, END as one span; a block cut short runs over the key lines next to its one marker.
    Only key lines (base64, PEM headers) are taken: an END further on, after other text, is a block of its own."""
    if "PRIVATE KEY" not in text:
        return
    taken = 0
    for begin in _KEY_BEGIN.finditer(text):
        if begin.start() < taken:
            continue
        stop = _key_lines_after(text, begin.end())
        end = _KEY_END.match(text, _BETWEEN.match(text, stop).end())  # type: ignore[union-attr]
        taken = end.end() if end else stop
        yield begin.start(), taken, 0, "private key"
    for end in _KEY_END.finditer(text):
        if end.start() >= taken:
            yield _key_lines_before(text, end.start()), end.end(), 0, "private key"


_BETWEEN = re.compile(r"(?:\\n|[ \t\r\n>\"'`,])*")


# A key's lines folded onto one line (a summary, a snippet): chunks after its BEGIN, the last maybe cut ("…").
_FOLDED_AFTER = re.compile(r"(?:[ \t]+[A-Za-z0-9+/=]{16,})+(?:[ \t]+[A-Za-z0-9+/=]{1,15}(?=…|[ \t]*(?:-----END|\n|$)))?"
                           r"|[ \t]+[A-Za-z0-9+/=]{1,15}(?=[ \t]*-----END)")


def _key_lines_after(text: str, position: int) -> int:
    tail = re.match(r"[A-Za-z0-9+/=\\]*", text[position:position + 20_000])
    position += tail.end() if tail else 0
    folded = _FOLDED_AFTER.match(text, position)
    if folded is not None:
        return folded.end()
    while position < len(text) and text[position] in "\r\n":
        start = text.find("\n", position) + 1
        if text[start:start + 1] in ("\n", "\r"):  # one blank line (after PEM headers)
            start = text.find("\n", start) + 1
        end = text.find("\n", start)
        line = text[start:len(text) if end < 0 else end].rstrip("\r")
        if not start or not line.strip() or not _KEY_LINE.fullmatch(line) or line.lstrip().startswith("-----"):
            break
        position = start + len(line)
    return position


def _key_lines_before(text: str, position: int) -> int:
    head = re.search(r"[A-Za-z0-9+/=\\]*\Z", text[max(0, position - 20_000):position])
    position -= len(head.group()) if head else 0
    folded = _folded_before(text, position)
    if folded < position:
        return folded
    while position > 0 and text[position - 1] == "\n":
        start = text.rfind("\n", 0, position - 1) + 1
        line = text[start:position - 1].rstrip("\r")
        if not line.strip() or not _KEY_LINE.fullmatch(line):
            break
        position = start
    return position


def _folded_before(text: str, position: int) -> int:
    """Where the chunks of a key folded onto one line start, before its END at `position`: the chunk next to END
    may be short (a key's last line), one cut short ("…abc") may start them; `position` when there are none."""
    start = position
    while True:
        gap = start
        while gap > 0 and text[gap - 1] in " \t":
            gap -= 1
        chunk = gap
        while chunk > 0 and text[chunk - 1] in _B64_CHARS and gap - chunk <= 20_000:
            chunk -= 1
        if gap == start or chunk == gap:
            return start
        if gap - chunk < 16 and start != position:
            return chunk if chunk == 0 or text[chunk - 1] in "…\n" else start
        start = chunk


_B64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


_B64_START = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{60,}={0,2}(?![A-Za-z0-9+/=])")
_B64_BODY_LINE = re.compile(r"[ \t>\"'`]*([A-Za-z0-9+/]{4,}={0,2})[ \t\r\"'`,\\n]*")
_OTHER_ARMOR = re.compile(r"-----BEGIN (?![A-Z0-9 ]*PRIVATE KEY)[A-Z0-9 ]+-----")
_OPENSSH_MAGIC = "b3BlbnNzaC1rZXktdjE"  # base64 of "openssh-key-v1"


def _key_bodies(text: str) -> Iterator[Span]:
    """A private key's base64 body without its BEGIN/END lines: a block whose bytes start as a private key does
    (DER SEQUENCE then version 0 or 1: PKCS#1, PKCS#8, SEC1; or OpenSSH's magic), or three or more lines of one
    PEM-like width (60-80) that do not start as a certificate or public key does (a key's middle, cut out)."""
    taken = 0
    for first in _B64_START.finditer(text):
        if first.start() < taken:
            continue
        lines, end = _body_lines(text, first.start())
        taken = end
        body = "".join(lines)
        head = _b64_head(body)
        if head is None:
            continue
        if _private_head(head) or body.startswith(_OPENSSH_MAGIC):
            yield first.start(), end, 0, "private key"
            continue
        widths = {len(line) for line in lines[:-1]}
        if len(lines) < 3 or len(widths) != 1 or not 60 <= widths.pop() <= 80 or len(lines[-1]) > len(lines[0]):
            continue
        if _public_head(head) or _OTHER_ARMOR.search(text, max(0, first.start() - 300), first.start()):
            continue  # a certificate, a public key, a PGP block: public material
        if all(re.search(r"[a-z]", line) and re.search(r"[A-Z]", line) and re.search(r"[0-9]", line)
               for line in lines[:-1]):
            yield first.start(), end, 0, "private key"


def _body_lines(text: str, start: int) -> tuple[list[str], int]:
    """The base64 of the lines from `start` on (each line only base64, quotes and indentation; a shorter line ends
    them), and where the last one ends; one line when text follows the first on its line."""
    first = _B64_START.match(text, start)
    assert first is not None
    lines, end = [first.group()], first.end()
    line_end = text.find("\n", end)
    if line_end < 0 or text[end:line_end].strip(" \t\r\"'`,\\n"):
        folded = _FOLDED_AFTER.match(text, end)  # its lines folded onto this one (a summary, a snippet)
        return lines, folded.end() if folded is not None else end
    while line_end >= 0:
        line_start = line_end + 1
        line_end = text.find("\n", line_start)
        match = _B64_BODY_LINE.fullmatch(text, line_start, len(text) if line_end < 0 else line_end)
        if match is None:
            break
        lines.append(match.group(1))
        end = match.end(1)
        if len(lines[-1]) < len(lines[-2]):
            break
    return lines, end


def _b64_head(body: str) -> bytes | None:
    import base64
    import binascii

    try:
        return base64.b64decode(body[:32])
    except (binascii.Error, ValueError):
        return None


def _der_content(head: bytes) -> bytes | None:
    """What follows a DER SEQUENCE's tag and length at the start of `head`, or None when it is no SEQUENCE."""
    if len(head) < 4 or head[0] != 0x30:
        return None
    size = head[1]
    skip = 2 if size < 0x80 else 2 + (size & 0x7F) if 0x81 <= size <= 0x84 else -1
    return head[skip:] if skip > 0 else None


def _private_head(head: bytes) -> bool:
    content = _der_content(head)
    return content is not None and content[:3] in (b"\x02\x01\x00", b"\x02\x01\x01")


def _public_head(head: bytes) -> bool:
    content = _der_content(head)
    return content is not None and content[:1] in (b"\x30", b"\xa0", b"\x06")


# ---------------------------------------------------------------- provider formats

_PROVIDERS: list[tuple[str, re.Pattern[str], str]] = [  # kind, pattern, a substring every match holds (fast skip)
    ("AWS Access Key", re.compile(r"A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}"), "A"),
    ("GitHub token", re.compile(r"gh[pousr]_[A-Za-z0-9]{30,255}"), "_"),
    ("GitHub token", re.compile(r"github_pat_[A-Za-z0-9_]{40,255}"), "github_pat_"),
    ("GitLab token", re.compile(r"gl(?:pat|dt|rt|ptt|cbt|soat|ft|imt|oas|agent)-[A-Za-z0-9_\-]{20,}"), "gl"),
    ("Slack token", re.compile(r"xox[abposre]-[A-Za-z0-9\-]{10,}"), "xox"),
    ("Slack webhook", re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/]{20,}"), "hooks.slack"),
    ("Stripe key", re.compile(r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"), "_"),
    ("Anthropic key", re.compile(r"sk-ant-[A-Za-z0-9_\-]{20,}"), "sk-ant-"),
    ("OpenAI key", re.compile(r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}"), "sk-"),
    ("Google API key", re.compile(r"AIza[0-9A-Za-z_\-]{35}"), "AIza"),
    ("npm token", re.compile(r"npm_[A-Za-z0-9]{36}"), "npm_"),
    ("PyPI token", re.compile(r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}"), "pypi-"),
    ("SendGrid key", re.compile(r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{40,50}"), "SG."),
    ("JSON Web Token", re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), "eyJ"),
    ("Azure storage key", re.compile(r"AccountKey=[A-Za-z0-9+/]{40,}={0,2}"), "AccountKey="),
    ("Hugging Face token", re.compile(r"hf_[A-Za-z0-9]{34,}"), "hf_"),
    ("DigitalOcean token", re.compile(r"do[opr]_v1_[a-f0-9]{64}"), "_v1_"),
    ("Shopify token", re.compile(r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"), "shp"),
    ("Square token", re.compile(r"sq0(?:atp|csp)-[0-9A-Za-z_\-]{22,60}"), "sq0"),
    ("Twilio API key", re.compile(r"SK[0-9a-f]{32}(?![0-9a-f])"), "SK"),
    ("Telegram bot token", re.compile(r"[0-9]{8,10}:AA[0-9A-Za-z_\-]{33}"), ":AA"),
    ("Discord bot token", re.compile(r"(?<![A-Za-z0-9])[MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,}"), "."),
    ("Mailchimp key", re.compile(r"(?<![0-9a-z])[0-9a-f]{32}-us[0-9]{1,2}(?![0-9])"), "-us"),
]
_MIXED_SK = re.compile(r"(?=.*[0-9])(?=.*[a-z])(?=.*[A-Z])")
_URL_PASSWORD = re.compile(r"[^\s:/@'\"<>]*:([^\s/@'\"<>]+)@[\w.\-\[\]]")  # after `scheme://`
_AUTH_HEADER = re.compile(r"(?i)\b(?:bearer|basic)[ \t]+([A-Za-z0-9._~+/\-]{16,}=*)")
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


# The head of a provider's token where a line ends (or a title cut from one, before its `id`): the tail is on the
# next line.
_CUT_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:gh[pousr]_|github_pat_|glpat-|sk-ant-|sk-proj-|xox[abposre]-|npm_|AIza)"
                        r"(?=[A-Za-z0-9_\-]*[0-9])[A-Za-z0-9_\-]{10,}(?=[ \t]*(?:\r?\n|$|`[0-9a-f]{12}`))")


# A provider's prefix alone, the token's rest after a line break or, once the lines are folded into one, a space.
_BARE_PREFIX = re.compile(r"(?<![A-Za-z0-9])(?:gh[pousr]_|github_pat_|glpat-|sk-ant-|sk-proj-|xox[abposre]-|npm_|hf_)"
                          r"[ \t]*\r?\n?[ \t>]*(?=[A-Za-z0-9_\-]*[0-9])[A-Za-z0-9_\-]{20,}")


def _providers(text: str) -> Iterator[Span]:
    for match in _CUT_TOKEN.finditer(text):
        yield match.start(), match.end(), 2, "token cut at a line end"
    for match in _BARE_PREFIX.finditer(text):
        yield match.start(), match.end(), 2, "token cut at a line end"
    for kind, pattern, marker in _PROVIDERS:
        if marker and marker not in text:
            continue
        for match in pattern.finditer(text):
            if match.start() and text[match.start() - 1] in _ALNUM:
                continue  # inside a longer word
            value = match.group()
            body = re.sub(r"^[A-Za-z0-9]{2,12}[_\-.]", "", value) if kind != "AWS Access Key" else value[4:]
            if _placeholder(body) or len(set(body.lower())) < 5:
                continue  # sk_live_xxxxxxxxxxxxxxxxxxxx and the like
            if kind == "OpenAI key" and not _MIXED_SK.match(value):
                continue  # "sk-learn-compatible-estimators": a name, not a key
            yield match.start(), match.end(), 1, kind
    lowered = text.lower()
    if "bearer" in lowered or "basic " in lowered:
        for match in _AUTH_HEADER.finditer(text):
            if _credential_like(match.group(1)):
                yield match.start(1), match.end(1), 2, "authorization header"
    at = text.find("://")
    while at > 0:
        password = _URL_PASSWORD.match(text, at + 3)
        if password and not _placeholder(password.group(1)) and text[at - 1].isalpha():
            yield password.start(1), password.end(1), 2, "password in URL"
        at = text.find("://", at + 3)


# ---------------------------------------------------------------- assignments to a secret name

_HINT = re.compile(r"pass|pwd|secret|token|key|credential")  # on the text lower-cased (`_lower`)
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAME_AFTER = re.compile(r"[A-Za-z0-9_.\-]*")
_SEPARATOR = re.compile(r"""[*_`"']{0,3}[ \t]*(?::=|=>|[:=])[ \t]*|[ \t]+(?=[^\s=:])""")
_VALUE = re.compile(r"""(?:"([^"\n]*)"|'([^'\n]*)'|`([^`\n]*)`|(<[^>\n]*>|\$\{[^}\n]*\}|[^\s"'`,;]+))""")
_ENV_LINE = re.compile(r"[ \t>*+-]*(?:export[ \t]+)?")  # what may come before NAME=value on its own line
_SEGMENTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SECRET_SEGMENTS = frozenset("password passwd passphrase passcode pwd pass secret token apikey credential credentials".split())
_SECRET_SUFFIXES = ("password", "passwd", "passphrase", "secret", "token", "apikey")
_KEY_QUALIFIERS = frozenset("""api secret private access signing encryption encrypt master license account client app
service deploy auth session shared hmac jwt webhook storage subscription consumer admin root bot iam""".split())
_NEUTRAL_TAIL = frozenset("""base value val string str b64 base64 hex raw plain plaintext enc encrypted bytes old new
current prod production dev staging live test""".split())


def _secret_name(name: str) -> bool:
    """`DB_PASSWORD`, `SECRET_KEY_BASE`, `aws_secret_access_key`, `_authToken`: yes. `password_hash`,
    `password_reset_token_ttl`, `max_tokens`, `token_file`: no (what follows the secret word says it is not one)."""
    segments = [s.lower() for s in _SEGMENTS.findall(name)]
    last = -1
    for i, segment in enumerate(segments):
        if segment in _SECRET_SEGMENTS or (segment.endswith(_SECRET_SUFFIXES) and segment != "bypass") \
                or (segment == "key" and i > 0 and segments[i - 1] in _KEY_QUALIFIERS):
            last = i
    return last >= 0 and all(s in _NEUTRAL_TAIL or s.isdigit() for s in segments[last + 1:])


def _assignments(text: str) -> Iterator[Span]:
    seen = -1
    for hint in _HINT.finditer(_lower(text)):
        if hint.start() < seen:
            continue
        end = _NAME_AFTER.match(text, hint.end()).end()  # type: ignore[union-attr]
        seen = end
        separator = _SEPARATOR.match(text, end)
        if separator is None:
            continue
        start = _word_start(text, hint.start(), _NAME_CHARS)
        if ":" not in separator.group() and "=" not in separator.group() and text[max(0, start - 2):start] != "--":
            continue  # `--password hunter2` is a command line; `password hunter2` is prose (see _prose)
        name = text[start:end].strip(".-")
        if not _secret_name(name):
            continue
        value = _VALUE.match(text, separator.end())
        if value is None:
            continue
        quoted = value.lastindex != 4
        raw = value.group(value.lastindex or 0)
        body = raw if quoted else raw.rstrip(".,:)]}>")
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", value.end())
        rest = text[value.end():len(text) if line_end < 0 else line_end]
        env_line = separator.group() == "=" and bool(_ENV_LINE.fullmatch(text, line_start, start)) \
            and not rest.strip()[:1].isalnum() and not rest.strip().startswith((",", ")"))
        if _secret_value(body, quoted, name, env_line, rest):
            begin = value.start(value.lastindex or 0)
            yield begin, begin + len(body), 3, f"{_kind_word(name)} assignment"


def _lower(text: str) -> str:
    """The text lower-cased, each character still at its place (a few characters lower-case to two)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def _word_start(text: str, position: int, chars: frozenset[str], limit: int = 80) -> int:
    floor = max(0, position - limit)
    while position > floor and text[position - 1] in chars:
        position -= 1
    return position


def _kind_word(name: str) -> str:
    low = name.lower()
    for word in ("password", "passwd", "passphrase", "pwd", "pass", "secret", "token", "key", "credential"):
        if word in low:
            return {"passwd": "password", "pwd": "password", "pass": "password"}.get(word, word)
    return "secret"


def _secret_value(raw: str, quoted: bool, name: str, env_line: bool, rest: str) -> bool:
    """Whether the value given to a secret name is a secret: not a placeholder, a path, code, a type or prose."""
    value = raw.strip()
    if len(value) < 6 or _placeholder(value) or _PATH.match(value) or value.startswith("-----") \
            or value.lower() in (name.lower(), re.split(r"[._\-]", name.lower())[-1]):  # `self.password = password`
        return False
    if quoted:  # a string literal; `' + access_key + '` (code round a string) and "[secret key]" are not secrets
        return value == raw and len(value.split()) <= 4 and not _TEMPLATE.search(value)
    if _CODE.search(value):
        return False
    if not env_line:  # code and prose; an .env line (`NAME=value` alone on its line) is a value whatever it reads like
        if re.fullmatch(r"[A-Za-z_]\w*", value) and not re.search(r"\d", value) \
                and ("_" in value or re.search(r"[a-z][A-Z]|^[A-Z][a-z]+[A-Z]", value)):
            return False  # `key=cl_api_key`, `token = TOKEN_BLOCK_BEGIN`, `secret: PotentialSecret`: code
        if re.fullmatch(r"[A-Za-z_]\w*", value) and re.match(r"[ \t]*[,)|+&*/%]", rest):
            return False  # `password=password,`, `Creds = UserPass | Keypair`: code
        if _WORDY.fullmatch(value) and (_englishy(value) or re.match(r"[ \t]+[A-Za-z]", rest)) \
                and not (_kind_word(name) == "password" and _passphrase(value)):
            return False  # "Password: required for admins": prose; "password: correct-horse-battery-staple for now" is not
    return True


# ---------------------------------------------------------------- prose

_NOUN_QUALIFIERS = frozenset("""api access secret signing private encryption master license client auth bearer session
refresh bot webhook deploy app admin root db database ssh wifi vault""".split())
_PROSE_REST = re.compile(
    r"""(?ix)s?\b(?:[ \t]+(?:for|of|on|to)[ \t]+(?:the[ \t]+)?[\w.\-]{1,30})?(?:[ \t]+\([^)\n]{0,40}\))?[ \t]*
    (?P<verb>(?:is[ \t]+set[ \t]+to|was[ \t]+set[ \t]+to|was[ \t]+changed[ \t]+to|is[ \t]+now|is|was|became|reads
    |->|(?P<sign>=|:))[ \t]*)?(?P<value>"[^"\n]{4,120}"|'[^'\n]{4,120}'|`[^`\n]{4,120}`|[^\s"'`]{4,})"""
)


_NOUN = re.compile(r"pass(?:word|phrase|code|wd)|secret|token|key")  # on the text lower-cased
_IDENTIFIER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.")
# What may follow a noun that is given a value: a verb, a sign, "for prod", "(staging)", a quote, a long token.
_NOUN_THEN = re.compile(r"""s?(?:[ \t]+(?:is|was|became|reads)\b|[ \t]*(?:[:=]|->)|[ \t]+(?:for|of|on|to)[ \t]|[ \t]+\(
    |[ \t]+["'`]|[ \t]+[A-Za-z0-9_\-+/=]{16})""", re.X)


def _prose(text: str) -> Iterator[Span]:
    """"The password is hunter2", "the signing secret is "…"", "api key 9f8e7d6c5b4a39281706"."""
    lowered = _lower(text)
    for hint in _NOUN.finditer(lowered):
        start, end = hint.span()
        if start and lowered[start - 1] in _IDENTIFIER_CHARS:
            continue  # inside a word or an identifier (`from_secret`, `keyword`): code is the assignment rule's
        after = lowered[end:end + 2]
        if after[:1] in _IDENTIFIER_CHARS and not (after[:1] == "s" and after[1:2] not in _IDENTIFIER_CHARS):
            continue
        if after[:1] == "(" or _NOUN_THEN.match(text, end) is None:
            continue  # "the token budget", "password reset": no value given
        word = hint.group()
        qualifier = re.search(r"([A-Za-z]+)[ \t_-]?$", text[max(0, start - 16):start])
        qualified = bool(qualifier) and qualifier.group(1).lower() in _NOUN_QUALIFIERS  # type: ignore[union-attr]
        if word == "key" and not qualified:
            continue  # "the primary key is user_id"
        noun = f"{qualifier.group(1).lower()} {word}" if qualified else word  # type: ignore[union-attr]
        match = _PROSE_REST.match(text, end)
        if match is None:
            continue
        if match.group("sign") and not qualified:
            continue  # `password: …` and `token=…` are assignments: that rule knows code from secrets
        raw, value_start = match.group("value"), match.start("value")
        if raw[0] in "\"'`":
            value, value_start = raw[1:-1], value_start + 1
            secret = bool(match.group("verb")) and not _placeholder(value) and len(value.split()) <= 4 \
                and not _PATH.match(value) and not _TEMPLATE.search(value)
        else:
            value = raw.rstrip(".,;:!?)]}>")
            clause_end = text[value_start + len(value):][:1] in ("", "\n", ".", ",", ";", "!", ")")
            if match.group("verb"):
                secret = _credential_like(value) or (word.startswith("pass") and bool(_WORDY.fullmatch(value)) and (
                    clause_end and not _englishy(value) or _passphrase(value)))
            else:  # a long random token right after the noun
                secret = bool(re.fullmatch(r"[A-Za-z0-9_\-+/=]{16,}", value)) and _credential_like(value)
            secret = secret and not _CODE.search(value) and not _PATH.match(value)
        if secret:
            yield value_start, value_start + len(value), 4, f"{noun} in prose"


# ---------------------------------------------------------------- quoted high-entropy strings

_QUOTED = re.compile(r"""(["'`])([A-Za-z0-9+/=_\-]{20,})\1""")
_HASH_CONTEXT = re.compile(r"(?i)(?:sha\d*|md5|integrity|hash|checksum|digest|etag|commit|rev|revision|blob)\W{0,4}$")
_SEQUENTIAL = re.compile(r"(?i)abcdefgh|ijklmnop|qrstuvwx|12345678")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _high_entropy(text: str) -> Iterator[Span]:
    for match in _QUOTED.finditer(text):
        value = match.group(2)
        if re.fullmatch(r"[0-9a-fA-F\-]+", value) or _UUID.search(value) or re.match(r"(?i)sha\d+[-:]|md5[-:]", value):
            continue  # a commit id, content hash or UUID: only a secret's context makes one a secret (prose rule)
        if not (re.search(r"\d", value) and re.search(r"[a-z]", value) and re.search(r"[A-Z]", value)) \
                or _SEQUENTIAL.search(value):
            continue  # not random: "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", an alphabet
        if _entropy(value) < 4.5 or _HASH_CONTEXT.search(text, max(0, match.start() - 24), match.start()):
            continue
        yield match.start(2), match.end(2), 5, "high-entropy string"


_RULES: list[Callable[[str], Iterator[Span]]] = [_private_keys, _key_bodies, _providers, _assignments, _prose, _high_entropy]
