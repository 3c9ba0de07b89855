"""Defaults: deadlines and limits, defined once. Every wait in asyncoll uses one of these.

What is read from the environment lives in asyncoll._runtime.settings, what the
transport is told in asyncoll._transport.settings, and what the group layer is
told in asyncoll._policy.
"""

from __future__ import annotations

#: Default timeout of init_process_group and of each collective, as torch's (30 min).
DEFAULT_TIMEOUT_S = 1800.0
#: How long a client keeps retrying to reach a coordinator that is not up yet.
CONNECT_RETRY_INTERVAL_S = 0.05
#: A member that lost its coordinator dials again after this many seconds,
#: doubled after each round of its addresses up to this bound, and jittered
#: (times 0.5 to 1) so that a job's members do not all come back at once.
RECONNECT_BACKOFF_CAP_S = 1.0
#: Deadline of one TCP connect attempt and of a data-plane handshake.
HANDSHAKE_TIMEOUT_S = 10.0
#: How long a peer joining a job waits for the first bytes of the coordinator's greeting,
#: which a coordinator sends as soon as it accepts: a server that stays silent longer
#: (torch's TCPStore, an HTTP server) is not one. It is far above what a coordinator
#: takes to greet thousands of peers connecting at once; reconnecting to a coordinator
#: already known waits HANDSHAKE_TIMEOUT_S.
GREETING_TIMEOUT_S = 0.5
#: How long destroy_process_group waits for the coordinator to acknowledge a leave.
LEAVE_TIMEOUT_S = 5.0
#: How long destroying a group waits for an operation still running on its fast path in
#: another thread (told to stop at its next check) before leaving the unmapping to
#: that operation's end.
CLOSE_WAIT_S = 5.0
#: How long a leaving rank keeps reading from a peer that has not closed its end yet.
LINGER_S = 1.0
#: Seconds a member that saw another give up (in an arena's control line, which
#: says only the error's kind) waits for the loop to bring that error's words.
ABANDON_WORDS_S = 0.5
#: How long a process hosting an embedded coordinator waits, on destroy, for
#: the other members to leave before it shuts the coordinator down.
EMBEDDED_DRAIN_TIMEOUT_S = 30.0
#: How often a member tells the coordinator it is alive.
HEARTBEAT_INTERVAL_S = 2.0
#: A member silent this long (seconds) is declared lost by the coordinator
#: (ASYNCOLL_HEARTBEAT_TIMEOUT overrides it for a job; its first peer's value counts).
HEARTBEAT_TIMEOUT_S = 10.0
#: A rank waiting for its coordinator or for the rest of its job first says so after
#: this many seconds, then at intervals that double, up to WAITING_REPORT_CAP_S.
WAITING_FIRST_REPORT_S = 3.0
WAITING_REPORT_CAP_S = 300.0
#: How long a process whose RANK is out of range tries to reach the coordinator, which
#: then fails the rest of the rendezvous, before it fails alone.
OUT_OF_RANGE_REPORT_S = 5.0
#: How long a coordinator fails new joins to a job after refusing one of its peers
#: (issue 59): the peers of one launch that come after the refused one fail too.
REFUSAL_REMEMBERED_S = 30.0
#: Largest control-plane message the coordinator accepts, in bytes.
MAX_CONTROL_MESSAGE_BYTES = 1 << 20
#: Largest message a peer accepts from its coordinator: a Welcome or a status
#: grows with the job (a directory of 100k ranks on as many hosts is a few MB).
MAX_COORDINATOR_REPLY_BYTES = 64 << 20
#: How often the coordinator checks its deadlines.
COORDINATOR_TICK_S = 0.1
#: Default coordinator port, as torch's MASTER_PORT convention.
DEFAULT_PORT = 29500
#: Job id used when none is given.
DEFAULT_JOB_ID = "default"
#: Version of both wire protocols; peers and daemon must agree.
PROTOCOL_VERSION = 10
#: Extra seconds a peer waits beyond a deadline the coordinator enforces, so
#: the coordinator's answer (which names who is missing) arrives first.
COORDINATOR_GRACE_S = 2.0
#: Ranks sample their operations whose sequence number is a multiple of this (every
#: rank the same ones, so the coordinator can compare their times: Heartbeat.samples).
SAMPLE_EVERY = 8
