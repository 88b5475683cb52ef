"""The enforcer's settings, read once from ``P2_*`` environment variables.

Read when the backend is registered (:func:`enforcer.register`, which torch's
entry point runs) or on first use, then passed to what needs them; nothing
else in the enforcer reads the environment. A malformed value is one line
naming the variable (the backend then keeps its defaults and logs it).

=====================  =========================================================
``P2_INNER_BACKEND``   inner backend(s): ``gloo``, ``nccl``, ``cpu:gloo,cuda:nccl``
``P2_TRACE_FILE``      where each rank writes its trace (``{rank}`` is replaced)
``P2_TRACE_LIMIT``     most recent ops kept per rank (default 200000)
``P2_PLAN_FILE``       a plan to enforce from the first op on
``P2_COUNT_BYPASS``    ``0`` turns off counting ops that bypass the enforcer
``P2_CHANNEL_IFNAMES`` the node's NICs, one per channel (``nic0,nic1``; set by
                       the emulated cluster's launcher)
``P2_CHANNEL_BACKENDS`` the inner backend of each plan channel (``gloo,ucc``:
                       channel 1 on UCC); unset, every channel uses the CPU
                       inner backend of ``P2_INNER_BACKEND``
``P2_ENFORCER_IMPL``   ``cpp`` (the C++ backend, default when it is built) or
                       ``python`` (the Python process group)
``P2_SERVICE``         the optimizer service's ``host:port``, or several
                       comma-separated (a leader and its standbys): each rank
                       links to the leader (:mod:`enforcer.link.link`); unset,
                       nothing changes
``P2_TOKEN``           its bearer token (``P2_TOKEN_FILE``: a file holding it,
                       read when the link starts; the file wins)
``P2_TLS_CA``          talk TLS, trusting this CA (PEM); ``P2_TLS_CERT`` and
                       ``P2_TLS_KEY``: the rank's certificate for mutual TLS
``P2_JOB``             the job id (default: torchrun's ``TORCHELASTIC_RUN_ID``,
                       else ``MASTER_ADDR:MASTER_PORT``, else the store's address)
``P2_SWITCH_EVERY``    plans switch only at iterations that are multiples of this
                       (default 10; the same on every rank)
``P2_PREPARE_TIMEOUT`` seconds a rank waits for its peers to start building a
                       plan (default 30)
``P2_TELEMETRY_EVERY`` a rank's telemetry goes out this many iterations at a
                       time, or when the oldest has waited a second (1-32,
                       default 4; 1: every iteration as it ends)
=====================  =========================================================
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from optimizer_service.plan import InvalidInputError
from optimizer_service.wire.leader import parse_addresses

DEFAULT_TRACE_LIMIT = 200_000
DEFAULT_SWITCH_EVERY = 10
DEFAULT_PREPARE_TIMEOUT = 30.0
DEFAULT_TELEMETRY_EVERY = 4
MAX_TELEMETRY_EVERY = 32          # the rank's telemetry queue holds twice this (enforcer.link.stream)


@dataclass(frozen=True)
class EnforcerSettings:
    inner_backend: str | None = None
    trace_file: str | None = None
    trace_limit: int = DEFAULT_TRACE_LIMIT
    plan_file: str | None = None
    count_bypass: bool = True
    channel_ifnames: tuple[str, ...] = ()
    channel_backends: tuple[str, ...] = ()
    impl: str | None = None                                 # None: cpp when built, else python
    service: str | None = None
    token: str | None = field(default=None, repr=False)     # never in a log line
    token_file: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    job: str | None = None
    switch_every: int = DEFAULT_SWITCH_EVERY
    prepare_timeout: float = DEFAULT_PREPARE_TIMEOUT
    topology: str | None = None
    telemetry_every: int = DEFAULT_TELEMETRY_EVERY

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EnforcerSettings:
        env = os.environ if environ is None else environ
        limit = _at_least_one("P2_TRACE_LIMIT", env.get("P2_TRACE_LIMIT", "").strip(), DEFAULT_TRACE_LIMIT, "ops")
        bypass = env.get("P2_COUNT_BYPASS", "1").strip()
        if bypass not in ("0", "1"):
            raise InvalidInputError(f"P2_COUNT_BYPASS={bypass!r} must be 0 or 1")
        service = env.get("P2_SERVICE", "").strip() or None
        if service is not None:
            service = ",".join(parse_addresses(service, "P2_SERVICE"))
        tls_cert, tls_key = env.get("P2_TLS_CERT") or None, env.get("P2_TLS_KEY") or None
        if bool(tls_cert) != bool(tls_key):
            raise InvalidInputError("P2_TLS_CERT and P2_TLS_KEY go together (the rank's certificate and its key)")
        return cls(inner_backend=env.get("P2_INNER_BACKEND") or None, trace_file=env.get("P2_TRACE_FILE") or None,
                   trace_limit=limit, plan_file=env.get("P2_PLAN_FILE") or None, count_bypass=bypass == "1",
                   channel_ifnames=tuple(name for name in env.get("P2_CHANNEL_IFNAMES", "").split(",") if name),
                   channel_backends=_channel_backends(env.get("P2_CHANNEL_BACKENDS", "")),
                   impl=_impl(env.get("P2_ENFORCER_IMPL", "")),
                   service=service, token=env.get("P2_TOKEN", "").strip() or None,
                   token_file=env.get("P2_TOKEN_FILE") or None, tls_ca=env.get("P2_TLS_CA") or None,
                   tls_cert=tls_cert, tls_key=tls_key, job=env.get("P2_JOB", "").strip() or None,
                   switch_every=_at_least_one("P2_SWITCH_EVERY", env.get("P2_SWITCH_EVERY", "").strip(),
                                              DEFAULT_SWITCH_EVERY, "iterations"),
                   prepare_timeout=_prepare_timeout(env.get("P2_PREPARE_TIMEOUT", "").strip()),
                   topology=env.get("P2_TOPOLOGY", "").strip() or None,
                   telemetry_every=_telemetry_every(env.get("P2_TELEMETRY_EVERY", "").strip()))


IMPLS = ("cpp", "python")
CHANNEL_BACKENDS = ("gloo", "nccl", "ucc")


def _impl(text: str) -> str | None:
    text = text.strip().lower()
    if text and text not in IMPLS:
        raise InvalidInputError(f"P2_ENFORCER_IMPL={text!r} must be cpp or python")
    return text or None


def _channel_backends(text: str) -> tuple[str, ...]:
    names = tuple(name.strip().lower() for name in text.split(",") if name.strip())
    for name in names:
        if name not in CHANNEL_BACKENDS:
            raise InvalidInputError(f"P2_CHANNEL_BACKENDS: unknown backend {name!r}; "
                                    f"give one of {', '.join(CHANNEL_BACKENDS)} per channel, e.g. gloo,ucc")
    return names


def _telemetry_every(text: str) -> int:
    every = _at_least_one("P2_TELEMETRY_EVERY", text, DEFAULT_TELEMETRY_EVERY, "iterations")
    if every > MAX_TELEMETRY_EVERY:
        raise InvalidInputError(f"P2_TELEMETRY_EVERY={every} must be at most {MAX_TELEMETRY_EVERY} (iterations a rank "
                                "holds back its telemetry)")
    return every


def _at_least_one(name: str, text: str, default: int, unit: str) -> int:
    """The whole number ``text`` (``default`` when empty), at least 1; one line naming ``name`` otherwise."""
    if not text:
        return default
    try:
        number = int(text)
    except ValueError:
        raise InvalidInputError(f"{name}={text!r} is not a whole number of {unit}") from None
    if number < 1:
        raise InvalidInputError(f"{name}={number} must be at least 1")
    return number


def _prepare_timeout(text: str) -> float:
    if not text:
        return DEFAULT_PREPARE_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        raise InvalidInputError(f"P2_PREPARE_TIMEOUT={text!r} is not a number of seconds") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise InvalidInputError(f"P2_PREPARE_TIMEOUT={text} must be a positive number of seconds")
    return seconds


def default_job(environ: Mapping[str, str], store_address: str | None = None) -> str | None:
    """The job id when ``P2_JOB`` is unset: torchrun's ``TORCHELASTIC_RUN_ID``,
    else ``MASTER_ADDR:MASTER_PORT``, else ``store_address`` (the rendezvous
    store's ``host:port``) — the same on every rank of one run, different for
    two runs at once. Resolved where the link starts, from the mapping given."""
    run_id = environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if run_id and run_id != "none":
        return run_id
    address, port = environ.get("MASTER_ADDR", "").strip(), environ.get("MASTER_PORT", "").strip()
    if address and port:
        return f"{address}:{port}"
    return store_address
