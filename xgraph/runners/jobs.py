"""Job records shared by Runner and GraphRunner: ids, status codes, waiting with a timeout, errors.

A job is submitted (`execute_async`), finishes once (ok, failed, cancelled or timed out) and
is waited for (`wait`). Finished jobs stay retrievable (status, error) for a while after they
are waited for, so `get_error(job_id)` works after `wait` returned a non-zero status. Results
are handed over once (`take_results`) and then forgotten; results nobody collects are kept
up to `MAX_KEPT_RESULT_BYTES` in all, oldest dropped first.

Ctrl-C: a KeyboardInterrupt reaches the main thread between two steps of Python code, never
inside one C call. So each step that changes the job accounting is one C call whose effect the
caller can see afterwards: a job is recorded by one dict store (`JobTable.new`), a slot is taken
into a list the caller holds (`JobSlots.take_into`) and given back from it (`give_back`), and a
job's slot is given back by `finish` right after its record is final. A submission that Ctrl-C
cuts short can then always be undone: the caller knows whether it holds a slot and a record.
"""
from __future__ import annotations

import enum
import functools
import itertools
import math
import numbers
import operator
import queue
import threading
import time
from collections import OrderedDict, deque
from itertools import islice
from typing import Any

from xgraph.errors import RunnerError, XGraphError


#: Results of finished jobs that nobody collected yet are kept up to this many bytes in all
#: (256 MiB); beyond it the oldest are dropped, and collecting them says so.
MAX_KEPT_RESULT_BYTES = 256 << 20
_DROPPED = "results dropped"
_COLLECTED = "results collected"


_NBYTES = operator.attrgetter("nbytes")


def nbytes_of(values: "list | tuple") -> int:
    """Bytes of the arrays in `values` (a sequence value's arrays counted, None and others 0).

    Called several times per job (stats, kept results), so the common case, arrays only, runs
    in C (no Python bytecode per value)."""
    try:
        return sum(map(_NBYTES, values))
    except AttributeError:  # a sequence (list of arrays), None, or a non-array value among them
        pass
    total = 0
    for v in values:
        if isinstance(v, list):
            total += nbytes_of(v)
        else:
            total += getattr(v, "nbytes", 0)
    return total


class JobStatus(enum.IntEnum):
    """What `wait` returns: 0 for success, non-zero for every kind of failure."""

    OK = 0
    FAILED = 1
    CANCELLED = 2
    TIMED_OUT = 3
    PENDING = -1


class Job:
    """One submitted run: its buffers, its completion event and, once done, its status and error.

    The event exists only once somebody waits for the job while it is pending: a job run to the
    end on its caller's thread (a synchronous `run`) is final before anyone waits and never needs one."""

    __slots__ = ("id", "inputs", "outputs", "results", "status", "error", "event", "submitted",
                 "started", "finished", "deadline", "state", "collect", "__weakref__")

    def __init__(self, job_id: int, inputs: list, outputs: list | None, deadline: float | None = None,
                 collect: bool = False):
        self.id = job_id
        self.inputs = inputs
        self.outputs = outputs
        self.results: list | None = None
        self.status = JobStatus.PENDING
        self.error: BaseException | None = None
        self.event: threading.Event | None = None  # made by the first `wait` that finds the job pending
        self.submitted = time.perf_counter()
        self.started: float | None = None
        self.finished: float | None = None
        self.deadline = deadline
        self.state: Any = None  # scheduler-private bookkeeping
        #: the submitter takes the results from the record itself (a synchronous run): the table
        #: forgets the job once it is final instead of keeping it for get_error/get_outputs
        self.collect = collect

    @property
    def done(self) -> bool:
        """True once the job has a final status."""
        return self.status is not JobStatus.PENDING


#: status -> its name, for counters (an enum member's `.name` is a descriptor call)
STATUS_NAMES = {s: s.name for s in JobStatus}


