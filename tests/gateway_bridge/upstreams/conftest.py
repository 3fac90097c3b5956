"""Simulator nodes for the upstream client's tests (one per module)."""

from __future__ import annotations

import pytest

from tests.inference_node.server_helpers import node_process


@pytest.fixture(scope="module")
def node():
    with node_process("--profile", "instant", via="module") as running:
        yield running


@pytest.fixture(scope="module")
def hanging_node():
    with node_process("--profile", "instant", "--hang-after-tokens", "3", via="module") as running:
        yield running


@pytest.fixture(scope="module")
def dropping_node():
    with node_process("--profile", "instant", "--drop-after-tokens", "2", via="module") as running:
        yield running
