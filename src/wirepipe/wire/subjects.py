"""Subjects, one vocabulary: a ``SubjectTemplate`` makes the subject of each record (``orders.{region}``: the
``subject`` operator and the NATS sinks); a subscription's pattern (``orders.*.>``) is matched by
``subject_matches``, as a regular expression over a column by ``subject_regex`` (a capture sliced by subject),
and against a template by ``subjects_overlap`` (a dead letter that would come back to its pipeline);
``SubjectCheck`` refuses what no publish can carry (a wildcard token, whitespace, a subject too long), so a sink
refuses a record the server would answer with a closed connection. wirepipe's own control traffic has its
prefix here too (``CONTROL_PREFIX``: publishers' stamps, the services' endpoints).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence
from typing import Any

from ..core.batch import Batch
from ..core.errors import WirepipeError
from ..core.records import as_dict

# --- subject templates ----------------------------------------------------------------------------


def template_fields(template: str) -> list[str]:
    """The ``{field}`` names of a subject template (``orders.{region}`` -> ``["region"]``).

    Raises ``ValueError`` with the template in the message for a malformed template, an
    empty ``{}`` placeholder, or whitespace (a NATS subject cannot hold it).
    """
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise ValueError(f"subject template {template!r}: {exc}") from None
    if any(not f for f in fields):
        raise ValueError(f"subject template {template!r}: empty {{}} placeholder; name a field such as {{seq}}")
    if any(ch in template for ch in " \t\r\n"):
        raise ValueError(f"subject {template!r} contains whitespace")
    return fields


class SubjectTemplate:
    """A subject, or a template that makes one per record: ``points``, ``blocks.{seq}``, ``out.{subject}``,
    ``orders.{region}`` (what a NATS sink publishes on, what the ``subject`` operator sets).

    A placeholder names a per-record column of the batch: ``subject`` (the subject the record came
    with) or a meta column (``seq`` ...); rendered ``from_records`` (the ``subject`` operator, while
    the values are still records), a meta column or else a field of each record.

    >>> SubjectTemplate("orders.{region}.{seq}").render(Batch([{"region": "eu"}], meta={"seq": [7]}), from_records=True)
    ['orders.eu.7']
    >>> SubjectTemplate("out.{subject}").render(Batch([b"a", b"b"], subjects="in.x"))
    ['out.in.x', 'out.in.x']
    """

    def __init__(self, template: str) -> None:
        self.template = template
        self.fields = template_fields(template)

    @property
    def fixed(self) -> bool:
        """True when the template has no placeholder: one subject for every record."""
        return not self.fields

    def render(self, batch: Batch, *, from_records: bool = False) -> str | list[str]:
        """The template itself when it is fixed, else the subject of each record; ``WirepipeError`` naming
        what is missing when a placeholder names no column (a record without a field: ``KeyError``)."""
        if not self.fields:
            return self.template
        columns: dict[str, Sequence[Any]] = {}
        for f in self.fields:
            if f == "subject" and not from_records:
                if batch.subjects is None:
                    raise WirepipeError(f"subject template {self.template!r}: the records have no subject")
                columns[f] = batch.subjects_column()
            elif f in batch.meta:
                columns[f] = batch.meta[f]
            elif not from_records:
                raise WirepipeError(
                    f"subject template {self.template!r}: no column {f!r} (available: subject, "
                    f"{', '.join(batch.meta) or 'none'}; set per-record subjects with a `subject` operator)")
        fmt = self.template.format
        if from_records:
            if not columns:
                return [fmt(**as_dict(v)) for v in batch.values]
            names = list(columns)
            return [fmt(**{**as_dict(v), **dict(zip(names, row, strict=True))})
                    for v, *row in zip(batch.values, *columns.values(), strict=True)]
        if self.template == "{subject}":
            return list(columns["subject"])
        names = list(columns)
        return [fmt(**dict(zip(names, row, strict=True))) for row in zip(*columns.values(), strict=True)]


# --- subject patterns: what a subscription receives ------------------------------------------------

# A subject is tokens joined by dots; a subscription's pattern may hold two wildcard tokens: ``*`` one
# token, ``>`` one or more at the end. The sink's checks below (no wildcard in a publish) and the
# matching here share these definitions.
TOKEN_SEPARATOR = "."
_UNSENDABLE = re.compile(r"[\x00-\x20\x7f]")  # whitespace and control characters: in no subject
_CHAR_NAMES = {" ": "a space", "\t": "a tab", "\r": "a CR", "\n": "an LF"}
ONE_TOKEN = "*"
THE_REST = ">"
WILDCARDS = (ONE_TOKEN, THE_REST)


def pattern_tokens(pattern: str) -> list[str]:
    """The tokens of a subscription pattern; ``ValueError`` for whitespace or a control character, an empty
    token or a ``>`` before the end (what the server refuses: the one check of every subject a source or a
    filter subscribes to).

    >>> pattern_tokens("orders.*.>")
    ['orders', '*', '>']
    >>> pattern_tokens("orders..eu")
    Traceback (most recent call last):
    ...
    ValueError: subject pattern 'orders..eu': tokens are separated by single dots, and `>` comes last
    """
    if not pattern:
        raise ValueError("the subject is empty: give one, e.g. points or points.>")
    bad = _UNSENDABLE.search(pattern)
    if bad is not None:
        what = _CHAR_NAMES.get(bad.group(), f"the control character {bad.group()!r}")
        raise ValueError(f"subject pattern {shown_subject(pattern)} contains {what} (at character {bad.start() + 1}): "
                         "a subject holds no whitespace or control characters")
    tokens = pattern.split(TOKEN_SEPARATOR)
    if any(not t for t in tokens) or any(t == THE_REST for t in tokens[:-1]):
        raise ValueError(f"subject pattern {shown_subject(pattern)}: tokens are separated by single dots, and `>` "
                         "comes last")
    return tokens


def subscription_pattern(pattern: str) -> str:
    """``pattern`` when a subscription can take it (``pattern_tokens``); what config fields validate with."""
    pattern_tokens(pattern)
    return pattern


def subject_regex(pattern: str) -> str:
    """A subscription pattern as a regular expression over whole subjects (to match a column of them at
    once, as a capture sliced by subject is: no server is there to route).

    >>> import re
    >>> [bool(re.fullmatch(subject_regex("orders.*.>"), s)) for s in ("orders.eu.1", "orders.eu", "orders.eu.1.2")]
    [True, False, True]
    """
    parts = ["[^.]+" if t == ONE_TOKEN else ".+" if t == THE_REST else re.escape(t) for t in pattern_tokens(pattern)]
    return re.escape(TOKEN_SEPARATOR).join(parts)


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether a subscription to ``pattern`` receives ``subject``.

    >>> subject_matches("orders.*.>", "orders.eu.1"), subject_matches("orders.*", "orders.eu.1")
    (True, False)
    """
    return _meet(pattern.split(TOKEN_SEPARATOR), subject.split(TOKEN_SEPARATOR))


