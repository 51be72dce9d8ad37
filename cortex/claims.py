"""Claims in a text: the checkable facts two memories can disagree on, however alike they read to an embedding.

`claims` reads them (numbers with units, versions, names, identifiers, negations) with plain regular
expressions, deterministically; `conflict` says where two texts disagree.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, replace

from cortex.text import STOP_WORDS

_NUMBER_WORDS = {w: n for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())} | {
    "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_ORDINAL_WORDS = {"first": 1, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
                  "ninth": 9, "tenth": 10}  # not "second": it is a unit far more often
_DURATIONS = {"ms": 0.001, "millisecond": 0.001, "s": 1, "sec": 1, "second": 1, "min": 60, "minute": 60,
              "m": 60, "h": 3600, "hr": 3600, "hour": 3600, "d": 86400, "day": 86400, "week": 604800,
              "month": 2_592_000, "year": 31_536_000}
_SIZES = {"byte": 1, "kb": 2**10, "kib": 2**10, "kilobyte": 2**10, "mb": 2**20, "mib": 2**20, "megabyte": 2**20,
          "gb": 2**30, "gib": 2**30, "gigabyte": 2**30, "tb": 2**40, "tib": 2**40, "terabyte": 2**40}
# (binary multiples: "512 MB" and "0.5 GB" are one size)
_SUFFIXES = {"k": 1_000, "K": 1_000, "M": 1_000_000, "bn": 1_000_000_000}  # 1.2k, 40M
_AUXILIARIES = frozenset("must should can could may might will would shall do does did is are was were be been "
                         "has have had always still also now".split())
_NEGATIONS = frozenset({"not", "never", "cannot", "nor"})
_SCOPE_SKIP = frozenset({"a", "an", "the", "to", "as", "so", "be", "been", "being", "even", "ever", "yet", "always",
                         "really", "directly", "get", "got", "anymore", "again", "also", "only", "just"})
_STARTERS = frozenset("after all always any before because both don't each every for from here however if in "
                      "never no nobody once only please since some still then there these this those though "
                      "when whenever while why yes".split())  # capitalised at a sentence's start, not names
_OWNERSHIP = frozenset({"own", "owner", "maintain", "maintainer", "lead", "led", "approv", "approval", "approver",
                        "review", "reviewer", "ask", "contact", "escalat", "manag", "manager", "responsibl"})
_TOKEN = re.compile(r"`[^`\n]+`|(?:--?|/|\$|~)?[\w@%][\w@%.,:/'’+#-]*|[.!?;\n]")
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_DIGITS = re.compile(r"^(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)([a-zA-Z%]*)$")
_VERSION = re.compile(r"^v?\d+(?:\.\d+){1,3}$|^v\d+$")
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
_NAME = re.compile(r"^[A-Z][a-z]+(?:[A-Z][a-z]+)*$")


@functools.lru_cache(maxsize=1 << 16)  # a store's texts share most of their words
def _stem(word: str) -> str:
    """A crude stem, enough to see "caches", "cached" and "cache" as one word."""
    word = word.lower().replace("’", "'")
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


@dataclass(frozen=True)
class Claim:
    """One checkable fact of a text: a quantity, a version, a name or an identifier."""

    kind: str  # "number", "version", "name", "identifier"
    value: str  # compared: a number's value in its unit class ("3600:duration"), a version, a lower-cased name
    shown: str  # as written, for the reason a pair is not merged
    unit: str = ""  # a number's unit class (duration, size, percent, clock, ordinal, money) or "" for a plain count
    near: frozenset[str] = frozenset()  # stems of the content words around it: two claims in the same slot share one
    initial: bool = False  # the first word of a sentence (a capital there may be no name: "Raw events land ...")


@dataclass(frozen=True)
class Claims:
    """What `claims(text)` found: the facts, what the text negates and what it asserts."""

    items: tuple[Claim, ...]
    negated: frozenset[tuple[str, str]]  # (the word before the negation, the stem it negates): "worker" "cach"
    asserted: frozenset[tuple[str, str]]  # (the word before, a stem said without negation)
    stems: tuple[str, ...]  # the content words in order, for a one-word change of subject
    words: frozenset[str]  # every word, lower-cased (a name is "there" if the other text has it in any case)
    word_stems: frozenset[str]  # their stems ("Thursdays" is there when the other says "Thursday")


def _number_value(token: str) -> tuple[float, str] | None:
    """A number token's value and its attached suffix ("1,200" -> 1200, "1.2k" -> 1200, "25MB" -> 25 "MB")."""
    match = _DIGITS.match(token)
    if match:
        value = float(match.group(1).replace(",", ""))
        suffix = match.group(2)
        if suffix in _SUFFIXES:
            return value * _SUFFIXES[suffix], ""
        return value, suffix
    lower = token.lower()
    parts = lower.split("-")
    if all(p in _NUMBER_WORDS for p in parts) and len(parts) <= 2:
        return float(sum(_NUMBER_WORDS[p] for p in parts)), ""  # "thirty-five"
    return None


