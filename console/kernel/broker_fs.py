"""The embedded broker: kombu's filesystem transport, made safe to read while
it is written and to survive a bad message file.

kombu's own transport writes a message file in place under its final name
(``<ms>_<uuid>.<queue>.msg``) while a consumer lists the folder and reads
whatever is there: under load a worker read an empty or half-written file
and died (``Unrecoverable error: JSONDecodeError``). This transport:

- writes each message to a temporary file in the same folder, under a name
  no reader takes for a message (``.<uuid>.tmp``: kombu's reader, this one's
  and ``_size``/``_purge`` keep only names whose part after the first dot is
  ``<queue>.msg``), fsyncs it and renames it (``os.replace``) to its final
  name: a reader sees either nothing or the whole message;
- claims a message by renaming it (one reader wins, on the same filesystem),
  then reads it; a file that is not a whole kombu message (empty, truncated,
  not JSON, not the shape kombu delivers) is moved to the quarantine folder
  (``quarantine_folder``, by default ``quarantine/`` beside the queue folder)
  with a WARNING naming it, and the next message is tried: nothing a file
  holds makes ``_get`` raise.

The file format and names are kombu's, so spools and queued messages written
by the stock transport are read as before. ``install()`` registers it as
kombu's ``filesystem`` transport (and as ``consolefs``) in this process:
``console.settings`` and ``console.kernel.celery`` call it, so the worker and every
publisher (the gateway's usage emitter included) use it."""

from __future__ import annotations

import binascii
import contextlib
import errno
import logging
import os
import shutil
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, _transport_cache
from kombu.transport import filesystem as kombu_fs
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads
from kombu.utils.objects import cached_property

logger = logging.getLogger(__name__)

ALIAS = "consolefs"
TRANSPORT_PATH = "console.kernel.broker_fs:Transport"
#: Suffix of a message being written: never ``<queue>.msg`` after the first dot.
TEMP_SUFFIX = ".tmp"
#: Suffix of a message a reader has claimed and is reading.
CLAIM_SUFFIX = ".claimed"


class MalformedMessage(ValueError):
    """A queue file that is not a whole kombu message."""


def parse_message(data: bytes) -> dict:
    """The kombu message in ``data``, or ``MalformedMessage`` saying why not:
    what ``virtual.Message`` and Celery read from it must be there."""
    if not data.strip():
        raise MalformedMessage("empty file")
    try:
        payload = loads(bytes_to_str(data))
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedMessage(f"not JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise MalformedMessage("not a JSON object")
    properties = payload.get("properties")
    if not isinstance(properties, dict):
        raise MalformedMessage("no properties")
    if "delivery_tag" not in properties:
        raise MalformedMessage("no delivery_tag")
    delivery_info = properties.get("delivery_info")
    if not isinstance(delivery_info, dict) or not {"exchange", "routing_key"} <= set(delivery_info):
        raise MalformedMessage("no delivery_info")
    body = payload.get("body")
    if body is not None and not isinstance(body, str):
        raise MalformedMessage("body is not a string")
    headers = payload.get("headers")
    if headers is not None and not isinstance(headers, dict):
        raise MalformedMessage("headers is not an object")
    encoding = properties.get("body_encoding")
    if body and encoding and str(encoding).lower() == "base64":
        try:
            binascii.a2b_base64(str_to_bytes(body))
        except (binascii.Error, ValueError) as exc:
            raise MalformedMessage(f"body is not base64 ({exc})") from None
    return payload


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _move(source: str, target: str) -> None:
    """Rename ``source`` to ``target`` (a copy where they are on different
    filesystems)."""
    try:
        os.replace(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.move(source, target)


class Channel(kombu_fs.Channel):
    """kombu's filesystem channel with atomic writes and a quarantine."""

    # kombu's filesystem channel names AbstractChannel's "message" "payload"; as it does:
    def _put(self, queue, payload, **kwargs):  # type: ignore[override]
        """Write ``payload`` to a temporary file, fsync it, then rename it to
        the message's final name."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        temp = os.path.join(self.data_folder_out, f".{uuid.uuid4()}{TEMP_SUFFIX}")
        data = str_to_bytes(dumps(payload))
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _get(self, queue, timeout=None):
        """The next whole message of ``queue``; a malformed one is quarantined
        and the next one tried. ``Empty`` when there is none (at once: ``timeout``,
        kombu's, is not waited on, as by kombu's own filesystem channel)."""
        queue_find = f"{queue}.msg"
        folder = self.data_folder_in
        try:
            names = sorted(os.listdir(folder))
        except OSError as exc:
            raise ChannelError(f"Cannot list the queue folder {folder!r}") from exc
        for name in names:
            # only this queue's messages (never a temporary or claimed file)
            if name.partition(".")[2] != queue_find:
                continue
            claimed = os.path.join(folder, name + CLAIM_SUFFIX)
            try:
                os.rename(os.path.join(folder, name), claimed)
            except OSError:
                continue  # another reader took it, or it is gone
            try:
                with open(claimed, "rb") as f:
                    # A writer still writing in place (kombu's own transport,
                    # in a process without this one) holds an exclusive lock.
                    kombu_fs.lock(f, kombu_fs.LOCK_SH)
                    try:
                        data = f.read()
                    finally:
                        kombu_fs.unlock(f)
                payload = parse_message(data)
            except (OSError, MalformedMessage) as exc:
                self._quarantine(claimed, name, exc)
                continue
            self._done(claimed, name)
            return payload
        raise Empty()

    def _done(self, claimed: str, name: str) -> None:
        """A message read: kept in the processed folder, or removed."""
        try:
            if self.store_processed:
                _move(claimed, os.path.join(self.processed_folder, name))
            else:
                os.remove(claimed)
        except OSError:
            logger.warning(
                "embedded broker: could not clear the read message %s", claimed, exc_info=True
            )

    def _quarantine(self, claimed: str, name: str, reason: Exception) -> None:
        folder = self.quarantine_folder
        target = os.path.join(folder, name)
        try:
            os.makedirs(folder, exist_ok=True)
            _move(claimed, target)
        except OSError:
            logger.error(
                "embedded broker: malformed message %s (%s) could not be moved to %s",
                claimed,
                reason,
                folder,
                exc_info=True,
            )
            return
        logger.warning(
            "embedded broker: malformed message %s quarantined as %s: %s",
            name,
            target,
            reason,
            extra={"broker_file": name, "quarantined_as": target},
        )

    @cached_property
    def quarantine_folder(self) -> str:
        folder = self.transport_options.get("quarantine_folder")
        if folder:
            return str(folder)
        return str(Path(self.data_folder_in).resolve().parent / "quarantine")


class Transport(kombu_fs.Transport):
    """kombu's filesystem transport with ``Channel`` above."""

    Channel = Channel


def install() -> None:
    """Make ``filesystem://`` (and ``consolefs://``) this transport in this
    process; idempotent."""
    for name in ("filesystem", ALIAS):
        if TRANSPORT_ALIASES.get(name) != TRANSPORT_PATH:
            TRANSPORT_ALIASES[name] = TRANSPORT_PATH
            _transport_cache.pop(name, None)