class JobTable:
    """Thread-safe job ids and records; `finish` is idempotent (the first final status wins)."""

    def __init__(self, owner: str, keep_finished: int = 1024, keep_result_bytes: int | None = None,
                 slots: "JobSlots | None" = None):
        """`slots`: the job slots each job holds while pending; `finish` gives a job's back."""
        self._owner = owner
        self._give_back = slots.release if slots is not None else None
        self._keep_bytes = MAX_KEPT_RESULT_BYTES if keep_result_bytes is None else keep_result_bytes
        self._result_bytes = 0
        self._ids = itertools.count(1)
        #: a job id no other job of this table has, for a run that needs no record (`GraphRunner.run`)
        self.next_id = self._ids.__next__
        self._lock = threading.Lock()
        self._pending: dict[int, Job] = {}
        self._finished: OrderedDict[int, Job] = OrderedDict()
        self._keep = keep_finished

    def new(self, inputs: list, outputs: list | None, timeout: float | None = None, collect: bool = False) -> Job:
        """Create and record a pending job (its deadline is now + `timeout` when given); see `Job.collect`."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        job = Job(next(self._ids), inputs, outputs, deadline, collect)
        self._pending[job.id] = job  # one store, then nothing before the caller holds `job` (Ctrl-C)
        return job

    def finish(self, job: Job, status: JobStatus, error: BaseException | None = None) -> bool:
        """Give `job` its final status and wake its waiters; False if it was already final."""
        status = status if type(status) is JobStatus else JobStatus(status)
        if error is not None and not job.collect:
            drop_traces(error)  # the record outlives the run: keep the error's text, not the run's data
        with self._lock:
            if job.status is not JobStatus.PENDING:
                return False
            job.status = status
            job.error = error
            job.finished = time.perf_counter()
            job.inputs = None  # drop references to caller data as soon as possible
            job.outputs = None  # the caller's buffers are filled; the record need not keep them alive
            self._pending.pop(job.id, None)
            if not job.collect:  # else the submitter holds the record and takes its results: nothing to keep
                self._finished[job.id] = job
            event = job.event
            if event is not None:
                event.set()
            if self._give_back is not None:
                self._give_back()  # the record is final: from here on a Ctrl-C leaves nothing undone
            if not job.collect:
                self._keep_within_limits(job)
        return True

    def _keep_within_limits(self, job: Job) -> None:
        """Count `job`'s results and forget the oldest records and results beyond the limits (under the lock)."""
        if job.results is not None:
            self._result_bytes += nbytes_of(job.results)
        while len(self._finished) > self._keep:
            self._drop_results(self._finished.popitem(last=False)[1])
        if self._result_bytes > self._keep_bytes:
            for old in self._finished.values():  # oldest first
                if self._result_bytes <= self._keep_bytes:
                    break
                if old is not job and old.results is not None:
                    self._drop_results(old, dropped=True)

    def _drop_results(self, job: Job, dropped: bool = False) -> None:
        """Let go of a finished job's results (under the lock)."""
        if job.results is not None:
            self._result_bytes -= nbytes_of(job.results)
            job.results = None
            if dropped:
                job.state = _DROPPED

    def take_results(self, job: "tuple[int, int] | int | Job") -> list | None:
        """A finished job's results, handed over once: the table keeps no reference afterwards."""
        record = self.get(job)
        with self._lock:
            if not record.done:
                raise RunnerError(f"{self._owner}: job {record.id} has not finished; wait() for it first")
            results = record.results
            if results is None and record.state in (_DROPPED, _COLLECTED):
                why = ("were dropped: uncollected results may take at most "
                       f"{self._keep_bytes} bytes, oldest dropped first" if record.state is _DROPPED
                       else "were already collected (get_outputs hands them over once)")
                raise RunnerError(f"{self._owner}: the results of job {record.id} {why}")
            if results is not None:
                self._drop_results(record)
                record.state = _COLLECTED
        return results

    def get(self, job: "tuple[int, int] | int | Job") -> Job:
        """The record for a job tuple, id or Job; RunnerError if unknown or forgotten."""
        if isinstance(job, Job):
            return job
        job_id = job[0] if isinstance(job, tuple) and job else job
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise RunnerError(f"{self._owner}: a job is the (job_id, status) tuple execute_async returned "
                              f"or its int id, not {job!r}")
        with self._lock:
            found = self._pending.get(job_id) or self._finished.get(job_id)
        if found is None:
            raise RunnerError(f"{self._owner}: unknown job {job_id} (never submitted, or finished so long ago "
                              f"that it was forgotten; wait for jobs soon after submitting them)")
        return found

    def wait(self, job: "tuple[int, int] | int | Job", timeout: float | None = None) -> Job:
        """Block until `job` is final or `timeout` seconds pass (RunnerError naming the job then)."""
        timeout = check_timeout(timeout, f"{self._owner}: wait timeout", allow_zero=True)
        record = self.get(job)
        with self._lock:  # `finish` sets the event under the same lock: no wake-up is lost
            if record.done:
                return record
            if record.event is None:
                record.event = threading.Event()
            event = record.event
        if not event.wait(timeout):
            raise RunnerError(f"{self._owner}: job {record.id} did not finish within {timeout} s; it is still "
                              f"running (wait again, or close() the runner to cancel it)")
        return record

    def pending(self) -> list[Job]:
        """Jobs not yet final, oldest first."""
        with self._lock:
            return sorted(self._pending.values(), key=lambda j: j.id)


