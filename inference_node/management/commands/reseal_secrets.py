"""``python manage.py reseal_secrets``: re-encrypt every sealed secret (node
tokens, the API keys of every key pool) with the first key of
``CONSOLE_SECRET_KEYS``.

Key rotation: put the new key first in ``CONSOLE_SECRET_KEYS``, keep the old
ones after it, run this command, then drop the old keys. It reads and writes
the sealed column text directly (the model field would hand back clear text),
in one transaction, and prints only counts: never a value, never a hint. A
value no configured key opens stops the command with the table and row id,
and nothing is changed. A value still in clear (written before sealing) is
sealed.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from console.kernel.crypto import SecretUnreadable, is_sealed, reseal, seal
from inference_node.models import Credential, Node

# (what to call it, model, column)
SEALED = (("node tokens", Node, "token"), ("API keys", Credential, "secret"))


def _reseal_column(model, column: str) -> tuple[int, int]:
    """(values resealed, values sealed from clear) of one column."""
    table = connection.ops.quote_name(model._meta.db_table)
    col = connection.ops.quote_name(model._meta.get_field(column).column)
    pk = connection.ops.quote_name(model._meta.pk.column)
    resealed = from_clear = 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {pk}, {col} FROM {table} WHERE {col} <> ''")  # noqa: S608
        rows = cursor.fetchall()
        for row_id, stored in rows:
            if is_sealed(stored):
                try:
                    new = reseal(stored)
                except SecretUnreadable:
                    raise CommandError(
                        f"{model._meta.db_table} row {row_id}: no key of CONSOLE_SECRET_KEYS "
                        "opens it; nothing was changed."
                    ) from None
                resealed += 1
            else:
                new = seal(stored)
                from_clear += 1
            cursor.execute(
                f"UPDATE {table} SET {col} = %s WHERE {pk} = %s",  # noqa: S608
                [new, row_id],
            )
    return resealed, from_clear


class Command(BaseCommand):
    help = "Re-encrypt every node token and API key with the first key of CONSOLE_SECRET_KEYS."

    def handle(self, *args, **options) -> None:
        with transaction.atomic():
            counts = [(label, *_reseal_column(model, column)) for label, model, column in SEALED]
        for label, resealed, from_clear in counts:
            line = f"{label}: {resealed} re-encrypted with the first key"
            if from_clear:
                line += f", {from_clear} sealed (were stored in clear)"
            self.stdout.write(line)
