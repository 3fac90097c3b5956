"""Which addresses a tenant's node may point at (server-side request forgery).

A tenant's node or channel makes this deployment's gateway and prober send
requests on the tenant's behalf. Unless platform staff allow private
addresses (``NODE_ALLOW_PRIVATE_URLS=true``; off by default), its host must
resolve only to public unicast addresses. ``guarded`` is that rule: a node
with an organization, under the default setting. Shared platform nodes
(no organization, set up by staff) are never limited: ``manage.py up``'s
simulators live on 127.0.0.1.

Refused (``why_not_public``), from explicit tables of the IANA special-purpose
registries rather than ``ipaddress``'s ``is_global`` (whose answers change
between Python releases: 3.11 takes 192.0.0.8 and fec0::1 for public):

- IPv4: 0.0.0.0/8, private (RFC 1918), carrier-grade NAT 100.64.0.0/10,
  loopback, link-local (169.254.0.0/16, where cloud metadata lives:
  169.254.169.254), 192.0.0.0/24 (IETF protocol assignments, 192.0.0.8
  included), documentation, benchmarking, 6to4 relay anycast, AS112,
  multicast, 240.0.0.0/4 (reserved) and broadcast.
- IPv6: anything outside global unicast 2000::/3 (so ::, ::1, the
  IPv4-compatible ::/96 and IPv4-mapped ::ffff:0:0/96 forms, NAT64
  64:ff9b::/96 and 64:ff9b:1::/48, discard 100::/64, unique-local fc00::/7
  with fd00:ec2::254, link-local, site-local, multicast), and inside it
  2001::/23 (Teredo 2001::/32, ORCHID, benchmarking), 2001:db8::/32 and
  3fff::/20 (documentation), 6to4 2002::/16 and AS112.

Every IPv6 form that carries an IPv4 address (mapped, compatible, SIIT,
NAT64, 6to4, Teredo) is refused outright, whatever it carries: where it is
routed depends on this deployment's translators and relays, and a tenant's
real server has a native address. The reason names the IPv4 address inside
(``[::ffff:0:7f00:1]`` is "an IPv6 form of 127.0.0.1"). A deployment on an
IPv6-only network behind DNS64 needs ``NODE_ALLOW_PRIVATE_URLS``.

Checked when a node is saved (``refuse_internal_host``) and again on every
connection, since a name can resolve elsewhere later (DNS rebinding): the
prober's aiohttp resolver (``PublicOnlyResolver``) and the gateway's
upstream pool (given ``why_not_public``) resolve the host once, check every
address it resolved to, and connect to a checked address. Checks use
``ipaddress`` and the system resolver only, never a connection.
"""

from __future__ import annotations

import ipaddress
import socket

import aiohttp
from aiohttp.abc import AbstractResolver
from django.conf import settings
from django.utils.translation import gettext, gettext_noop

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _nets(*cidrs: str, reason: str) -> list[tuple[Network, str]]:
    return [(ipaddress.ip_network(c), reason) for c in cidrs]


# Cloud instance metadata (AWS, GCP, Azure; AWS over IPv6; AWS ECS; Alibaba Cloud).
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200")
)
# IPv4 special-purpose ranges (IANA IPv4 Special-Purpose Address Registry and more).
_IPV4_REFUSED = [
    *_nets("0.0.0.0/32", reason=gettext_noop("the unspecified address")),
    *_nets("0.0.0.0/8", reason=gettext_noop("a 'this network' address (0.0.0.0/8)")),
    *_nets("127.0.0.0/8", reason=gettext_noop("a loopback address")),
    *_nets("169.254.0.0/16", reason=gettext_noop("a link-local address")),
    *_nets(
        "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", reason=gettext_noop("a private address")
    ),
    *_nets("100.64.0.0/10", reason=gettext_noop("a carrier-grade NAT address")),
    *_nets("192.0.0.0/24", reason=gettext_noop("an IETF protocol address (192.0.0.0/24)")),
    *_nets(
        "192.0.2.0/24",
        "198.51.100.0/24",
        "203.0.113.0/24",
        reason=gettext_noop("a documentation address"),
    ),
    *_nets("198.18.0.0/15", reason=gettext_noop("a benchmarking address")),
    *_nets("192.88.99.0/24", reason=gettext_noop("a 6to4 relay address")),
    *_nets(
        "192.31.196.0/24",
        "192.52.193.0/24",
        "192.175.48.0/24",
        reason=gettext_noop("a special-use address"),
    ),
    *_nets("224.0.0.0/4", reason=gettext_noop("a multicast address")),
    *_nets("255.255.255.255/32", reason=gettext_noop("the broadcast address")),
    *_nets("240.0.0.0/4", reason=gettext_noop("a reserved address")),
]
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV6_REFUSED = [
    *_nets("::/128", reason=gettext_noop("the unspecified address")),
    *_nets("::1/128", reason=gettext_noop("a loopback address")),
    *_nets("::ffff:0:0/96", reason=gettext_noop("an IPv4-mapped address")),
    *_nets("::ffff:0:0:0/96", reason=gettext_noop("an IPv4-translated address")),
    *_nets("::/96", reason=gettext_noop("an IPv4-compatible address")),
    *_nets("64:ff9b::/96", reason=gettext_noop("a NAT64 address")),
    *_nets("64:ff9b:1::/48", reason=gettext_noop("a local-use NAT64 address")),
    *_nets("fc00::/7", reason=gettext_noop("a unique-local (private) address")),
    *_nets("fe80::/10", reason=gettext_noop("a link-local address")),
    *_nets("fec0::/10", reason=gettext_noop("a site-local address")),
    *_nets("ff00::/8", reason=gettext_noop("a multicast address")),
    # Inside 2000::/3:
    *_nets("2001::/32", reason=gettext_noop("a Teredo address")),
    *_nets("2001::/23", reason=gettext_noop("an IETF protocol address (2001::/23)")),
    *_nets("2001:db8::/32", "3fff::/20", reason=gettext_noop("a documentation address")),
    *_nets("2002::/16", reason=gettext_noop("a 6to4 address")),
    *_nets("2620:4f:8000::/48", reason=gettext_noop("a special-use address")),
]
# Names that always mean this machine or its private network (RFC 6761, 6762).
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".home.arpa")