def subjects_overlap(pattern: str, template: str) -> bool:
    """True when some subject matches the subscription ``pattern`` and can be made by the publish
    ``template`` (its ``{field}`` placeholders stand for any text, dots included: ``{subject}`` may be
    ``a.b.c``): a dead letter that would come back to the pipeline that sent it, a stamp a source reads.

    >>> subjects_overlap("in.>", "in.dead"), subjects_overlap("in7.>", "in7.dead.{subject}")
    (True, True)
    >>> subjects_overlap("in.*", "in.dead.{subject}"), subjects_overlap("in.>", "dlq.in.{subject}")
    (False, False)
    >>> subjects_overlap("orders.*", "orders.{region}-dead"), subjects_overlap("orders.eu", "orders.{r}-dead")
    (True, False)
    """
    return _meet(pattern.split(TOKEN_SEPARATOR), [_template_token(t) for t in template.split(TOKEN_SEPARATOR)])


def _template_token(token: str) -> str | tuple[str, str]:
    """A literal token, or (text before the first placeholder, text after the last one)."""
    if "{" not in token:
        return token
    return token[:token.index("{")], token[token.rindex("}") + 1:] if "}" in token else ""


def _meet(pattern: list[str], tokens: Sequence[str | tuple[str, str]]) -> bool:
    """Whether the pattern's tokens and a subject's (literal tokens, or placeholders of a template) can be one
    subject."""
    if not pattern or not tokens:
        return not pattern and not tokens
    head = pattern[0]
    if head == THE_REST:
        return True  # one or more tokens of anything: whatever the template makes from here on
    t = tokens[0]
    if isinstance(t, str):
        return head in (ONE_TOKEN, t) and _meet(pattern[1:], tokens[1:])
    prefix, suffix = t  # a placeholder token: one or more tokens, the first starting with prefix, the last
    if head != ONE_TOKEN and not head.startswith(prefix):  # ending with suffix
        return False
    for k in range(1, len(pattern) + 1):
        last = pattern[k - 1]
        if last == THE_REST:
            return True
        if (last == ONE_TOKEN or last.endswith(suffix)) and _meet(pattern[k:], tokens[1:]):
            return True
    return False


# --- subjects a publish can carry ---------------------------------------------------------------

