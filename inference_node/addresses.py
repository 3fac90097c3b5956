"""Which addresses a tenant's node may point at (server-side request forgery).

A tenant's node or channel makes this deployment's gateway and prober send
requests on the tenant's behalf. Unless the operator allows private addresses
(``NODE_ALLOW_PRIVATE_URLS``, on in the embedded default, off in production),
its host must resolve only to public unicast addresses: never loopback,
private (RFC 1918, ULA), link-local (where the cloud metadata services live:
169.254.169.254, fd00:ec2::254), carrier-grade NAT, unspecified, reserved or
multicast ones.

IPv6 can carry an IPv4 address inside it; each such form is judged by the
IPv4 address it carries, so ``::ffff:10.0.0.5`` is as private as
``10.0.0.5``: IPv4-mapped (``::ffff:0:0/96``), IPv4-compatible (``::/96``),
NAT64 (``64:ff9b::/96``; the local-use ``64:ff9b:1::/48`` is refused outright),
6to4 (``2002::/16``) and Teredo (whose client address is obfuscated).

Checks use ``ipaddress`` and the system resolver (``socket.getaddrinfo``),
never a connection. A name checked when it is saved can resolve elsewhere
later (DNS rebinding), so the prober checks again when it connects
(``PublicOnlyResolver``); the gateway's client should do the same with
``refuse_internal_host``.
"""

from __future__ import annotations

import ipaddress
import socket

import aiohttp
from aiohttp.abc import AbstractResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SHARED_SPACE = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT
# Cloud instance metadata (AWS, GCP, Azure; AWS over IPv6; AWS ECS; Alibaba Cloud).
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200")
)
# Names that always mean this machine or its private network (RFC 6761, 6762).
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".home.arpa")


class PrivateAddressRefused(OSError):
    """A tenant's node resolved to a non-public address at connect time."""


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries, if it is one of the forms that do."""
    if address.version == 4:
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def why_not_public(address: IPAddress) -> str:
    """ "" when ``address`` is a public unicast address, else what it is."""
    if address.version == 6:
        if address in _NAT64_LOCAL:
            return "a local-use NAT64 address"
        inner = embedded_ipv4(address)
        if inner is not None:
            reason = why_not_public(inner)
            if reason:
                return f"an IPv6 form of {inner}, {reason}"
            if address.teredo is None:
                # Judged by what it carries: a DNS64 resolver answers a public
                # vendor's name with 64:ff9b::<its IPv4 address>.
                return ""
    if address in _METADATA:
        return "a cloud metadata service address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.version == 4 and address in _SHARED_SPACE:
        return "a carrier-grade NAT address"
    if address.is_private or address.is_reserved or not address.is_global:
        return "a private or reserved address"
    return ""


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
        raise ValueError(f"The host name {host!r} does not resolve.") from None
    out = set()
    for info in infos:
        try:
            out.add(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            continue
    if not out:
        raise ValueError(f"The host name {host!r} does not resolve.")
    return out


def refuse_internal_host(host: str) -> None:
    """ValueError (with a message for the form) unless every address ``host``
    resolves to is public."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(_LOCAL_SUFFIXES):
        raise ValueError(
            f"{host} names this machine or a private network; tenant nodes must be "
            "reachable on the public internet."
        )
    for address in sorted(resolve(host), key=str):
        reason = why_not_public(address)
        if reason:
            raise ValueError(
                f"{host} is a private, loopback or reserved address ({address}: {reason}); "
                "tenant nodes must be reachable on the public internet."
            )


class PublicOnlyResolver(AbstractResolver):
    """An aiohttp resolver that refuses a name resolving to any non-public
    address, so a name that passed the check when saved cannot be pointed at
    the deployment's own network later. (aiohttp does not resolve IP
    literals; those are checked when saved and cannot change.)"""

    def __init__(self) -> None:
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        results = await self._inner.resolve(host, port, family)
        for result in results:
            address = ipaddress.ip_address(str(result["host"]).split("%", 1)[0])
            if not is_public(address):
                raise PrivateAddressRefused(f"{host} resolves to a non-public address")
        return results

    async def close(self) -> None:
        await self._inner.close()
