"""Django's ``TextChoices``, as the type checker should see it.

Without django-stubs mypy reads ``SPEND_CAP = "spend_cap", _("Spend cap")`` in
a ``models.TextChoices`` body as a tuple attribute, not as a member that is a
``str``. Under ``TYPE_CHECKING`` this module's ``TextChoices`` is a ``str``
enum with Django's extra attributes (``label``, ``choices``, ``values``,
``labels``); at run time it *is* ``django.db.models.TextChoices``, so models,
forms and migrations see nothing different.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, ClassVar

from django.db import models

if TYPE_CHECKING:

    class TextChoices(enum.StrEnum):
        """A member is its value (a ``str``); ``label`` is its human-readable name."""

        label: str
        choices: ClassVar[list[tuple[str, str]]]
        values: ClassVar[list[str]]
        labels: ClassVar[list[str]]

        @property
        def value(self) -> str:
            """The stored string (mypy would take the (value, label) tuple for it)."""
            return str(self)

else:
    TextChoices = models.TextChoices

__all__ = ["TextChoices"]
