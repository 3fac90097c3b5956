"""The dependency pins: ``pyproject.toml`` says what the code needs (a lower
bound and a cap on each), ``requirements.lock`` the exact versions CI tests,
and the environment running these tests installed exactly those.

``.ci/run`` installs with ``pip install -c requirements.lock -e '.[test]'``: a
constraints file pins every distribution the resolver picks and adds none, so
a dependency missing from the lock would float; the last two tests catch it."""

from __future__ import annotations

import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.console.up_process import ROOT
from tests.services import require

LOCK = ROOT / "requirements.lock"
PROJECT = "token-billing-console"
# What a venv brings and pip freeze leaves out: not the project's to pin.
INSTALLER_TOOLS = {"pip", "setuptools", "wheel", "distribute"}
# Dependencies without a cap, each with its reason.
UNCAPPED = {
    # Calendar-versioned time zone data (2026.4): a cap would hold back new zone rules.
    "tzdata",
}


def lock_pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for number, line in enumerate(LOCK.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"line {number}: {line!r} is no pin"
        assert not req.extras and req.marker is None, f"line {number}: {line!r}: a bare pin"
        name = canonicalize_name(req.name)
        assert name not in pins, f"line {number}: {req.name} pinned twice"
        pins[name] = Version(specs[0].version)
    return pins


def direct_requirements() -> list[Requirement]:
    """What the project asks for: its dependencies and every extra's (the test
    extra names the others through the project itself, which is not pinned)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        listed += extra
    found = [Requirement(r) for r in listed]
    return [r for r in found if canonicalize_name(r.name) != PROJECT]


def installed() -> dict[str, str]:
    found = {}
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name not in INSTALLER_TOOLS and name != PROJECT:
            found[name] = dist.version
    return found


def test_the_lock_holds_only_exact_pins():
    pins = lock_pins()
    assert len(pins) > 50, "requirements.lock looks truncated"
    assert PROJECT not in pins, "the project itself is installed from the tree, not pinned"


def test_every_dependency_has_a_cap():
    loose = [
        str(req)
        for req in direct_requirements()
        if canonicalize_name(req.name) not in UNCAPPED
        and not any(s.operator in {"<", "<=", "==", "~="} for s in req.specifier)
    ]
    assert loose == [], f"cap the next major version of {loose} in pyproject.toml"


def test_every_dependency_is_pinned_inside_its_range():
    pins = lock_pins()
    problems = []
    for req in direct_requirements():
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name} is not in requirements.lock")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"{req.name}=={pin} is outside {req.specifier}")
    assert problems == []


def test_nothing_installed_floats_outside_the_lock():
    pins = lock_pins()
    unpinned = sorted(
        f"{name}=={version}"
        for name, version in installed().items()
        if name not in pins or pins[name] != Version(version)
    )
    assert unpinned == [], (
        f"installed but not as requirements.lock pins it: {unpinned} "
        "(install with: pip install -c requirements.lock -e '.[test]'; "
        "a new dependency goes into pyproject.toml and the lock together)"
    )


def test_every_pin_is_installed():
    have = installed()
    missing = sorted(f"{name}=={pin}" for name, pin in lock_pins().items() if name not in have)
    require(
        not missing,
        f"this environment lacks {missing}: pip install -c requirements.lock -e '.[test]'",
    )