def _unit(word: str) -> tuple[str, float] | None:
    """The unit class and factor of a unit word ("minutes" -> duration 60, "MB" -> size 2**20, "%" -> percent)."""
    lower = word.lower().rstrip(".")
    if lower in ("%", "percent"):
        return "percent", 1.0
    if lower in ("b", "bytes"):
        return "size", 1.0
    singular = lower[:-1] if lower.endswith("s") and len(lower) > 2 and lower[:-1] in _DURATIONS | _SIZES else lower
    if singular in _DURATIONS and (len(singular) > 1 or word.islower()):  # "5m", "30s"; not a capital "M"
        return "duration", _DURATIONS[singular]
    if singular in _SIZES:
        return "size", float(_SIZES[singular])
    return None


def _product(tokens: list[tuple[str, bool]], n: int) -> str:
    """The product a version at position n belongs to: the capitalised word right before it ("Python 3.11")."""
    if n == 0 or tokens[n][1]:
        return ""
    previous = tokens[n - 1][0]
    if re.match(r"^[A-Za-z][\w.+-]*$", previous) and (previous[0].isupper() or any(c.isupper() for c in previous[1:])):
        return previous.lower().removesuffix(".js")
    return ""


def _split_tokens(text: str) -> list[tuple[str, bool]]:
    """Tokens with whether each starts a sentence; code spans whole, trailing punctuation dropped."""
    out: list[tuple[str, bool]] = []
    start = True
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token in ".!?;\n":
            start = True
            continue
        if not token.startswith("`"):
            stripped = token.rstrip(".,:;'’")
            if stripped.endswith("/") and len(stripped) > 1:
                stripped = stripped.rstrip("/")
            ends = token[len(stripped):]
            token = stripped
        else:
            ends = ""
        if token:
            out.append((token, start))
            start = False
        if any(mark in ends for mark in ".:;"):
            start = True
    return out


def _code_like(token: str) -> bool:
    if token.startswith("`"):
        return True
    if token.startswith(("-", "$", "%", "~")) and any(c.isalpha() for c in token):
        return True
    core = token.strip("/")
    if any(mark in core for mark in ("_", "/", "::", "#")):
        return True
    if re.search(r"[a-z0-9]\.[a-zA-Z]", core):  # go.mod, fmt.Errorf, dev.yaml
        return True
    if any(c.isdigit() for c in core) and any(c.isalpha() for c in core):
        return True  # arm64, S3, us-west-2, Sev1
    return bool(re.match(r"^[a-z]+[A-Z]", core))  # camelCase, iOS


def claims(text: str) -> Claims:
    """The checkable facts of a memory's text (see `conflict`). Deterministic: the same text, the same claims.

    - numbers, normalised with their units: "3" = "three"; "30 seconds" = "half a minute" = "30s";
      "1,200" = "1.2k"; "512 MB" = "0.5 GB"; "80%" = "80 percent"; "02:00" = "2:00"; ordinals ("3rd", "third");
    - versions: dotted numbers (1.2.3, 3.11), v2, and a number right after a capitalised product name
      ("Postgres 15", "iOS 16", "Expo SDK 50");
    - names: capitalised words (Alice, Postmark, Fridays), @handles, emails;
    - identifiers: `code spans` and code-like tokens (acks_late, go.mod, proto/tally/v1, us-west-2, --platform);
    - negations: the word a "not", "never", "no longer" or "n't" applies to, and what the text asserts plainly.
    """
    reader = _ClaimReader(text)
    reader.read_items()
    stems = reader.place_items()
    negated, asserted = reader.polarity()
    lowered = reader.lowered
    return Claims(tuple(reader.items), frozenset(negated), frozenset(asserted), stems, frozenset(lowered),
                  frozenset(_stem(w.removesuffix("'s")) for w in lowered))