def drop_traces(error: BaseException) -> None:
    """Let `error`, its causes and its contexts forget their tracebacks (types and messages stay).

    A stored error's traceback holds the frames it passed through, and each frame its caller's:
    their variables hold the job's inputs and intermediate arrays, so a runner keeping its failed
    jobs' errors (for `get_error`) would keep those arrays too. Clearing the frames is not enough:
    the frame that caught the error is still running when the job is finished, and keeps what it
    last held once it returns. Messages already say where an error was raised (file and line).
    """
    seen: set[int] = set()
    todo: list = [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        todo += (e.__cause__, e.__context__)
        group = getattr(e, "exceptions", None)  # an exception group's members
        if isinstance(group, tuple):
            todo += [member for member in group if isinstance(member, BaseException)]


def check_timeout(value: Any, what: str, allow_zero: bool = False) -> float | None:
    """`value` as seconds (None: no limit); RunnerError naming `what` for a non-number, NaN or out of range."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RunnerError(f"{what} must be a number of seconds or None, got {type(value).__name__} {value!r}")
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float: no sensible number of seconds
        seconds = math.nan
    if math.isnan(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise RunnerError(f"{what} must be {'>= 0' if allow_zero else '> 0'} seconds (or None), got {value!r}")
    return None if math.isinf(seconds) else seconds


class JobSlots:
    """`limit` job slots (a runner's jobs in flight): taken by `acquire_slot` (into a list the taker
    holds, `take_into`), given back by `JobTable.finish` for a job, `give_back` otherwise.

    A queue of tokens rather than a `threading.Semaphore`: taking and giving back a free slot
    are single C calls (a Semaphore is Python code around a Condition), and a synchronous run
    takes and gives back one per call. Several runners may share one pool (a GearRunner's gears)."""

    __slots__ = ("limit", "take_nowait", "take", "release", "_put")

    def __init__(self, limit: int) -> None:
        tokens: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(limit):
            tokens.put(True)
        self.limit = limit
        self.take_nowait = tokens.get_nowait  # raises queue.Empty when every slot is taken
        self.take = tokens.get  # (timeout=...) raises queue.Empty when none came free in time
        self.release = functools.partial(tokens.put, True)
        self._put = tokens.put

    def take_into(self, held: list, timeout: float | None = None) -> None:
        """Take a free slot and record it in `held` (queue.Empty when none came free within `timeout`
        seconds; at once when None). Both happen in one C call (`list.extend` pulls one token from
        the queue), so a Ctrl-C finds the slot either free or in `held`."""
        take = self.take_nowait if timeout is None else functools.partial(self.take, timeout=timeout)
        held.extend(islice(iter(take, None), 1))

    def give_back(self, held: list) -> None:
        """Give back the slots `held` records and forget them there, in one C call (see `take_into`)."""
        _consume(map(self._put, islice(iter(held.pop, None), len(held))))


#: runs an iterator to its end in C (a zero-length deque keeps nothing)
_consume = deque(maxlen=0).extend


def interrupted(owner: str, job: Job, error: BaseException) -> RunnerError:
    """The error of a job whose submission `error` cut short (Ctrl-C, a thread that could not start)."""
    detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return RunnerError(f"{owner}: job {job.id} cancelled: submitting it was interrupted ({detail}); submit it again")


def undo_submission(undo, job: Job | None, held: list, error: BaseException, owner: str) -> BaseException:
    """Undo a submission `error` cut short with `undo(job, held, error)` (cancel the recorded job, or
    give back the slot `held` records), done again when another Ctrl-C interrupts it; returns what
    to raise: KeyboardInterrupt and XGraphErrors as they are, anything else as a RunnerError."""
    while True:
        try:
            undo(job, held, error)
            break
        except KeyboardInterrupt:  # a second Ctrl-C: undoing is idempotent, finish it, then raise the first
            continue
    if isinstance(error, (KeyboardInterrupt, XGraphError)):
        return error
    return RunnerError(f"{owner}: the job could not be started: "
                       f"{type(error).__name__}: {error}")


def acquire_slot(slots: JobSlots, held: list, *, limit: int, block: bool, is_closed, owner: str) -> None:
    """Take one of `limit` job slots into `held` (`JobSlots.take_into`): wait (re-checking `is_closed()`
    every 0.1 s) or refuse at once."""
    try:
        slots.take_into(held)
        return
    except queue.Empty:
        pass
    if not block:
        raise RunnerError(f"{owner}: {limit} jobs are already in flight; wait for one before submitting more, "
                          f"or raise max_jobs_in_flight")
    while True:
        try:
            slots.take_into(held, 0.1)
            return
        except queue.Empty:
            if is_closed():
                raise RunnerError(f"{owner}: the runner was closed while waiting for a free job slot") from None
