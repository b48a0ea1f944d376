"""Flows for programs that do not use trio.

Theory of operation: as ``sgcs.blocking`` and the mailboxes' facade do, a
node and its flows run in a trio thread of their own, and each call crosses
over with ``trio.from_thread.run``. ``close()`` (or leaving the ``with``)
stops them and joins the thread. An exception raised in the trio thread is
raised again from the next call.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Awaitable, Callable, Iterable, Sequence, TypeVar

import trio

import sgcs
from sgcs.errors import UsageError

from .collapse import Key, Row
from .engine import FlowStatistics
from .graph import FlowGraph
from .service import BEHIND, FlowService, FlowSubscription, open_flows
from .syntax import Value

T = TypeVar("T")


class BlockingSubscription:
    """A subscription seen from a thread; get one from ``BlockingFlows.subscribe``."""

    def __init__(self, flows: "BlockingFlows", handle: FlowSubscription) -> None:
        self._flows, self._handle = flows, handle

    def wait_ready(self, timeout: float | None = None) -> None:
        """Return once a state subscription is LIVE; UsageError after ``timeout`` seconds."""
        handle = self._handle

        async def wait() -> None:
            with trio.move_on_after(float("inf") if timeout is None else timeout):
                await handle.ready()
                return
            raise UsageError(f"flows: subscription to {handle.space!r} not ready after {timeout} s; is a keeper running?")
        self._flows._call(wait)

    def rows(self) -> dict[Key, Row]:
        handle = self._handle

        async def read() -> dict[Key, Row]:
            return handle.rows()
        return self._flows._call(read)

    def receive(self, timeout: float | None = None) -> tuple[Value, ...] | None:
        """The next event of a history subscription; None after ``timeout`` seconds."""
        handle = self._handle

        async def receive() -> tuple[Value, ...] | None:
            with trio.move_on_after(float("inf") if timeout is None else timeout):
                return await handle.receive()
            return None
        return self._flows._call(receive)


class BlockingFlows:
    """A node running flows over ``graph`` in its own trio thread; get one from ``open_blocking_flows``."""

    def __init__(self, config: sgcs.Config, graph: FlowGraph, options: dict[str, Any]) -> None:
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._service: FlowService | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._serve, args=(config, graph, options),
                                        name=f"flows-{config.name}", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def _serve(self, config: sgcs.Config, graph: FlowGraph, options: dict[str, Any]) -> None:
        try:
            trio.run(self._main, config, graph, options)
        except BaseException as exc:  # kept and raised in the callers' threads
            while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            self._failure = exc
        finally:
            self._ready.set()

    async def _main(self, config: sgcs.Config, graph: FlowGraph, options: dict[str, Any]) -> None:
        async with sgcs.open_node(config) as node, open_flows(node, graph, **options) as service:
            self._service, self._token, self._stop = service, trio.lowlevel.current_trio_token(), trio.Event()
            self._ready.set()
            await self._stop.wait()

    def _call(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        if self._failure is not None:
            raise self._failure
        if self._token is None or not self._thread.is_alive():
            raise UsageError("flows: closed")
        return trio.from_thread.run(function, *args, trio_token=self._token)

    def publish(self, root: str, events: Iterable[Sequence[object]], *, wait: bool = True) -> None:
        """As ``FlowService.publish``: with ``wait``, returns once delivered here."""
        service = self._service
        assert service is not None

        async def publish() -> None:
            await service.publish(root, list(events), wait=wait)
        self._call(publish)

    def subscribe(self, space: str, predicate: str = "true", *, durable: bool = False,
                  conflate: str | Sequence[str] | None = None, behind: int = BEHIND) -> BlockingSubscription:
        """As ``FlowService.subscribe``."""
        service = self._service
        assert service is not None

        async def subscribe() -> FlowSubscription:
            return await service.subscribe(space, predicate, durable=durable, conflate=conflate, behind=behind)
        return BlockingSubscription(self, self._call(subscribe))

    def statistics(self) -> FlowStatistics:
        service = self._service
        assert service is not None

        async def read() -> FlowStatistics:
            return service.statistics()
        return self._call(read)

    def close(self) -> None:
        if self._token is not None and self._stop is not None and self._thread.is_alive():
            stop = self._stop
            try:
                trio.from_thread.run_sync(stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join()

    def __enter__(self) -> "BlockingFlows":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_blocking_flows(config: sgcs.Config, graph: FlowGraph, *, name: str | None = None,
                        store: str | os.PathLike[str] | None = None, keeper: bool = False) -> BlockingFlows:
    """A node with ``open_flows`` for threads: returns once it runs."""
    return BlockingFlows(config, graph, {"name": name, "store": store, "keeper": keeper})
