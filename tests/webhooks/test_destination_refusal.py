"""A destination at a loopback or private address is refused in terms of what
the admin typed: the address and its class, never "tenant nodes"."""

from __future__ import annotations

import socket
from unittest import mock

import pytest

from console.features.webhooks.services import clean_url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:9000/hook", "loopback"),
        ("http://[::1]:8080/", "loopback"),
        ("http://10.1.2.3/hook", "private"),
        ("http://localhost:9000/", "this machine"),
        ("https://hooks.inside.example/x", "127.0.0.1"),
    ],
)
def test_a_loopback_or_private_destination_is_refused_naming_the_address_class(
    org, settings, url, says
):
    settings.NODE_ALLOW_PRIVATE_URLS = False
    fake = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]
    with (
        mock.patch("socket.getaddrinfo", return_value=fake),
        pytest.raises(ValueError, match="destinations may not use") as err,
    ):
        clean_url(url, kind="slack", organization_id=org.pk)
    message = str(err.value)
    assert says in message
    assert "loopback or private network" in message and "destinations may not use" in message
    assert "tenant node" not in message
