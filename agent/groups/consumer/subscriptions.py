"""Which topics a KIP-848 member subscribes to: names, or a regular expression.

Where it sits: the consumer-group coordinator resolves every member's
subscription against the topic list before running an assignor. Kafka 4.x
(KIP-848) evaluates ``SubscribedTopicRegex`` with RE2/J, matching the whole topic
name; we use Google's RE2 (the ``google-re2`` package), also a full match, so the
syntax and semantics are RE2's (no back-references or look-around: such a
pattern is INVALID_REGULAR_EXPRESSION, as in Kafka). Internal topics (names
starting with ``__``) never match a regex, as in Kafka. Should ``google-re2`` be
missing (an old virtualenv), Python's ``re`` stands in: the same full match, but
back-references and look-around are then accepted instead of refused.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

try:
    import re2

    _ENGINE: Any = re2
    _ERRORS: tuple[type[Exception], ...] = (re2.error, TypeError, ValueError)
except ImportError:  # pragma: no cover - google-re2 is a dependency
    _ENGINE = re
    _ERRORS = (re.error, TypeError, ValueError)


class InvalidRegex(ValueError):
    pass


@functools.lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Any:
    try:
        return _ENGINE.compile(pattern)
    except _ERRORS as e:
        raise InvalidRegex(str(e)) from e


def check_regex(pattern: str) -> str | None:
    """None when ``pattern`` is a valid RE2 expression, else why not."""
    try:
        compile_regex(pattern)
    except InvalidRegex as e:
        return str(e) or "invalid regular expression"
    return None


def resolve(names: Iterable[str], regex: str | None, topics: Iterable[str]) -> set[str]:
    """The topic names a member with these subscriptions is subscribed to (the
    names themselves, existing or not, plus every topic the regex matches)."""
    out = set(names)
    if regex:
        try:
            rx = compile_regex(regex)
        except InvalidRegex:
            return out
        out |= {t for t in topics if not t.startswith("__") and rx.fullmatch(t) is not None}
    return out
