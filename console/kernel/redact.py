"""Secrets never reach the logs: every log record is created with them masked.

What is masked, wherever it appears in a record's message, its arguments or
its traceback:

* invitation links, ``/invite/<token>/`` (Django logs the path of every 4xx
  answer: an expired or used link would otherwise be written whole);
* gateway keys and personal access tokens (``sk-<id>_<secret>``,
  ``pat_<id>_<secret>``): the public id stays, so a line still says which
  key it was about.

``install`` (``ConsoleConfig.ready``, so every web, gateway and Celery
process) wraps the logging module's record factory, so the masking holds for
every handler: Django's, Celery's (which replaces the root handlers in a
worker), uvicorn's, pytest's. It is a net under the rule, not the rule: code
never logs a secret in the first place (the invitation token travels to the
e-mail task sealed, see ``accounts.services.organizations.invitation_create``).
"""

from __future__ import annotations

import logging
import re

REDACTED = "[redacted]"

_PATTERNS = (
    (re.compile(r"(/invite/)[^/\s?#\"']+"), rf"\g<1>{REDACTED}"),
    (re.compile(r"\b((?:sk-|pat_)[A-Za-z0-9]{6,16}_)[A-Za-z0-9_\-]{8,}"), rf"\g<1>{REDACTED}"),
)
# A key with its secret where one of its prefixes is (a looser test than the
# masking pattern: anything that pattern would change, this finds).
_KEY_AT = re.compile(r"(?:sk-|pat_)[A-Za-z0-9]{6,16}_[A-Za-z0-9_\-]{8}")
_installed = False


def _has_secret(text: str) -> bool:
    """Whether ``text`` may hold something to mask. A line that names a key by
    its public id only (every access line) is told apart at each ``sk-`` or
    ``pat_`` it has, not by a scan of the whole line per pattern."""
    if "/invite/" in text:
        return True
    for prefix in ("sk-", "pat_"):
        at = text.find(prefix)
        while at != -1:
            if _KEY_AT.match(text, at):
                return True
            at = text.find(prefix, at + 3)
    return False


def redact(text: str) -> str:
    if not _has_secret(text):
        return text  # the common case: no substitution
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def mask(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` with its message (and traceback) masked, in place."""
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: leave it for the handler to report
        return record
    masked = redact(message)
    if masked != message:
        record.msg, record.args = masked, None
    if record.exc_info and not record.exc_text:
        # Format the traceback now (handlers reuse ``exc_text``) so it is masked too.
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    return record


def install() -> None:
    """Mask every log record this process creates from now on (idempotent)."""
    global _installed
    if _installed:
        return
    base = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        return mask(base(*args, **kwargs))

    logging.setLogRecordFactory(factory)
    _installed = True