class _ClaimReader:
    """One text's tokens read into claims, in three passes (see `claims`)."""

    def __init__(self, text: str) -> None:
        self.tokens = _split_tokens(text)
        self.lowered = [t.lower().replace("’", "'") for t, _ in self.tokens]
        self.items: list[Claim] = []
        self.claim_at: dict[int, int] = {}  # token position -> item index
        self.absorbed: set[int] = set()  # the unit words of a number ("5 minutes"): part of its claim, not content

    def add(self, position: int, kind: str, value: str, shown: str, unit: str = "") -> None:
        self.claim_at[position] = len(self.items)
        self.items.append(Claim(kind, value, shown, unit, frozenset(), self.tokens[position][1]))

    def unit_after(self, position: int) -> bool:
        return position + 1 < len(self.tokens) and _unit(self.tokens[position + 1][0]) is not None

    def number(self, position: int, value: float) -> int:
        """A quantity at `position` ("3", "a hundred", "40 million", "5 minutes", "one idle minute"); returns how
        many tokens after it belong to it."""
        tokens, lowered = self.tokens, self.lowered
        used = 0
        if position + 1 < len(tokens) and lowered[position + 1] in _SCALES:
            value *= _SCALES[lowered[position + 1]]
            used = 1
        following = lowered[position + used + 1:position + used + 3]
        for extra in range(1, len(following) + 1):
            unit = _unit(tokens[position + used + extra][0])
            if unit and (extra == 1 or (following[0].isalpha() and following[0] not in STOP_WORDS)):
                shown = " ".join(t for t, _ in tokens[position:position + used + extra + 1])
                self.add(position, "number", f"{value * unit[1]:.12g}:{unit[0]}", shown, unit[0])
                return used + extra
        self.add(position, "number", f"{value:.12g}:", " ".join(t for t, _ in tokens[position:position + used + 1]))
        return used

    def read_items(self) -> None:
        """Pass 1: which tokens are claims."""
        skip = 0
        for n in range(len(self.tokens)):
            if skip:
                skip -= 1
                self.absorbed.add(n)
                continue
            skip = self.read_number(n)
            if n not in self.claim_at:
                self.read_word(n)

    def read_number(self, n: int) -> int:
        """A number, a time of day, a version or an ordinal at n, if there is one; returns the tokens it absorbs."""
        token, lower, lowered = self.tokens[n][0], self.lowered[n], self.lowered
        clock = _CLOCK.match(token)
        ordinal = _ORDINAL.match(lower)
        parsed = _number_value(token)
        if clock:
            self.add(n, "number", f"{int(clock.group(1)) * 60 + int(clock.group(2))}:clock", token, "clock")
        elif _VERSION.match(token) and not self.unit_after(n):
            self.add(n, "version", token.lower().lstrip("v"), token, _product(self.tokens, n))
        elif ordinal or lower in _ORDINAL_WORDS:
            rank = int(ordinal.group(1)) if ordinal else _ORDINAL_WORDS[lower]
            self.add(n, "number", f"{rank}:ordinal", token, "ordinal")
        elif lower == "twice":
            self.add(n, "number", "2:", token)
        elif lower == "half" and n + 2 < len(lowered) and lowered[n + 1] in ("a", "an") and _unit(lowered[n + 2]):
            kind, factor = _unit(lowered[n + 2]) or ("", 0.0)
            self.add(n, "number", f"{0.5 * factor:.12g}:{kind}", " ".join(lowered[n:n + 3]), kind)
            return 2
        elif lower in _SCALES and (n == 0 or lowered[n - 1] in ("a", "an")):  # "a hundred"
            return self.number(n, float(_SCALES[lower]))
        elif lower == "dozen" and n > 0 and lowered[n - 1] in ("a", "one"):
            return self.number(n, 12.0)
        elif parsed is None and "-" in token:  # "five-minute", "30-second", "one-hour"
            head, _, tail = token.partition("-")
            head_value, tail_unit = _number_value(head), _unit(tail)
            if head_value is not None and not head_value[1] and tail_unit:
                self.add(n, "number", f"{head_value[0] * tail_unit[1]:.12g}:{tail_unit[0]}", token, tail_unit[0])
        elif parsed is not None and (not parsed[1] or _unit(parsed[1])):
            value, suffix = parsed
            unit = _unit(suffix) if suffix else None
            product = _product(self.tokens, n)
            if unit:  # 25MB, 30s, 80%
                self.add(n, "number", f"{value * unit[1]:.12g}:{unit[0]}", token, unit[0])
            elif token.isdigit() and int(token) < 1000 and product and not self.unit_after(n):
                self.add(n, "version", token, f"{self.tokens[n - 1][0]} {token}", product)  # Postgres 15, SDK 50
            else:
                return self.number(n, value)
        elif token.startswith("$") and _number_value(token[1:]) is not None:
            self.add(n, "number", f"{(_number_value(token[1:]) or (0.0, ''))[0]:.12g}:money", token, "money")
        return 0

    def read_word(self, n: int) -> None:
        """A name, an email, a handle or an identifier at n, if there is one."""
        token, starts = self.tokens[n]
        lower = self.lowered[n]
        if token.startswith("`"):
            self.add(n, "identifier", token.strip("`").lower(), token)
        elif token.startswith("@") and len(token) > 1 or re.match(r"^[\w.+-]+@[\w-]+\.[\w.]+$", token):
            self.add(n, "name", lower, token)
        elif _code_like(token):
            self.add(n, "identifier", lower, token)
        else:
            name = token[:-2] if token.endswith(("'s", "’s")) else token
            common = name.lower() in STOP_WORDS | _STARTERS | _NEGATIONS | _AUXILIARIES
            if _NAME.match(name) and not (starts and common):
                self.add(n, "name", name.lower(), name)

    def place_items(self) -> tuple[str, ...]:
        """Pass 2: the content words around each claim (`Claim.near`); returns their stems."""
        content: list[tuple[int, str]] = []  # (token position, stem; "" for a claim)
        for n, lower in enumerate(self.lowered):
            if n in self.absorbed:
                continue
            if n in self.claim_at:
                content.append((n, ""))
            elif (lower.isalpha() or "-" in lower or "'" in lower) and len(lower) > 1 \
                    and lower not in STOP_WORDS | _AUXILIARIES | _NEGATIONS:
                content.append((n, _stem(lower)))
        plain = [(k, stem) for k, (_position, stem) in enumerate(content) if stem]
        for k, (position, _stem_) in enumerate(content):
            if position in self.claim_at:  # the two content words on either side (other claims are not context)
                left = [stem for j, stem in plain if j < k][-2:]
                right = [stem for j, stem in plain if j > k][:2]
                index = self.claim_at[position]
                self.items[index] = replace(self.items[index], near=frozenset(left + right))
        return tuple(stem for _position, stem in content if stem)

    def before(self, n: int) -> str:
        """The word before position n, skipping auxiliaries ("the worker does not cache" -> "worker");
        "" at a sentence's start."""
        k = n - 1
        while k >= 0 and not self.tokens[k + 1][1] and self.lowered[k] in _AUXILIARIES:
            k -= 1
        return "" if k < 0 or self.tokens[k + 1][1] else _stem(self.lowered[k])

    def polarity(self) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        """Pass 3: (word before, stem) of what the text negates, and of what it says without negation."""
        tokens, lowered = self.tokens, self.lowered
        negated: set[tuple[str, str]] = set()
        asserted: set[tuple[str, str]] = set()

        def is_word(k: int) -> bool:  # a plain word or a name ("Retry" opening a sentence reads as one)
            return k not in self.claim_at or self.items[self.claim_at[k]].kind == "name"

        n = 0
        while n < len(tokens):
            lower = lowered[n]
            width = 2 if lower == "no" and n + 1 < len(tokens) and lowered[n + 1] == "longer" else 1
            if lower in _NEGATIONS or lower.endswith("n't") or width == 2:
                k = n + width
                while k < len(tokens) and not tokens[k][1] and (lowered[k] in _SCOPE_SKIP | _NEGATIONS):
                    k += 1
                if k < len(tokens) and not tokens[k][1] and is_word(k):
                    negated.add((self.before(n), _stem(lowered[k])))
                n = k + 1
                continue
            if lower not in _SCOPE_SKIP and n not in self.absorbed and is_word(n):
                stem = _stem(lower)
                if not tokens[n][1] or not lower.endswith(("s", "ed", "ing")):  # "Retry ...", not "Calls to ..."
                    asserted.add((self.before(n), stem))
                if n > 0 and not tokens[n][1]:
                    asserted.add((lowered[n - 1], stem))
            n += 1
        return negated, asserted


