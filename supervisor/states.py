"""Process states and exit codes, shared by the supervisor, the roles and the CLI.

Dependency-free on purpose (like supervisord's ``states.py``): every process may
import it without pulling in anything else.
"""

from __future__ import annotations

# supervisord's process states: STOPPED → STARTING → RUNNING; BACKOFF between failed
# starts; FATAL when retrying is pointless (reported, never looped).
STOPPED = "STOPPED"
STARTING = "STARTING"
RUNNING = "RUNNING"
BACKOFF = "BACKOFF"
STOPPING = "STOPPING"
EXITED = "EXITED"
FATAL = "FATAL"
# Started on demand, and not running now: the supervisor holds its socket, and the
# first request starts it (the viewer, until someone opens it and after it idles out).
WAITING = "WAITING"
# RUNNING, but answering no ping for a while: stuck in a call. Killed and started again
# once that lasts ``supervisor.unresponsive_s``.
UNRESPONSIVE = "UNRESPONSIVE"
UP = (RUNNING, UNRESPONSIVE)  # started, answered a first ping, not yet exited
READY = (RUNNING, WAITING)  # what `kirolearn start` waits for every role to be

# The roles in start order (the gateway only with network.listen); stopping walks it
# backwards (storage last, after draining).
START_ORDER = ("storage", "retrieval", "ingest", "gateway", "viewer", "extraction")

# Exit codes of the role processes and the supervisor.
RET_OK = 0
RET_KILLED = 2  # a second SIGTERM: exited at once
RET_PIDFILE = 3  # another supervisor holds the pidfile
RET_IDLE = 4  # a role started on demand exits, unused: it is WAITING again
RET_CONFIG = 78  # EX_CONFIG: FATAL at once, a restart will not fix it

# Exit code of `kirolearn status` when no daemon runs (LSB's "program is not running").
EXIT_NOT_RUNNING = 3
