"""Errors of the Ray runtime, apart from the runner's own: both tell a retry apart from a real failure."""
from __future__ import annotations

from xgraph.errors import RunnerError


class ActorLostError(RunnerError):
    """A job's Ray actor died (its process was killed, its node was lost) before the job's stage finished.

    The job itself did nothing wrong: submitting it again, once the runner restarted the
    actor, runs it.
    """


class DeviceUnavailableError(RunnerError):
    """No live Ray node offers the resources a device's actor needs, so its jobs fail at once."""
