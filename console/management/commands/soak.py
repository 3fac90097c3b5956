"""``manage.py soak``: its code is tooling (``tooling.soak.command``), which nothing
the product serves imports; this module is the command's door."""

from tooling.soak.command import Command

__all__ = ["Command"]
