"""Passwords out of anything printed or logged: URLs and the messages that quote them.

Sits under every place that shows a metastore, object store or service URL to a
person (the ``floe`` commands, ``floe doctor``, agent logs): database URLs carry
``user:password@``, and a driver's error message may quote the URL it was given,
so both the URL and the text around it are cleaned. Any scheme
(``postgresql+asyncpg://``, ``http(s)://``, ``s3://``); the password becomes
``***``, as SQLAlchemy's ``render_as_string(hide_password=True)`` writes it.
"""

from __future__ import annotations

from urllib.parse import quote, unquote, urlsplit, urlunsplit

MASK = "***"


def _password(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    user, at, _host = parts.netloc.rpartition("@")
    if not at:
        return None
    _name, colon, password = user.partition(":")
    return password if colon and password else None


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (unchanged when it has none)."""
    password = _password(url)
    if password is None:
        return url
    parts = urlsplit(url)
    user, _at, host = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{name}:{MASK}@{host}"))


def redact_text(text: str, *urls: str) -> str:
    """``text`` (an error message) with the password of each of ``urls`` masked,
    whether it appears inside the URL or on its own (4 characters or more), raw
    or percent-decoded."""
    for url in urls:
        password = _password(url or "")
        if password is None:
            continue
        for form in {password, unquote(password), quote(unquote(password), safe="")}:
            text = text.replace(f":{form}@", f":{MASK}@")
            if len(form) >= 4:  # a very short one would mask unrelated characters
                text = text.replace(form, MASK)
    return text