def present(item: Claim, other: Claims) -> bool:
    """Whether `other` states this claim too, in whatever words."""
    if item.kind in ("number", "version"):
        for mine in other.items:
            if mine.kind not in ("number", "version"):
                continue
            if mine.value == item.value and mine.unit == item.unit or mine.kind == item.kind == "version" \
                    and mine.value == item.value:
                return True
            # a count without a unit is the same number with one ("net 30" / "30 days"; "15" / "Postgres 15")
            if (not _has_unit(item) or not _has_unit(mine)) and _amount(mine) == _amount(item):
                return True
        return False
    if item.kind == "name":
        return item.value in other.words or _stem(item.value) in other.word_stems
    if item.value in other.words or _stem(item.value) in other.word_stems \
            or any(mine.kind == "identifier" and mine.value == item.value for mine in other.items):
        return True
    parts = re.findall(r"[a-z0-9]+", item.value)
    return bool(parts) and all(part in other.words for part in parts)


def _has_unit(item: Claim) -> bool:
    return item.kind == "number" and bool(item.unit)


def _amount(item: Claim) -> str:
    """The number as written, without its unit: "30" of "30 days"."""
    if item.kind == "version":
        return item.value
    match = re.match(r"[\d.,]+", item.shown.replace(",", ""))
    return f"{float(match.group(0)):.12g}" if match and match.group(0).replace(".", "").isdigit() else item.value


