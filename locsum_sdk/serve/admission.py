"""Admission by memory for one server process: each request reserves its memory estimate against the budget before
any model work and releases it when its batch ends; requests that do not fit wait in a bounded FIFO queue; requests
with the same options that are waiting together are decoded together (`summarize_batch`).

The dispatcher runs in the server's event loop; a batch runs in a worker thread. Decoding reports every step to
each request (`Job.report`), which is where a request that was cancelled (its client left, its deadline passed)
stops: a batch stops at its next step once none of its requests is still wanted.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import LocsumError
from ..generation import Partial
from ..options import Options
from ..summarizer import Summary

logger = logging.getLogger("locsum_sdk")


class QueueFull(LocsumError):
    """The queue of requests waiting for memory is full."""


class ShuttingDown(LocsumError):
    """The server is stopping and takes no more work."""


class Cancelled(LocsumError):
    """Every request of a batch was cancelled, so its decoding stopped."""


@dataclass(eq=False)
class Job:
    """One request on its way through admission."""

    documents: list[str]
    query: str | None
    options: Options
    needed: int  # bytes: the request's memory estimate, reserved while it runs
    deadline: float  # time.monotonic() after which it is abandoned
    future: asyncio.Future
    on_partial: Callable[[int, Partial], None] | None = None  # called in the worker thread (streaming)
    cancelled: threading.Event = field(default_factory=threading.Event)
    queued: float = field(default_factory=time.monotonic)
    started: float | None = None
    sources: list[Any] = field(default_factory=list)  # for files: where each document came from (`files.Part`)

    @property
    def wanted(self) -> bool:
        return not self.cancelled.is_set() and time.monotonic() < self.deadline

    def report(self, step: int, partial: Partial) -> None:
        if self.on_partial is not None and self.wanted:
            self.on_partial(step, partial)


class Admission:
    """Reserves memory for jobs, queues the rest in order, and runs batches of jobs with the same options, at most
    `concurrency` batches at once (each uses every intra-op thread of the model).

    run_batch: summarizes a batch in a worker thread (`summarize_batch` with a step callback), returning one summary
    per job in order; observe: called with (event, value) for the metrics (`queue_depth`, `reserved`, `batch`)."""

    def __init__(self, run_batch: Callable[[list[Job], Callable[[int, dict[int, Partial]], None]], list[Summary]],
                 budget: int, max_queue: int, max_batch: int, window: float, concurrency: int = 1,
                 observe: Callable[[str, float], None] = lambda event, value: None):
        self.run_batch, self.budget, self.max_queue = run_batch, budget, max_queue
        self.concurrency = concurrency
        self.max_batch, self.window, self.observe = max_batch, window, observe
        self.queue: collections.deque[Job] = collections.deque()
        self.reserved = 0
        self.running: set[asyncio.Task] = set()
        self.closed = False
        self._wake = asyncio.Event()
        self._dispatcher: asyncio.Task | None = None

    def start(self) -> None:
        self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())

    def submit(self, job: Job) -> None:
        """Queue `job` (its estimate already checked against the whole budget); QueueFull when the queue is."""
        if self.closed:
            raise ShuttingDown("the server is shutting down; send the request to another replica or retry later")
        if len(self.queue) >= self.max_queue:
            raise QueueFull(f"{len(self.queue)} requests are waiting for memory, the most this server queues")
        self.queue.append(job)
        self.observe("queue_depth", len(self.queue))
        self._wake.set()

    def withdraw(self, job: Job) -> None:
        """Take a job that is no longer wanted out of the queue (a running one stops at its batch's next step)."""
        job.cancelled.set()
        job.future.add_done_callback(_retrieve)  # its outcome, an error too, is no one's now: not an unretrieved one
        if job in self.queue:
            self.queue.remove(job)
            self.observe("queue_depth", len(self.queue))
            self._wake.set()

    async def close(self) -> None:
        """Refuse queued jobs and new ones, stop running batches at their next step, wait for them to end."""
        self.closed = True
        while self.queue:
            job = self.queue.popleft()
            if not job.future.done():
                job.future.set_exception(ShuttingDown("the server is shutting down before this request ran"))
        for task in list(self.running):
            for job in task.jobs:  # type: ignore[attr-defined]
                job.cancelled.set()
        if self.running:
            await asyncio.gather(*self.running, return_exceptions=True)
        if self._dispatcher is not None:
            self._dispatcher.cancel()

    async def _dispatch(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.window and self.queue and not self.running:
                await asyncio.sleep(self.window)  # requests arriving together decode together
            while self.queue and not self.closed:
                batch = self._next_batch()
                if not batch:
                    break  # the head waits for memory: a batch ending wakes the dispatcher
                self._launch(batch)

    def _next_batch(self) -> list[Job]:
        """The queue's head and, after it, jobs with the same options that fit beside it (FIFO: the head is never
        passed over for a smaller job)."""
        while self.queue and not self.queue[0].wanted:
            self._abandon(self.queue.popleft())
        if not self.queue or len(self.running) >= self.concurrency:
            return []
        if self.queue[0].needed > self.budget - self.reserved:
            return []
        head, free = self.queue[0], self.budget - self.reserved
        batch, total = [head], head.needed
        for job in list(self.queue)[1:]:
            if len(batch) == self.max_batch:
                break
            if job.wanted and job.options == head.options and total + job.needed <= free:
                batch.append(job)
                total += job.needed
        for job in batch:
            self.queue.remove(job)
        self.observe("queue_depth", len(self.queue))
        return batch

    def _abandon(self, job: Job) -> None:
        if not job.future.done():
            job.future.set_exception(Cancelled("the request was cancelled or its deadline passed while it waited"))

    def _launch(self, batch: list[Job]) -> None:
        needed = sum(job.needed for job in batch)
        self.reserved += needed
        self.observe("reserved", self.reserved)
        self.observe("batch", len(batch))
        task = asyncio.get_running_loop().create_task(self._execute(batch, needed))
        task.jobs = batch  # type: ignore[attr-defined]
        self.running.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task) -> None:
        self.running.discard(task)
        self._wake.set()  # its memory and its turn are free: the queue's head may run

    async def _execute(self, batch: list[Job], needed: int) -> None:
        started = time.monotonic()
        for job in batch:
            job.started = started
        try:
            outcomes = await self._summarize(batch)
        finally:
            self.reserved -= needed
            self.observe("reserved", self.reserved)
        for job, outcome in zip(batch, outcomes):
            if job.future.done():
                continue
            if isinstance(outcome, BaseException):
                job.future.set_exception(outcome)
            else:
                job.future.set_result(outcome)

    async def _summarize(self, batch: list[Job]) -> list[Any]:
        """Summaries (or the error of each job): a batch that fails on one input's error is run again job by job,
        so that only that job fails."""
        def on_step(step: int, partials: dict[int, Partial]) -> None:
            for index, partial in partials.items():
                batch[index].report(step, partial)
            if not any(job.wanted for job in batch):
                raise Cancelled("every request of the batch was cancelled or ran out of time")

        try:
            return list(await asyncio.to_thread(self.run_batch, batch, on_step))
        except Cancelled as err:
            return [err] * len(batch)
        except LocsumError as err:
            if len(batch) == 1:
                return [err]
        except Exception as err:  # an unexpected failure: the server logs it; the clients get a 500 without it
            logger.exception("a batch of %d requests failed", len(batch))
            return [err] * len(batch)
        outcomes = []
        for job in batch:
            outcomes += await self._summarize([job]) if job.wanted else [Cancelled("the request was cancelled")]
        return outcomes


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()
