"""How much may cross the wire between a rank and the service.

The ``MAX_*`` bounds are what the service takes: a message over one is
refused with INVALID_ARGUMENT and one line naming the field (its request guard
and :mod:`optimizer_service.service.requests`), a trace over
:data:`MAX_TRACE_BYTES` fails its request. The ``RANK_*`` amounts are what a
rank puts in one message; they sit below the bounds they answer to, which
``tests/optimizer_service/wire/test_limits.py`` checks. The admin API's own
bounds (pages, decisions, trace requests) are the service's alone and stay in
its ``requests`` module.
"""

from __future__ import annotations

MAX_MESSAGE_BYTES = 80 * 1024 * 1024    # the largest gRPC message either way (a plan of 64 MiB and then some)
MAX_TRACE_CHUNK = 4 * 1024 * 1024       # trace bytes in one TraceChunk
#: One message of a rank's stream: Register (a topology document of at most 64 KiB), Telemetry (at most
#: 4 096 op and 8 192 motif timings; an op names its group's ranks) and trace chunks of at most 4 MiB:
#: four chunks' worth leaves room for the telemetry of jobs of thousands of ranks.
LINK_MESSAGE_BYTES = 4 * MAX_TRACE_CHUNK

# Register
MAX_WORLD_SIZE = 65_536
MAX_SWITCH_EVERY = 1_000_000
MAX_TEXT = 256                          # host names, versions, backend names, reasons
MAX_TOPOLOGY_CHARACTERS = 64 * 1024     # a topology YAML document a rank sends with Register (the YAML loader's bound)
MAX_HELD_VERSIONS = 1_024

# Telemetry
MAX_TELEMETRY_OPS = 4_096               # op timings in one Telemetry message
MAX_TELEMETRY_MOTIFS = 8_192            # motif timings in one Telemetry message
MAX_CHANNEL = 1_024
# Telemetry's physical bounds: generous for any real run, small enough that sums of a
# window's values can never overflow a float (1.7e308 from two ranks did: "intermediate
# overflow in fsum").
MAX_SECONDS = 7 * 24 * 3600.0           # any duration, wait or offset a rank reports: one week
MAX_ITERATION = 2**53 - 1               # an iteration index: exact as a double, far from uint64's wrap
MAX_VERSION = 2**53 - 1                 # a plan version a rank names (the store's own bound)
MAX_OP_BYTES = 1 << 50                  # one comm-op's payload: a pebibyte

# Traces
MAX_TRACE_BYTES = 64 << 20              # trace JSON one rank may send for one request

# What a rank sends in one message: less than the service takes, so that one slow
# iteration's telemetry or one trace cannot crowd the stream.
RANK_TELEMETRY_OPS = 512                # op timings per Telemetry (of MAX_TELEMETRY_OPS)
RANK_TELEMETRY_MOTIFS = 2_048           # motif timings per Telemetry (of MAX_TELEMETRY_MOTIFS)
RANK_TRACE_CHUNK = 1 << 20              # trace bytes per TraceChunk (of MAX_TRACE_CHUNK)
