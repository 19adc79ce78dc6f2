"""Hosts judged by the addresses they resolve to, never by how they are spelled.

`127.evil.example` is a name like any other, `2130706433`, `0x7f.1` and `127.1` are 127.0.0.1 to the
resolver, and `::ffff:10.0.0.1` is an IPv4 address in IPv6 clothing: so every decision here is taken
on `ipaddress` objects that came out of `getaddrinfo`, the same call the connection makes.

    resolve(host)               -> [IPv4Address | IPv6Address, ...]   (OSError when it does not resolve)
    is_loopback_host(host)      every address the host resolves to is a loopback one
    forbidden_reason(address)   why a tool must not connect to it (loopback, private ...), or None
"""

from __future__ import annotations

import ipaddress
import socket

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata services answer on these: named so the refusal says what the address is.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254"))


def resolve(host: str, port: int | None = None) -> list[IPAddress]:
    """All addresses `host` resolves to, in the resolver's order, without duplicates."""
    host = host.strip("[]")
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[IPAddress] = []
    for *_, sockaddr in infos:
        a = _unmapped(ipaddress.ip_address(sockaddr[0].split("%", 1)[0]))
        if a not in out:
            out.append(a)
    return out


def is_loopback_host(host: str) -> bool:
    """True when `host` (a name or an address) resolves, and only to loopback addresses."""
    try:
        addresses = resolve(host)
    except (OSError, ValueError, UnicodeError):
        return False
    return bool(addresses) and all(a.is_loopback for a in addresses)


def forbidden_reason(address: IPAddress) -> str | None:
    """Why a tool acting for a model must not connect to `address`, or None for a public address."""
    a = _unmapped(address)
    if a in METADATA_ADDRESSES:
        return "a cloud metadata service"
    if a.is_unspecified:
        return "the unspecified address (this machine)"
    if a.is_loopback:
        return "a loopback address (this machine)"
    if a.is_link_local:
        return "a link-local address"
    if a.is_private:
        return "a private network address"
    if a.is_multicast:
        return "a multicast address"
    if not a.is_global:
        return "a reserved address"
    return None


def _unmapped(a: IPAddress) -> IPAddress:
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        return a.ipv4_mapped
    return a