# nats-server's default ``max_control_line``: the longest protocol line it reads from a client. A longer
# ``PUB``/``HPUB`` line ("maximum control line exceeded") closes the connection, and with it whatever the
# client had buffered after that line. The server's INFO does not announce it: a server configured
# otherwise is told to the sink (``max_control_line``).
MAX_CONTROL_LINE = 4096
# wirepipe's own control traffic (stamps, service endpoints): never a record, even to a subscription to ``>``.
CONTROL_PREFIX = "_WIREPIPE."
# Publisher stamps travel on this prefix + the data subject (docs/concepts/wire-contract.md).
STAMP_PREFIX = CONTROL_PREFIX + "last."
# A running pipeline's NATS service (pipelines/service.py) answers the protocol on $SRV.PING|INFO|STATS, and its
# endpoints on this prefix + <service name>.<service id>.stats and .health.
SERVICE_PREFIX = CONTROL_PREFIX + "service."
# Subjects that carry no data: NATS's own namespace ($SRV services, $JS JetStream's API and acks, $KV and $O the
# stores, $SYS), request replies (_INBOX, the clients' default inbox prefix) and wirepipe's control traffic.
SYSTEM_PREFIXES = ("$", "_INBOX.", CONTROL_PREFIX)


def skips_system(pattern: str) -> bool:
    """A subscription to ``pattern`` matches system subjects (``SYSTEM_PREFIXES``) without naming them: its first
    token is a wildcard (``>``, ``*.stats``). What it receives there is not a record; a pattern that names the
    namespace (``$SRV.>``, ``_INBOX.>``) reads it.

    >>> skips_system(">"), skips_system("*.STATS"), skips_system("$SRV.>"), skips_system("points.>")
    (True, True, False, False)
    """
    return pattern.partition(TOKEN_SEPARATOR)[0] in WILDCARDS


def system_namespace(subject: str) -> str:
    """The namespace a system subject is counted under: its first token (``$SRV``, ``$JS``, ``_INBOX``,
    ``_WIREPIPE``)."""
    return subject.partition(TOKEN_SEPARATOR)[0]
# Whitespace or a control character anywhere; or an empty token (leading, trailing or double dot, or an
# empty subject), or a ``*``/``>`` token: a publish names one subject, wildcards are for subscriptions.
_WILD = "[" + re.escape("".join(WILDCARDS)) + "]"
_DOT = re.escape(TOKEN_SEPARATOR)
_NOT_PUBLISHABLE = re.compile(rf"[\x00-\x20\x7f]|(?:^|{_DOT}){_WILD}?(?:{_DOT}|$)")


def subject_room(max_control_line: int, max_payload: int, reply: int = 0) -> int:
    """The longest subject, in UTF-8 bytes, a publish line can carry.

    The server measures ``<subject> [<reply>] <header size> <total size>`` (the line after ``HPUB``)
    against ``max_control_line`` (nats-server 2.15 closed the connection at a line of exactly 4096 bytes,
    so it must be shorter); both sizes are counted as long as ``max_payload`` allows, ``reply`` is the
    length of the reply subject (a JetStream publish has one).

    >>> subject_room(4096, 1048576), subject_room(4096, 1048576, reply=40)
    (4079, 4038)
    """
    digits = len(str(max_payload))
    return max_control_line - 1 - 2 * (digits + 1) - (reply + 1 if reply else 0)


def shown_subject(subject: str) -> str:
    """A subject as messages show it: quoted with its control characters escaped, cut at 64 characters."""
    return repr(subject[:64]) + ("..." if len(subject) > 64 else "")


def subject_problem(subject: str, room: int, max_control_line: int = MAX_CONTROL_LINE) -> str | None:
    """Why a NATS client cannot publish on ``subject`` (None when it can): whitespace or a control
    character (nats-py refuses CR, LF, space and tab; the others reach consumers as garbage), an empty
    token, a ``*``/``>`` token, more than ``room`` bytes (``subject_room``), or text that is not UTF-8.

    >>> subject_problem("orders.eu", 4079) is None
    True
    >>> subject_problem("orders.b.>", 4079)
    "subject 'orders.b.>' has a wildcard token '>': a publish names one subject"
    """
    bad = _NOT_PUBLISHABLE.search(subject)
    if bad is not None:
        found = bad.group()
        if not subject:
            return "the subject is empty"
        if found.strip(TOKEN_SEPARATOR) in WILDCARDS:
            return (f"subject {shown_subject(subject)} has a wildcard token {found.strip('.')!r}: "
                    "a publish names one subject")
        if len(found) == 1 and found != TOKEN_SEPARATOR and found not in WILDCARDS:
            what = _CHAR_NAMES.get(found, f"the control character {found!r}")
            return f"subject {shown_subject(subject)} contains {what} (at character {bad.start() + 1})"
        return f"subject {shown_subject(subject)} has an empty token (a leading, trailing or double '.')"
    try:
        size = len(subject) if subject.isascii() else len(subject.encode())
    except UnicodeEncodeError:
        return f"subject {shown_subject(subject)} is not valid UTF-8"
    if size > room:
        return (f"subject {shown_subject(subject)} is {size:,} bytes: a publish line holds at most {room:,} "
                f"(the server's max_control_line {max_control_line:,} less the line's other fields)")
    return None


