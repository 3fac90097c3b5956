"""Node configuration: served models, latency profiles, fault settings, CLI flags.

One argument parser serves both ``python -m tooling.simulator`` and
``manage.py run_node``, so the two accept exactly the same flags.

Vendor mode (the OpenAI, Anthropic and Gemini front-ends, see ``vendor_auth``):

* ``--api-keys k1,k2`` (or the environment variable ``SIM_API_KEYS``, which
  keeps them off the process list; the flag wins): every generation and
  model-list call must present one of these keys the way its vendor wants it
  (OpenAI ``Authorization: Bearer``, Anthropic ``x-api-key`` or Bearer, Gemini
  ``x-goog-api-key`` or ``?key=``). Without
  it the node is open, or takes the ``--token`` node token (in the same
  headers) as today. ``/health`` is always open; ``/admin`` needs ``--token``.
* ``--key-faults KEY=STATUS,...`` and the fault field ``key_faults``
  (``{"<key>": status}``, status one of ``KEY_FAULT_STATUSES``): a call that
  presents that key gets that error in its front-end's format; a 429 carries
  ``retry-after: key_retry_after_seconds`` (``--key-retry-after-seconds``,
  default 2). So one credential of a pool can fail while another works.
* ``--cache-min-tokens N`` (default 32): Anthropic ``cache_control``
  breakpoints whose prefix is shorter are not cached (Anthropic's own minimum
  is 1024 or more; a small one lets demos with a short system prompt cache).
* ``--cache-ttl-scale F`` (default 1): multiplies Anthropic's cache lifetimes
  (5 minutes, 1 hour), e.g. 0.01 to watch entries expire in tests.

Model names are free: ``--models gpt-sim,claude-sim,gemini-sim,text-embed-sim``
serves the three chat models on every front-end and the embedding model (a name
containing ``embed``) on OpenAI's ``/v1/embeddings``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

CHAT = "chat"
EMBEDDING = "embedding"

DEFAULT_CONTEXT = 8192
DEFAULT_EMBED_DIMS = 256


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str = CHAT
    context: int = DEFAULT_CONTEXT
    dims: int = DEFAULT_EMBED_DIMS


DEFAULT_MODELS = (
    ModelSpec("sim-chat-small", CHAT, 8192),
    ModelSpec("sim-chat-large", CHAT, 32768),
    ModelSpec("sim-embed", EMBEDDING, 8192, DEFAULT_EMBED_DIMS),
)


@dataclass(frozen=True)
class LatencyProfile:
    """Unscaled latency parameters; ``NodeConfig.time_scale`` multiplies every sleep."""

    ttft_ms: float = 0.0
    prefill_us_per_token: float = 0.0
    itl_ms: float = 0.0
    # Multiplier growth at a full batch: latency x (1 + load_factor) when
    # max_running sequences run, linear in between.
    load_factor: float = 0.0
    # Uniform relative jitter: each latency is multiplied by 1 +/- jitter.
    jitter: float = 0.0

    @property
    def sleeps(self) -> bool:
        return any((self.ttft_ms, self.prefill_us_per_token, self.itl_ms))


PROFILES = {
    "instant": LatencyProfile(),
    "realistic": LatencyProfile(
        ttft_ms=30.0, prefill_us_per_token=40.0, itl_ms=15.0, load_factor=1.0, jitter=0.1
    ),
}
# "custom" starts from the realistic values; the override flags change them.
PROFILES["custom"] = PROFILES["realistic"]


@dataclass
class FaultSettings:
    """What the node does wrong on purpose. Rates are probabilities in [0, 1];
    token thresholds of 0 mean off."""

    fault_500_rate: float = 0.0
    fault_429_rate: float = 0.0
    fault_503_rate: float = 0.0
    spike_rate: float = 0.0
    # A spiked request's time to first token is multiplied by spike_multiplier
    # and spike_ms is added (so spikes show even with the instant profile).
    spike_multiplier: float = 10.0
    spike_ms: float = 500.0
    hang_after_tokens: int = 0
    drop_after_tokens: int = 0
    # Per-credential faults: {"<api key>": status}; a POST replaces the whole map.
    key_faults: dict[str, int] = field(default_factory=dict)
    key_retry_after_seconds: int = 2

    RATE_FIELDS = ("fault_500_rate", "fault_429_rate", "fault_503_rate", "spike_rate")
    TOKEN_FIELDS = ("hang_after_tokens", "drop_after_tokens", "key_retry_after_seconds")
    OFF_AT_ZERO = ("hang_after_tokens", "drop_after_tokens")

    def as_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["key_faults"] = dict(self.key_faults)
        return out

    def merged(self, changes: object) -> FaultSettings:
        """A copy with ``changes`` (a JSON object) applied; ValueError(param, message)
        names the first bad field."""
        if not isinstance(changes, dict):
            raise FaultError("", "The body must be a JSON object of fault fields.")
        known = {f.name for f in fields(self)}
        values: dict[str, Any] = {}
        for name, value in changes.items():
            if name not in known:
                raise FaultError(name, f"Unknown fault field '{name}'; known: {sorted(known)}.")
            values[name] = _check_fault_value(name, value)
        return replace(self, **values)


class FaultError(ValueError):
    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param
        self.message = message


KEY_FAULT_STATUSES = (401, 403, 429, 500, 503, 529)


def check_key_faults(value: object) -> dict[str, int]:
    """A ``key_faults`` map, checked (raises FaultError)."""
    if not isinstance(value, dict):
        raise FaultError("key_faults", "'key_faults' must be an object of {api key: status}.")
    out = {}
    for key, status in value.items():
        if not key:
            raise FaultError("key_faults", "'key_faults' keys must be non-empty API keys.")
        if isinstance(status, bool) or status not in KEY_FAULT_STATUSES:
            allowed = ", ".join(str(s) for s in KEY_FAULT_STATUSES)
            raise FaultError("key_faults", f"'key_faults' statuses must be one of {allowed}.")
        out[key] = int(status)
    return out


def _check_fault_value(name: str, value: object) -> float | int | dict:
    if name == "key_faults":
        return check_key_faults(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FaultError(name, f"'{name}' must be a number.")
    if name in FaultSettings.RATE_FIELDS and not 0.0 <= value <= 1.0:
        raise FaultError(name, f"'{name}' must be between 0 and 1.")
    if name in FaultSettings.TOKEN_FIELDS:
        if value != int(value) or value < 0:
            off = " (0 is off)" if name in FaultSettings.OFF_AT_ZERO else ""
            raise FaultError(name, f"'{name}' must be a whole number >= 0{off}.")
        return int(value)
    if value < 0 or (name == "spike_multiplier" and value < 1):
        raise FaultError(name, f"'{name}' is out of range.")
    return float(value)


@dataclass
class NodeConfig:
    host: str = "127.0.0.1"
    port: int = 9001
    models: tuple[ModelSpec, ...] = DEFAULT_MODELS
    profile_name: str = "instant"
    profile: LatencyProfile = field(default_factory=LatencyProfile)
    token: str = ""
    admin_secret: str = ""
    time_scale: float = 1.0
    prefix_cache_blocks: int = 4096
    max_running: int = 64
    faults: FaultSettings = field(default_factory=FaultSettings)
    seed: int = 0
    api_keys: tuple[str, ...] = ()
    cache_min_tokens: int = 32
    cache_ttl_scale: float = 1.0

    def model(self, name: str) -> ModelSpec | None:
        for spec in self.models:
            if spec.name == name:
                return spec
        return None


def parse_models(raw: str) -> tuple[ModelSpec, ...]:
    """``name`` or ``name:context`` items, comma separated. A name containing
    ``embed`` is an embedding model; known default names keep their settings."""
    defaults = {spec.name: spec for spec in DEFAULT_MODELS}
    specs: list[ModelSpec] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        name, _, context = item.partition(":")
        name = name.strip()
        if not name:
            raise argparse.ArgumentTypeError(f"empty model name in '{raw}'")
        spec = defaults.get(name) or ModelSpec(name, EMBEDDING if "embed" in name else CHAT)
        if context:
            try:
                value = int(context)
            except ValueError:
                raise argparse.ArgumentTypeError(f"context of '{name}' is not an integer") from None
            if value < 16:
                raise argparse.ArgumentTypeError(f"context of '{name}' must be at least 16")
            spec = replace(spec, context=value)
        if any(s.name == name for s in specs):
            raise argparse.ArgumentTypeError(f"model '{name}' is listed twice")
        specs.append(spec)
    if not specs:
        raise argparse.ArgumentTypeError("at least one model is needed")
    return tuple(specs)


def parse_api_keys(raw: str) -> tuple[str, ...]:
    """``k1,k2``: the API keys of vendor mode (duplicates dropped, order kept)."""
    keys = tuple(dict.fromkeys(k.strip() for k in raw.split(",") if k.strip()))
    if not keys:
        raise argparse.ArgumentTypeError("--api-keys needs at least one key")
    return keys


def parse_key_faults(raw: str) -> dict[str, int]:
    """``KEY=STATUS,...``: the initial ``key_faults``."""
    out: dict[str, object] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        key, sep, status = item.rpartition("=")
        if not sep or not status.strip().isdigit():
            raise argparse.ArgumentTypeError(f"'{item}' is not KEY=STATUS")
        out[key.strip()] = int(status)
    try:
        return check_key_faults(out)
    except FaultError as error:
        raise argparse.ArgumentTypeError(error.message) from None


def _rate(raw: str) -> float:
    value = float(raw)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{raw} is not a rate between 0 and 1")
    return value


def _non_negative(kind):
    def check(raw: str):
        value = kind(raw)
        if value < 0:
            raise argparse.ArgumentTypeError(f"{raw} must not be negative")
        return value

    return check


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{raw} must be at least 1")
    return value


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """Every run_node flag; shared by the module entry point and the Django command."""
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=9001, help="0 picks a free port")
    add("--models", type=parse_models, default=DEFAULT_MODELS, help="name or name:context, ...")
    add(
        "--profile",
        choices=sorted(PROFILES),
        default="instant",
        help="instant: no sleeping; realistic: TTFT ~30 ms + 40 us/uncached token, ITL 15 ms; "
        "custom: realistic values changed by --ttft-ms and the other override flags",
    )
    add("--token", default="", help="require 'Authorization: Bearer TOKEN' (enables /admin)")
    add(
        "--admin-secret",
        default="",
        help="the /admin endpoint answers loopback clients sending 'X-Sim-Admin-Secret: "
        "SECRET' only (the node token no longer opens it); also read from the environment "
        "variable SIM_ADMIN_SECRET (keeps it off the process list)",
    )
    add("--time-scale", type=_non_negative(float), default=1.0, help="multiplies every sleep")
    add("--prefix-cache-blocks", type=_non_negative(int), default=4096)
    add("--max-running", type=_positive_int, default=64, help="sequences per model batch")
    add("--seed", type=int, default=0)
    for flag in ("--ttft-ms", "--prefill-us-per-token", "--itl-ms", "--load-factor", "--jitter"):
        add(flag, type=_non_negative(float), default=None, help="overrides the profile")
    for flag in ("--fault-500-rate", "--fault-429-rate", "--fault-503-rate", "--spike-rate"):
        add(flag, type=_rate, default=0.0)
    add("--spike-multiplier", type=_non_negative(float), default=10.0)
    add("--spike-ms", type=_non_negative(float), default=500.0)
    add("--hang-after-tokens", type=_non_negative(int), default=0)
    add("--drop-after-tokens", type=_non_negative(int), default=0)
    add(
        "--api-keys",
        type=parse_api_keys,
        default=(),
        help="vendor mode: calls must present one of these keys (k1,k2) in their vendor's "
        "header; also read from the environment variable SIM_API_KEYS (keeps them off the "
        "process list)",
    )
    add(
        "--key-faults",
        type=parse_key_faults,
        default={},
        help="KEY=STATUS,...: calls with KEY get STATUS (401, 403, 429, 500, 503, 529)",
    )
    add("--key-retry-after-seconds", type=_non_negative(int), default=2)
    add(
        "--cache-min-tokens",
        type=_non_negative(int),
        default=32,
        help="shortest prefix an Anthropic cache_control breakpoint caches (tokens)",
    )
    add(
        "--cache-ttl-scale",
        type=_non_negative(float),
        default=1.0,
        help="multiplies Anthropic's cache lifetimes (5 min, 1 h)",
    )


def config_from_options(options: dict) -> NodeConfig:
    """Build a NodeConfig from parsed flags (argparse namespace vars or Django options)."""
    profile = PROFILES[options["profile"]]
    overrides = {
        name: options[name]
        for name in ("ttft_ms", "prefill_us_per_token", "itl_ms", "load_factor", "jitter")
        if options.get(name) is not None
    }
    if overrides:
        profile = replace(profile, **overrides)
    if profile.jitter > 1:
        raise ValueError("--jitter must be at most 1")
    faults = FaultSettings(
        fault_500_rate=options["fault_500_rate"],
        fault_429_rate=options["fault_429_rate"],
        fault_503_rate=options["fault_503_rate"],
        spike_rate=options["spike_rate"],
        spike_multiplier=max(1.0, options["spike_multiplier"]),
        spike_ms=options["spike_ms"],
        hang_after_tokens=options["hang_after_tokens"],
        drop_after_tokens=options["drop_after_tokens"],
        key_faults=dict(options.get("key_faults") or {}),
        key_retry_after_seconds=options.get("key_retry_after_seconds", 2),
    )
    return NodeConfig(
        host=options["host"],
        port=options["port"],
        models=tuple(options["models"]),
        profile_name=options["profile"],
        profile=profile,
        token=options["token"] or "",
        admin_secret=options.get("admin_secret") or os.environ.get("SIM_ADMIN_SECRET", ""),
        time_scale=options["time_scale"],
        prefix_cache_blocks=options["prefix_cache_blocks"],
        max_running=options["max_running"],
        faults=faults,
        seed=options["seed"],
        api_keys=tuple(options.get("api_keys") or ())
        or (parse_api_keys(os.environ["SIM_API_KEYS"]) if os.environ.get("SIM_API_KEYS") else ()),
        cache_min_tokens=options.get("cache_min_tokens", 32),
        cache_ttl_scale=options.get("cache_ttl_scale", 1.0),
    )