def _same_slot(a: Claim, b: Claim) -> bool:
    """Two differing claims about one thing: numbers of one unit class (3600 s vs 900 s), versions of one
    product, or claims of one kind sharing a content word around them ("Alice owns payments" / "Bob owns payments")."""
    if a.kind == b.kind == "number" and (a.unit or b.unit):
        return a.unit == b.unit
    if a.kind == b.kind == "version" and (a.unit and b.unit):
        return a.unit == b.unit or bool(a.near & b.near)
    if a.kind == b.kind == "version":
        return True
    if {a.kind, b.kind} <= {"number", "version"}:
        return bool(a.near & b.near)
    if a.kind == b.kind == "identifier" and _family(a.value) is not None:
        return bool(_family(a.value)) and _family(a.value) == _family(b.value)  # us-east-1 / us-west-2, Sev1 / Sev2
    if a.kind == b.kind == "name" and a.near & _OWNERSHIP and b.near & _OWNERSHIP:
        return True  # two owners ("maintained by Erik" / "Hannah maintains")
    if a.kind == b.kind:  # a capital that opens a sentence may be an ordinary word: it needs more context
        return len(a.near & b.near) >= (2 if a.initial or b.initial else 1)
    return False


def _family(identifier: str) -> str | None:
    """The leading letters of a letters-and-digits identifier ("us" of us-west-2, "sev" of Sev1); "" when it
    starts with a digit; None for code proper (a path, a dotted name, a code span), which needs context."""
    if identifier.startswith("`") or any(mark in identifier for mark in "_/.:#"):
        return None
    if not any(c.isdigit() for c in identifier):
        return None
    match = re.match(r"[a-z]+", identifier)
    return match.group(0) if match else ""