class PrivateAddressRefused(OSError):
    """A tenant's node resolved to a non-public address at connect time."""


def guarded(organization_id: int | None) -> bool:
    """Whether a node of this owner may be reached at public addresses only:
    a tenant's (an organization's) node, unless staff allowed private ones."""
    return organization_id is not None and not settings.NODE_ALLOW_PRIVATE_URLS


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries, if it is one of the forms
    that do: IPv4-mapped, IPv4-translated (SIIT), IPv4-compatible, NAT64
    (both prefixes), 6to4 and Teredo (its client)."""
    if address.version == 4:
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    value = int(address)
    if value >> 32 == 0xFFFF0000:  # ::ffff:0:a.b.c.d (SIIT)
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address in _NAT64 or address in _NAT64_LOCAL or (value >> 32 == 0 and value > 1):
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    return None


def _table_reason(address: IPAddress) -> str:
    if address in _METADATA:
        return gettext_noop("a cloud metadata service address")
    for net, reason in _IPV4_REFUSED if address.version == 4 else _IPV6_REFUSED:
        if address in net:
            return reason
    if address.version == 6 and address not in _GLOBAL_UNICAST_V6:
        return gettext_noop("a reserved address")
    return ""


def _untranslated(text: str) -> str:
    return text


def why_not_public(address: IPAddress, *, translate=_untranslated) -> str:
    """ "" when ``address`` is a public unicast address, else what it is: in
    English (the gateway's and prober's logs and errors), or through
    ``translate`` (``gettext``: a form's message in the user's language)."""
    if address.version == 6 and getattr(address, "scope_id", None):
        address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
    reason = _table_reason(address)
    if address.version == 6:
        inner = embedded_ipv4(address)
        if inner is not None:
            inner_reason = _table_reason(inner)
            detail = (
                translate(gettext_noop(", %(reason)s")) % {"reason": translate(inner_reason)}
                if inner_reason
                else ""
            )
            outer = translate(reason or gettext_noop("an IPv4-carrying address"))
            return translate(gettext_noop("an IPv6 form of %(inner)s (%(reason)s%(detail)s)")) % {
                "inner": inner,
                "reason": outer,
                "detail": detail,
            }
    return translate(reason) if reason else ""


def is_public(address: IPAddress) -> bool:
    return not why_not_public(address)


def resolve(host: str) -> set[IPAddress]:
    """Every address ``host`` (a name or a literal) stands for; ValueError when none."""
    try:
        return {ipaddress.ip_address(host.strip("[]"))}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise ValueError(
            gettext("The host name %(host)s does not resolve.") % {"host": repr(host)}
        ) from None
    out = set()
    for info in infos:
        try:
            out.add(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            continue
    if not out:
        raise ValueError(gettext("The host name %(host)s does not resolve.") % {"host": repr(host)})
    return out


def literal_refusal(host: str) -> str:
    """Why ``host``, when it is an IP literal, is not public ("" when it is, or
    when it is a name: names are judged by what they resolve to, when they
    are resolved)."""
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return ""
    return why_not_public(address)


def refuse_internal_host(host: str) -> None:
    """ValueError (with a message for the form, in the active language) unless
    every address ``host`` resolves to is public."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(_LOCAL_SUFFIXES):
        raise ValueError(
            gettext(
                "%(host)s names this machine or a private network; tenant nodes must be "
                "reachable on the public internet."
            )
            % {"host": host}
        )
    for address in sorted(resolve(host), key=str):
        reason = why_not_public(address, translate=gettext)
        if reason:
            raise ValueError(
                gettext(
                    "%(host)s is a private, loopback or reserved address "
                    "(%(address)s: %(reason)s); tenant nodes must be reachable on the "
                    "public internet."
                )
                % {"host": host, "address": address, "reason": reason}
            )


class PublicOnlyResolver(AbstractResolver):
    """An aiohttp resolver that refuses a name resolving to any non-public
    address, so a name that passed the check when saved cannot be pointed at
    the deployment's own network later; aiohttp connects to the addresses it
    returns, all checked. (aiohttp does not resolve IP literals: the prober
    checks those itself, with ``literal_refusal``, before each probe.)"""

    def __init__(self) -> None:
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ):
        results = await self._inner.resolve(host, port, family)
        for result in results:
            address = ipaddress.ip_address(str(result["host"]).split("%", 1)[0])
            if not is_public(address):
                raise PrivateAddressRefused(f"{host} resolves to a non-public address")
        return results

    async def close(self) -> None:
        await self._inner.close()
