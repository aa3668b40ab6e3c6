"""The wire contract in one place: header names, header-block sizes, subjects, dead letters.

A wirepipe record on NATS is payload = compress(serialize(value)) plus a header block
(docs/concepts/wire-contract.md). The package holds one concept per module, each re-exported here
(``from wirepipe.wire import X``): ``headers`` (the header names, ``Header``, which every module that reads or
writes those headers takes them from; the size of a header block, which the NATS sinks measure with
``header_size``), ``subjects`` (the one vocabulary of subjects: a record's subject made from a template, a
subscription's pattern matched, what no publish can carry refused) and ``dead_letters`` (the dead-letter
encodings, envelopes for files and original payloads for NATS subjects, built from one per-record header rule).
"""

from .dead_letters import dead_letter_batch, dead_letter_headers, dead_letter_payloads
from .headers import (
    HDR_LINE,
    HDR_STATUS,
    HEADER_NAMES,
    SENT_AT_SIZE,
    STAMP_SIZE,
    Header,
    entry_size,
    header_lines,
    header_size,
    sent_at_column,
    set_header,
    set_headers,
)
from .subjects import (
    CONTROL_PREFIX,
    MAX_CONTROL_LINE,
    ONE_TOKEN,
    SERVICE_PREFIX,
    STAMP_PREFIX,
    SYSTEM_PREFIXES,
    THE_REST,
    TOKEN_SEPARATOR,
    WILDCARDS,
    SubjectCheck,
    SubjectTemplate,
    pattern_tokens,
    publish_template_problem,
    publishable_subject,
    shown_subject,
    skips_system,
    subject_matches,
    subject_problem,
    subject_regex,
    subject_room,
    subjects_overlap,
    subscription_pattern,
    system_namespace,
    template_fields,
)

__all__ = [
    "CONTROL_PREFIX",
    "HDR_LINE",
    "HDR_STATUS",
    "HEADER_NAMES",
    "MAX_CONTROL_LINE",
    "ONE_TOKEN",
    "SENT_AT_SIZE",
    "SERVICE_PREFIX",
    "STAMP_PREFIX",
    "STAMP_SIZE",
    "SYSTEM_PREFIXES",
    "THE_REST",
    "TOKEN_SEPARATOR",
    "WILDCARDS",
    "Header",
    "SubjectCheck",
    "SubjectTemplate",
    "dead_letter_batch",
    "dead_letter_headers",
    "dead_letter_payloads",
    "entry_size",
    "header_lines",
    "header_size",
    "pattern_tokens",
    "publish_template_problem",
    "publishable_subject",
    "sent_at_column",
    "set_header",
    "set_headers",
    "shown_subject",
    "skips_system",
    "subject_matches",
    "subject_problem",
    "subject_regex",
    "subject_room",
    "subjects_overlap",
    "subscription_pattern",
    "system_namespace",
    "template_fields",
]