def conflict(a: str | Claims, b: str | Claims) -> str | None:
    """Why two texts are not one memory, or None (an extra fact in one is no conflict).

    They conflict when each holds a claim the other lacks in one slot (numbers of one unit, versions of one
    product, names sharing a content word: "Alice owns payments" / "Bob owns payments"), when one negates what
    the other asserts ("must run" / "must not run"), or when one content word is swapped.
    """
    first = a if isinstance(a, Claims) else claims(a)
    second = b if isinstance(b, Claims) else claims(b)
    only_first = [item for item in first.items if not present(item, second)]
    only_second = [item for item in second.items if not present(item, first)]
    rank = {"number": 0, "version": 1, "name": 2, "identifier": 3}  # the reason names the first kind that differs
    pairs = sorted(((x, y) for x in only_first for y in only_second), key=lambda p: min(rank[p[0].kind],
                                                                                          rank[p[1].kind]))
    for x, y in pairs:
        if (x.kind == y.kind or {x.kind, y.kind} == {"number", "version"}) and _same_slot(x, y):
            return f"{x.kind if x.kind == y.kind else 'number'}: {x.shown} vs {y.shown}"
    for one, other in ((first, second), (second, first)):
        for before, stem in sorted(one.negated):
            if (before, stem) in other.asserted and not any(s == stem for _b, s in other.negated):
                return f"negation: one says not '{stem}', the other says it"
    swapped_choice = _swapped_alternatives(first, second)
    if swapped_choice:
        return f"choice: {swapped_choice[0]} vs {swapped_choice[1]}"
    swapped = _one_word_swapped(first, second)
    if swapped:
        return f"subject: {swapped[0]} vs {swapped[1]}"
    return None


def _swapped_alternatives(first: Claims, second: Claims) -> tuple[str, str] | None:
    """The two choices, when each text rules out what the other picks ("use X, not Y" / "use Y, not X")."""

    def ruled_out(one: Claims, other: Claims) -> list[str]:
        said = {stem for _before, stem in other.asserted} - {stem for _before, stem in other.negated}
        own = {stem for _before, stem in one.asserted}
        return sorted(stem for _before, stem in one.negated if stem in said and stem not in own)

    against_second, against_first = ruled_out(first, second), ruled_out(second, first)
    for x in against_first:
        for y in against_second:
            if x != y:
                return x, y  # the first picks x and rules out y; the second the other way round
    return None


def _one_word_swapped(first: Claims, second: Claims) -> tuple[str, str] | None:
    """The two words, when the texts' content words are the same but for one swapped (found nowhere in the other)."""
    a, b = first.stems, second.stems
    if len(a) < 4 or len(b) < 4:
        return None
    ops = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(ops) != 1 or ops[0][0] != "replace":
        return None
    _tag, i1, i2, j1, j2 = ops[0]
    if i2 - i1 != 1 or j2 - j1 != 1 or a[i1] in second.word_stems or b[j1] in first.word_stems:
        return None
    return a[i1], b[j1]


# What a decision picks: the word after "use", "chose", "switched to", "stored in", ... ("use celery" -> celery).
_CHOICE_VERBS = frozenset("use uses using used adopt adopts adopted choose chooses chose chosen pick picks picked "
                          "prefer prefers preferred via through with".split())
_CHOICE_THEN = {"to": frozenset("switch switched switches move moved moves migrate migrated migrates".split()),
                "in": frozenset("stored kept live lives stays".split()),
                "on": frozenset("run runs running built".split())}
_CHOICE_SKIP = frozenset({"a", "an", "the", "our", "its", "their", "plain", "only"})


def choices(text: str) -> frozenset[str]:
    """The stems of what a decision picks: the word after a choice verb ("use celery", "stored in Postgres")."""
    tokens = [t.lower().replace("’", "'") for t, _start in _split_tokens(text)]
    out: set[str] = set()
    for n, token in enumerate(tokens[:-1]):
        picks = token in _CHOICE_VERBS or (n > 0 and tokens[n - 1] in _CHOICE_THEN.get(token, ()))
        if not picks or (n > 0 and (tokens[n - 1] in _NEGATIONS or tokens[n - 1].endswith("n't"))):
            continue
        k = n + 1
        while k < len(tokens) and tokens[k] in _CHOICE_SKIP:
            k += 1
        if k < len(tokens):
            word = tokens[k].strip("`")
            if word not in STOP_WORDS | _NEGATIONS | _AUXILIARIES and re.match(r"^[\w.+-]+$", word) \
                    and not word.replace(".", "").isdigit():
                out.add(_stem(word))
    return frozenset(out)


