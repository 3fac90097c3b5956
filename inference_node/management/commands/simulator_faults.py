"""``python manage.py simulator_faults``: inject faults into the demo simulators.

Names a shared node as the console shows it (``simulator-1``, ``sim-openai`` ...)
and changes the fault profile of the simulator behind its registered URL at run
time, over that simulator's loopback admin endpoint (``tooling.simulator.admin``),
with the admin secret ``manage.py up`` gave it (derived from ``SECRET_KEY``)::

    manage.py simulator_faults --node simulator-1 --error-rate 0.3 --latency-ms 500 --for 10m
    manage.py simulator_faults --node simulator-1 --clear
    manage.py simulator_faults --list

``--error-rate`` answers that share of calls with ``--status`` (500, 429 or 503);
``--latency-ms`` adds that much to every call's time to first token; ``--for``
undoes the change after a while (``90s``, ``10m``, ``1h``); ``--clear`` goes
back to the faults the simulator started with. The vendor simulator backs the
three ``sim-*`` channels at one URL, so a fault set through one reaches all three.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inference_node.models import Node
from tooling.simulator.admin import (
    FaultControl,
    FaultControlError,
    FaultState,
    derive_admin_secret,
    is_loopback_peer,
)

STATUS_FIELDS = {500: "fault_500_rate", 429: "fault_429_rate", 503: "fault_503_rate"}
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")


def parse_duration(raw: str) -> float:
    """``90``, ``90s``, ``10m`` or ``1h`` in seconds (more than 0)."""
    match = _DURATION.match(raw)
    seconds = float(match[1]) * _UNITS[match[2]] if match else 0.0
    if seconds <= 0:
        raise CommandError(f"--for {raw!r}: give a duration such as 90s, 10m or 1h")
    return seconds


def fault_changes(*, error_rate: float | None, status: int, latency_ms: float | None) -> dict:
    """The admin endpoint's fault fields for the command's options."""
    changes: dict = {}
    if error_rate is not None:
        if not 0.0 <= error_rate <= 1.0:
            raise CommandError("--error-rate must be between 0 and 1")
        changes.update(dict.fromkeys(STATUS_FIELDS.values(), 0.0))
        changes[STATUS_FIELDS[status]] = error_rate
    if latency_ms is not None:
        if latency_ms < 0:
            raise CommandError("--latency-ms must not be negative")
        # every call spiked by exactly latency_ms (no multiple of its own prefill)
        changes.update(spike_rate=1.0 if latency_ms else 0.0, spike_multiplier=1.0)
        changes["spike_ms"] = latency_ms
    return changes


def describe(state: FaultState) -> str:
    """One line: the error rates, the added latency and how long that lasts."""
    s = state.settings
    parts = [f"{status}: {s[name]:g}" for status, name in STATUS_FIELDS.items() if s.get(name)]
    text = f"error rate {', '.join(parts)}" if parts else "no injected errors"
    if s.get("spike_rate"):
        text += f"; latency +{s['spike_ms']:g} ms on {s['spike_rate']:.0%} of calls"
    if state.expires_in is not None:
        text += f"; undone in {state.expires_in:.0f}s"
    return text


def demo_simulators() -> list[Node]:
    """The shared nodes whose registered URL is on loopback (what ``up`` starts)."""
    nodes = Node.objects.filter(organization=None).order_by("name")
    return [node for node in nodes if _loopback_url(node.base_url)]


def _loopback_url(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host == "localhost" or is_loopback_peer((host, 0))


class Command(BaseCommand):
    help = "Inject faults (errors, latency) into a running demo simulator, or clear them."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--node", help="the node's name as the console shows it")
        parser.add_argument("--error-rate", type=float, help="share of calls that fail, 0..1")
        parser.add_argument("--status", type=int, choices=sorted(STATUS_FIELDS), default=500)
        parser.add_argument("--latency-ms", type=float, help="added to every call's first token")
        parser.add_argument("--for", dest="duration", help="undo after this long: 90s, 10m, 1h")
        parser.add_argument("--clear", action="store_true", help="back to the starting faults")
        parser.add_argument("--list", action="store_true", help="the demo simulators' faults")

    def handle(self, *args, **options) -> None:
        if options["list"]:
            self.list_nodes()
            return
        if not options["node"]:
            raise CommandError("name a node with --node (see --list)")
        control = self.control(options["node"])
        try:
            state = control.clear() if options["clear"] else self.apply(control, options)
        except FaultControlError as error:
            raise CommandError(f"{options['node']}: {error}") from None
        self.stdout.write(f"{options['node']}: {describe(state)}")

    def apply(self, control: FaultControl, options: dict) -> FaultState:
        changes = fault_changes(
            error_rate=options["error_rate"],
            status=options["status"],
            latency_ms=options["latency_ms"],
        )
        if not changes:
            raise CommandError("nothing to change: give --error-rate, --latency-ms or --clear")
        duration = options["duration"]
        return control.set(changes, parse_duration(duration) if duration else None)

    def control(self, name: str) -> FaultControl:
        node = Node.objects.filter(organization=None, name=name).first()
        if node is None:
            raise CommandError(f"no shared node named {name!r} (see --list)")
        if not _loopback_url(node.base_url):
            raise CommandError(f"{name} is at {node.base_url}, not a simulator on this machine")
        base_url = node.base_url.replace("://localhost", "://127.0.0.1", 1)
        return FaultControl(base_url, derive_admin_secret(settings.SECRET_KEY))

    def list_nodes(self) -> None:
        nodes = demo_simulators()
        if not nodes:
            self.stdout.write("No demo simulators are registered (manage.py up registers them).")
        for node in nodes:
            try:
                text = describe(self.control(node.name).get())
            except (FaultControlError, CommandError) as error:
                text = f"not reachable ({error})"
            self.stdout.write(f"{node.name}  {node.base_url}  {text}")
