"""console.kernel.ipnet: the one IP-network helper behind key allowlists, the
gateway's trusted proxies and the allowlist forms."""

from __future__ import annotations

import ipaddress

import pytest

from console.kernel import ipnet


@pytest.mark.parametrize(
    ("ip", "allowlist", "expected"),
    [
        ("10.1.2.3", [], True),
        ("not-an-ip", [], True),
        ("10.1.2.3", ["10.0.0.0/8"], True),
        ("11.1.2.3", ["10.0.0.0/8"], False),
        ("192.168.0.1", ["10.0.0.0/8", "192.168.0.1/32"], True),
        ("2001:db8::5", ["2001:db8::/32"], True),
        ("2001:db9::5", ["2001:db8::/32"], False),
        ("10.1.2.3", ["2001:db8::/32"], False),
        ("2001:db8::5", ["10.0.0.0/8"], False),
        ("::ffff:10.1.2.3", ["10.0.0.0/8"], True),  # IPv4-mapped IPv6
        ("::ffff:10.1.2.3", ["::ffff:10.0.0.0/104"], True),  # mapped range
        ("10.1.2.3", ["::ffff:10.0.0.0/104"], True),
        ("11.1.2.3", ["::ffff:10.0.0.0/104"], False),
        ("::ffff:11.1.2.3", ["10.0.0.0/8"], False),
        ("garbage", ["10.0.0.0/8"], False),
        ("", ["10.0.0.0/8"], False),
    ],
)
def test_allowed(ip, allowlist, expected):
    assert ipnet.allowed(ip, allowlist) is expected
    assert ipnet.allowed(ip, ipnet.parse(allowlist)) is expected


def test_allowed_with_a_validated_list():
    allow = ipnet.parse(ipnet.validate("10.0.0.7/8 2001:db8::1"))
    assert ipnet.allowed("10.200.0.1", allow)
    assert ipnet.allowed("2001:db8::1", allow)
    assert not ipnet.allowed("2001:db8::2", allow)


def test_an_ipv6_range_holding_the_mapped_block_holds_every_ipv4_address():
    every = ipnet.parse(["::/0"])
    assert "10.1.2.3" in every and "::ffff:10.1.2.3" in every and "2001:db8::1" in every
    assert "10.1.2.3" not in ipnet.parse(["2001:db8::/32"])


def test_membership_without_the_allow_all_rule():
    # An empty list contains nothing; "empty means any" is the allowlist's rule.
    assert "10.0.0.1" not in ipnet.EMPTY
    assert not ipnet.parse([])
    assert "127.0.0.1" in ipnet.parse(["127.0.0.1"])
    assert "127.0.0.2" not in ipnet.parse(["127.0.0.1"])


def test_membership_takes_address_objects_too():
    nets = ipnet.parse(["10.0.0.0/8"])
    assert ipaddress.ip_address("10.9.9.9") in nets
    assert ipaddress.ip_address("::ffff:10.9.9.9") in nets
    assert None not in nets


def test_parse_skips_and_reports_what_is_not_an_address():
    bad = []
    nets = ipnet.parse(
        ["10.0.0.7/8", "proxy.local", " 2001:db8::1 ", "10.0.0.0/33"], on_invalid=bad.append
    )
    assert [n.with_prefixlen for n in nets] == ["10.0.0.0/8", "2001:db8::1/128"]
    assert bad == ["proxy.local", "10.0.0.0/33"]


def test_parse_writes_a_mapped_range_as_its_ipv4_range_once():
    nets = ipnet.parse(["::ffff:10.0.0.0/104", "10.0.0.0/8"])
    assert [n.with_prefixlen for n in nets] == ["10.0.0.0/8"]


def test_answers_stay_right_past_the_memo_limit():
    nets = ipnet.parse(["10.0.0.0/16"])
    for i in range(ipnet._MEMO_LIMIT + 10):
        ip = f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}"
        assert (ip in nets) is (i < 65536)
    assert "10.0.0.1" in nets and "10.1.0.1" not in nets


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (["10.0.0.7/8"], ["10.0.0.0/8"]),
        (["2001:DB8::1"], ["2001:db8::1/128"]),
        ("10.0.0.1, 10.0.0.2\n2001:db8::/48", ["10.0.0.1/32", "10.0.0.2/32", "2001:db8::/48"]),
        (["", "  ", "1.2.3.4", "1.2.3.4/32"], ["1.2.3.4/32"]),
        ("", []),
    ],
)
def test_validate_normalizes(entries, expected):
    assert ipnet.validate(entries) == expected


def test_validate_names_every_bad_entry_and_bounds_the_count():
    with pytest.raises(ValueError, match=r"'nonsense', '10\.0\.0\.0/33' are not valid"):
        ipnet.validate(["nonsense", "1.2.3.4", "10.0.0.0/33"])
    with pytest.raises(ValueError, match="'x' is not a valid IP address or CIDR range"):
        ipnet.validate("x")
    with pytest.raises(ValueError, match="At most 2"):
        ipnet.validate(["1.1.1.1", "2.2.2.2", "3.3.3.3"], max_entries=2)


def test_is_address():
    assert ipnet.is_address("127.0.0.1") and ipnet.is_address("::1")
    assert not ipnet.is_address("10.0.0.0/8") and not ipnet.is_address("unknown")


def test_the_forwarded_client_is_believed_only_behind_a_trusted_proxy():
    trusted = ipnet.parse(["10.0.0.0/8"])
    assert ipnet.forwarded_client("203.0.113.9", "198.51.100.1", trusted) == "203.0.113.9"
    assert ipnet.forwarded_client("10.0.0.2", "198.51.100.1, 10.0.0.3", trusted) == "198.51.100.1"
    assert ipnet.forwarded_client("10.0.0.2", "not-an-ip, 10.0.0.3", trusted) == "10.0.0.2"
    assert ipnet.forwarded_client("10.0.0.2", None, trusted) == "10.0.0.2"
    assert ipnet.forwarded_client("10.0.0.2", "198.51.100.1", ipnet.parse([])) == "10.0.0.2"