def different_choices(a: str, b: str) -> str | None:
    """Why two decisions are two, or None: each picks what the other never names (or rules out)."""
    first, second = claims(a), claims(b)
    mine, theirs = choices(a), choices(b)

    def unnamed(stem: str, other: Claims) -> bool:
        return stem not in other.word_stems or any(s == stem for _before, s in other.negated)

    only_first = sorted(stem for stem in mine - theirs if unnamed(stem, second))
    only_second = sorted(stem for stem in theirs - mine if unnamed(stem, first))
    if only_first and only_second:
        return f"choice: {only_first[0]} vs {only_second[0]}"
    return None


# What a text says held only in the past ("Until the rollout, ...", "we used to ..."): no claim about now.
_PAST = re.compile(r"^\s*(?:until|previously|formerly|in the past|originally)\b|\bused to\b", re.I)
_SEGMENT = re.compile(r"[.!?]+(?:\s+|$)|[;\n]\s*")  # not the dot of "3.1"
# A clause the text denies, after an opener ("it is not true that C", "nobody has ever seen C", "has stopped
# showing that C", "for a reason other than C") or before a closer ("C — never observed", "C has not happened").
_DENY_AFTER = re.compile(
    r"\b(?:(?:it|this|that)\s+(?:is|was|'s)\s+(?:not\s+true|not\s+the\s+case|wrong|false|untrue|incorrect|a\s+myth)"
    r"\s+that|nobody\s+(?:has\s+)?(?:ever\s+)?(?:seen|observed|reported)|no\s+one\s+(?:has\s+)?(?:ever\s+)?"
    r"(?:seen|observed)|(?:has|have)\s+stopped(?:\s+\w+ing)?(?:\s+that)?|nothing\s+to\s+do\s+with|other\s+than"
    r"|not\s+because(?:\s+of)?)\s+(.+)", re.I)
_DENY_BEFORE = re.compile(
    r"\b(?:(?:has|have|was|were)\s+never\s+been\s+(?:seen|observed)|never\s+(?:observed|seen|happened)|"
    r"(?:has|have)\s+(?:not|never)\s+happened|(?:is|was)\s+not\s+(?:why|the\s+reason|the\s+cause)|isn't\s+why|"
    r"plays?\s+no\s+part)\b", re.I)
_CLAUSE_START = re.compile(r".*[:,—–]|^", re.S)  # the denied clause before a closer starts after the last mark
_PERMITS = frozenset({"may", "allowed", "permitted", "fine", "ok", "okay", "freely", "acceptable"})
_PRONOUNS = frozenset({"it", "they", "this", "that", "its"})


_REFERENCE = re.compile(r"\(#?\d+\)|(?<![\w&])#\d+\b")  # "(#123)", "#456", "(5024)": a reference, not a value


def _now_part(text: str) -> str:
    """The text without references and without the sentences and clauses that say what held only in the past."""
    return "\n".join(part for part in _SEGMENT.split(_REFERENCE.sub(" ", text)) if part and not _PAST.search(part))


def _denied(text: str) -> list[frozenset[str]]:
    """The content stems of each clause the text denies."""
    out = []
    for part in _SEGMENT.split(text):
        clauses = [match.group(1) for match in _DENY_AFTER.finditer(part)]
        for match in _DENY_BEFORE.finditer(part):
            before = part[:match.start()]
            opening = _CLAUSE_START.match(before.rstrip(" ,:—–-"))
            clauses.append(before[opening.end() if opening else 0:])
        for clause in clauses:
            stems = frozenset(claims(clause).stems)
            if len(stems) >= 2:
                out.append(stems)
    return out


def _denial(one: Statement, other: Statement) -> str | None:
    """Why `one` denies what `other` says: a clause `one` denies is (almost) all said in `other`, which does
    not deny it too."""
    for clause in one.denied:
        if len(clause & other.claims.word_stems) >= 0.8 * len(clause) and \
                not any(len(clause & theirs) >= 0.8 * len(clause) for theirs in other.denied):
            return f"denial: one says it is not so that {' '.join(sorted(clause))[:80]}"
    return None


def _permission(one: Claims, other: Claims) -> str | None:
    """One forbids what the other allows ("must never cache" / "may freely cache", "caching is fine")."""
    if not other.words & _PERMITS:
        return None
    allowed = other.word_stems - {stem for _before, stem in other.negated}
    for _before, stem in sorted(one.negated):
        if stem in allowed:
            return f"permission: one forbids '{stem}', the other allows it"
    return None


