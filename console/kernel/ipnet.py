"""IP networks: the one place that parses address lists and tests membership.

Used by the API key's IP allowlist (the gateway's key cache and
``AuthenticatedKey.ip_allowed``), the gateway's trusted proxies
(``GATEWAY_TRUSTED_PROXIES``) and the forms and services that validate an
allowlist a person typed. Imports no app.

One rule for IPv4 inside IPv6: an IPv4-mapped IPv6 address (``::ffff:a.b.c.d``)
is that IPv4 address, and a range written in mapped form
(``::ffff:10.0.0.0/104``) is that IPv4 range (``10.0.0.0/8``), so a list
matches whichever way a client's address or an admin's range is written. An
IPv6 range wide enough to hold the whole mapped block (``::/0``) holds every
IPv4 address too.

A list is parsed once (``parse``) into ``Networks``; ``ip in networks`` is
then integer masking, and remembers its last few thousand answers, so the hot
path pays one dictionary look-up per call for a client it has seen.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_MEMO_LIMIT = 4096


def _plain(net: ipaddress.IPv4Network | ipaddress.IPv6Network):
    """``net`` with a mapped-IPv6 range written as the IPv4 range it is."""
    if net.version == 6 and net.prefixlen >= 96 and net.network_address.ipv4_mapped:
        return ipaddress.IPv4Network((int(net.network_address) & 0xFFFFFFFF, net.prefixlen - 96))
    return net


def address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``text`` names (a mapped IPv6 address as its IPv4), or None."""
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if addr.version == 6 and addr.ipv4_mapped:
        return addr.ipv4_mapped
    return addr


def is_address(text: str) -> bool:
    """Whether ``text`` is one IPv4 or IPv6 address (not a range)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class Networks:
    """A parsed, immutable list of networks; ``ip in networks`` tests membership.

    An empty list contains nothing (``bool(networks)`` is False): whether
    empty means "allow all" is the caller's rule, not this class's.
    """

    __slots__ = ("_memo", "_v4", "_v6", "networks")

    def __init__(self, networks: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network] = ()):
        nets: list = []
        for net in networks:
            net = _plain(net)
            if net not in nets:
                nets.append(net)
        self.networks = tuple(nets)
        v4 = [(int(n.network_address), int(n.netmask)) for n in nets if n.version == 4]
        v6 = [(int(n.network_address), int(n.netmask)) for n in nets if n.version == 6]
        if any(n.version == 6 and n.supernet_of(_MAPPED) for n in nets):
            v4.append((0, 0))  # the range holds the mapped block, so every IPv4 address
        self._v4 = tuple(v4)
        self._v6 = tuple(v6)
        self._memo: dict[str, bool] = {}

    def __contains__(self, ip: object) -> bool:
        memo = self._memo
        found = memo.get(ip)  # type: ignore[call-overload]
        if found is None:
            found = self._lookup(ip)
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[ip] = found  # type: ignore[index]
        return found

    def _lookup(self, ip: object) -> bool:
        if isinstance(ip, str):
            addr = address(ip)
        elif isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address):
            addr = ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped else ip
        else:
            addr = None
        if addr is None:
            return False
        value = int(addr)
        ranges = self._v4 if addr.version == 4 else self._v6
        return any(value & mask == base for base, mask in ranges)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __len__(self) -> int:
        return len(self.networks)

    def __iter__(self):
        return iter(self.networks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Networks) and self.networks == other.networks

    def __hash__(self) -> int:
        return hash(self.networks)

    def __repr__(self) -> str:
        return f"Networks({[n.with_prefixlen for n in self.networks]!r})"


EMPTY = Networks()


def parse(entries: Iterable[str], *, on_invalid=None) -> Networks:
    """Parse addresses and CIDR ranges (host bits allowed: ``10.0.0.7/8`` is
    ``10.0.0.0/8``). An entry that is neither is skipped, and passed to
    ``on_invalid`` when given (to log it); ``validate`` is for input that
    must be rejected instead."""
    nets = []
    for raw in entries:
        try:
            nets.append(ipaddress.ip_network(str(raw).strip(), strict=False))
        except ValueError:
            if on_invalid is not None:
                on_invalid(raw)
    return Networks(nets) if nets else EMPTY


def allowed(ip: str, allowlist: Networks | Iterable[str]) -> bool:
    """An allowlist's rule: True when it is empty or ``ip`` falls in one of
    its ranges (an unparseable ``ip`` is then refused)."""
    networks = allowlist if isinstance(allowlist, Networks) else parse(allowlist)
    return not networks or ip in networks


def split(text: str) -> list[str]:
    """The entries of a list typed as text (commas, spaces or new lines)."""
    return [e for e in re.split(r"[\s,]+", text) if e]


def validate(entries: Iterable[str] | str, *, max_entries: int | None = None) -> list[str]:
    """Normalize a typed allowlist: each entry as its network with prefix
    length (``10.0.0.7/8`` → ``10.0.0.0/8``, ``2001:DB8::1`` →
    ``2001:db8::1/128``), blanks dropped, duplicates dropped, input order
    kept. Raises ``ValueError`` naming every entry that is not an address or
    a range, or when there are more than ``max_entries``."""
    if isinstance(entries, str):
        entries = split(entries)
    entries = list(entries)
    if max_entries is not None and len(entries) > max_entries:
        raise ValueError(f"At most {max_entries} IP allowlist entries are allowed.")
    normalized: list[str] = []
    bad: list[str] = []
    for raw in entries:
        entry = str(raw).strip()
        if not entry:
            continue
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            bad.append(entry)
            continue
        text = network.with_prefixlen
        if text not in normalized:
            normalized.append(text)
    if bad:
        quoted = ", ".join(f"'{b}'" for b in bad)
        noun = (
            "is not a valid IP address or CIDR range"
            if len(bad) == 1
            else "are not valid IP addresses or CIDR ranges"
        )
        raise ValueError(f"{quoted} {noun}.")
    return normalized


def forwarded_client(peer: str, forwarded: str | None, trusted: Networks) -> str:
    """The client's address: ``peer``, or when ``peer`` is one of the
    ``trusted`` proxies the right-most hop of ``forwarded`` (an
    ``X-Forwarded-For`` value) that is not one of them. A hop that is not an
    address makes it ``peer``: the header is not to be believed past it. The
    one rule the gateway and the console's sign-in throttle share."""
    if not trusted or peer not in trusted or not forwarded:
        return peer
    for hop in reversed([h.strip() for h in forwarded.split(",")]):
        if not is_address(hop):
            return peer
        if hop not in trusted:
            return hop
    return peer