def publish_template_problem(template: str) -> str | None:
    """Why no record could be published on the subject ``template`` (None when some can): a malformed
    template (``template_fields``), or a problem of its literal text (``subject_problem``: an empty subject or
    token, a wildcard token, whitespace), each placeholder standing for some text. What a sink's ``subject``
    is validated with; each rendered subject is checked again when it is published.

    >>> publish_template_problem("points.>")
    "subject 'points.>' has a wildcard token '>': a publish names one subject"
    >>> publish_template_problem("out.{subject}") is None, publish_template_problem("")
    (True, 'the subject is empty')
    """
    try:
        template_fields(template)
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        return str(exc)
    literal = "".join(text + ("x" if name is not None else "") for text, name, _, _ in parts)
    problem = subject_problem(literal, len(literal.encode()) + 1)
    return None if problem is None else problem.replace(shown_subject(literal), shown_subject(template))


class SubjectCheck:
    """Which subjects of a column can be published (``subject_problem``), cheaply on the hot path.

    A column of subjects is joined with spaces (a character no good subject holds) and searched as
    one string by C-level scans (no control character, as many spaces as separators, no empty token,
    no ``*``/``>`` token, none longer than ``room``): about 0.1-0.2 us a record. Only when that finds
    something (or the text is not ASCII) is each distinct subject checked on its own. Subjects found
    good are remembered while the columns repeat them (``orders.{region}``: a batch then costs a
    ``set`` of its column, and a batch with one subject a set lookup); a template that makes a new
    subject per record (``blocks.{seq}``) would only pay for remembering, so it is not done while
    most subjects are new (looked at again every ``_RECHECK`` batches).
    """

    _REMEMBERED = 65536
    _RECHECK = 16

    def __init__(self, room: int, max_control_line: int = MAX_CONTROL_LINE) -> None:
        self.room = room
        self.max_control_line = max_control_line
        self._good: set[str] = set()
        self._columns = 0
        self._recurring = True  # the last columns mostly repeated subjects seen before

    def problems(self, subjects: str | Sequence[str]) -> dict[str, str]:
        """``{subject: why}`` for the subjects of ``subjects`` that cannot be published (usually empty)."""
        good = self._good
        if isinstance(subjects, str):
            if subjects in good:
                return {}
            new: list[str] = [subjects]
        else:
            self._columns += 1
            if not self._recurring and self._columns % self._RECHECK:
                return {} if self._all_publishable(subjects) else self._each(set(subjects))
            distinct = set(subjects)
            if distinct <= good:
                return {}
            new = list(distinct - good)
            self._recurring = 2 * len(new) < len(subjects)
        bad = {} if self._all_publishable(new) else self._each(new)
        if len(good) + len(new) > self._REMEMBERED:
            good.clear()
        good.update(new if not bad else [s for s in new if s not in bad])
        return bad

    def _each(self, subjects: Iterable[str]) -> dict[str, str]:
        bad: dict[str, str] = {}
        for s in subjects:
            why = subject_problem(s, self.room, self.max_control_line)
            if why is not None:
                bad[s] = why
        return bad

    def _all_publishable(self, subjects: Sequence[str]) -> bool:
        """True when every subject is certainly fine; False when one may not be (then each is checked)."""
        joined = " ".join(subjects)
        if not (joined.isascii() and joined.isprintable()) or joined.count(" ") != len(subjects) - 1:
            return False  # a control character or a space in a subject, or text the server may count longer
        dotted = joined.replace(" ", ".")  # an empty subject or token is now a leading, trailing or double dot
        if not dotted or dotted[0] == "." or dotted[-1] == "." or ".." in dotted:
            return False
        if (ONE_TOKEN in dotted or THE_REST in dotted) and _WILDCARD_TOKEN.search(dotted):
            return False
        return max(map(len, subjects)) <= self.room


_WILDCARD_TOKEN = re.compile(rf"(?:^|{_DOT}){_WILD}(?={_DOT}|$)")


def publishable_subject(subject: str, room: int) -> str:
    """``subject`` made publishable for a dead letter: every character or token a publish cannot carry
    becomes ``_``, cut to ``room`` bytes (the record's real subject goes in ``Wirepipe-Subject``, escaped)."""
    if subject_problem(subject, room) is None:
        return subject
    text = re.sub(r"[\x00-\x20\x7f]", "_", subject.encode("utf-8", "replace").decode("utf-8", "replace"))
    tokens = [t if t and t not in WILDCARDS else "_" for t in text.split(TOKEN_SEPARATOR)]
    out = ".".join(tokens).encode()[:room].decode("utf-8", "ignore").rstrip(".")
    return out or "_"