def _pronoun_negation(one: Claims, other: Claims) -> str | None:
    """"it no longer X" in one, "<subject> X" in the other: a pronoun may name the other's subject."""
    asserted = {stem for _before, stem in other.asserted} - {stem for _before, stem in other.negated}
    for before, stem in sorted(one.negated):
        if before in _PRONOUNS and stem in asserted:
            return f"negation: one says not '{stem}', the other says it"
    return None


SAME_AFTER = 2  # words the two texts go on alike after the words naming two things


def _other_subject(first: Claims, second: Claims) -> tuple[str, str] | None:
    """The words that name two different things, when the texts open with them and go on alike ("the API
    timeout is 30s" / "the worker timeout is 60s"): each side's one to four words among its first few, found
    nowhere in the other."""
    a, b = first.stems, second.stems
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    at = 0
    while at < len(ops) and ops[at][0] in ("insert", "delete"):  # an opener: "It is not true that ..."
        at += 1
    start = (ops[at][1], ops[at][3]) if at < len(ops) else (0, 0)
    at += 1 if at < len(ops) and ops[at][0] == "equal" else 0  # "willow [mesa] index" / "willow [bayou] index"
    if len(ops) < at + 2 or ops[at][0] != "replace" or ops[at + 1][0] != "equal" \
            or ops[at + 1][2] - ops[at + 1][1] < SAME_AFTER:  # "[shorter] sessions" / "[keep] sessions": one thing
        return None
    _tag, i1, i2, j1, j2 = ops[at]
    if i1 - start[0] > 2 or j1 - start[1] > 2 or i2 - i1 > 4 or j2 - j1 > 4:  # words naming the subject come first
        return None
    if any(word in second.word_stems for word in a[i1:i2]) or any(word in first.word_stems for word in b[j1:j2]):
        return None
    return " ".join(a[i1:i2]), " ".join(b[j1:j2])


def _without_openers(found: Claims) -> Claims:
    """Without the names that are only a capital opening a sentence ("Restated for ...", "Kept deliberately"),
    which say nothing about the subject; owners stay ("Alice owns payments")."""
    items = tuple(item for item in found.items if not (item.kind == "name" and item.initial
                                                       and not item.near & _OWNERSHIP))
    return replace(found, items=items)


def subject_words(title: str) -> frozenset[str]:
    """The stems of a title's content words (what `cortex.suspects` finds a memory's subject neighbours by)."""
    return frozenset(_stem(word) for word in _WORDS.findall(title.lower())
                     if word not in STOP_WORDS | _AUXILIARIES | _NEGATIONS and len(word) > 1 and not word.isdigit())


_WORDS = re.compile(r"[a-z][a-z0-9'’-]*")
VALUE_REASONS = ("number", "version", "name", "identifier")  # a reason that two values differ (drift when unlinked)


@dataclass(frozen=True)
class Statement:
    """What `contradiction` reads of one text, once (a queue compares each memory with several)."""

    claims: Claims
    denied: tuple[frozenset[str], ...]
    empty: bool  # nothing said about now


def statement(text: str) -> Statement:
    now = _now_part(text)
    return Statement(_without_openers(claims(now)), tuple(_denied(now)), not now.strip())


def contradiction(a: str | Statement, b: str | Statement) -> str | None:
    """Why two memories' texts cannot both hold now, or None. Unlike `conflict` (why two texts are not one
    memory), an extra fact is no contradiction, and neither is what held only in the past ("Until the rollout,
    ..."), nor two things named differently ("the API timeout" / "the worker timeout").

    The reason is the kind and the two sides: a value ("number: 30 seconds vs 45 seconds", a unit converted
    first), a negation, a denial ("it is not true that ...", "... — never observed", "Z is not why"), a
    permission against a prohibition, a swapped choice or word.
    """
    one = a if isinstance(a, Statement) else statement(a)
    two = b if isinstance(b, Statement) else statement(b)
    if one.empty or two.empty or _other_subject(one.claims, two.claims):
        return None
    first, second = one.claims, two.claims
    return (_denial(one, two) or _denial(two, one) or conflict(first, second)
            or _permission(first, second) or _permission(second, first)
            or _pronoun_negation(first, second) or _pronoun_negation(second, first))
