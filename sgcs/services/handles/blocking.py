"""A blocking facade over ADS modules, for programs that do not use trio (docs/handles.md).

Theory of operation
-------------------
``attach(config, field)`` starts a thread that runs ``trio.run``: it opens an
sgcs node with ``config``, attaches a module to ``field`` and waits to be
told to stop. Every call from the program's threads crosses over with
``trio.from_thread.run`` (the caller blocks while a trio task runs the trio
API's coroutine, and gets its result or exception unchanged, e.g.
``ExclusiveRefused``, or ``ExclusiveLost`` from ``receive`` on a handle whose
code the merge rule gave to another member). ``receive`` is one such round
trip per event, with an optional timeout (None: wait): simple, and fast
enough for handle traffic; programs that need tens of thousands of events per
second use the trio API.

``detach()`` (or leaving the ``with`` block) releases exclusive codes, leaves
the group, closes the node and joins the thread.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import trio

import sgcs
from sgcs.errors import UsageError

from .module import ExclusiveLost, HandleEvent, Module, ReceiveHandle, SendHandle
from .module import attach as attach_trio
from .survival import SurvivalParams

T = TypeVar("T")
START_TIMEOUT = 30.0
"""Seconds ``attach`` waits for the node to open and the first view."""


class BlockingSendHandle:
    def __init__(self, module: BlockingModule, handle: SendHandle) -> None:
        self._module, self._handle = module, handle

    @property
    def tcd(self) -> int:
        return self._handle.tcd

    def send(self, data: bytes, *, priority: int = 0) -> None:
        """Queue ``data`` at ``priority`` (0-9, higher first); returns once queued."""
        self._module._call(partial(self._handle.send, data, priority=priority))


class BlockingReceiveHandle:
    def __init__(self, module: BlockingModule, handle: ReceiveHandle) -> None:
        self._module, self._handle = module, handle

    @property
    def tcds(self) -> frozenset[int]:
        return self._handle.tcds

    @property
    def lost(self) -> ExclusiveLost | None:
        """Set once the merge rule gave this handle's code to another member."""
        return self._handle.lost

    def receive(self, timeout: float | None = None) -> HandleEvent | None:
        """The next ``Data`` or ``NodeEvent``; None after ``timeout`` seconds.
        Raises ``ExclusiveLost`` (after the frames already queued) once the
        handle's code went to another member, ``trio.EndOfChannel`` once closed."""
        async def get() -> HandleEvent | None:
            with trio.move_on_after(timeout if timeout is not None else float("inf")):
                return await self._handle.receive()
            return None

        return self._module._call(get)

    def close(self) -> None:
        self._module._call(self._handle.close)


class BlockingModule:
    """An attached ADS module driven from ordinary threads; see ``attach``."""

    def __init__(self, config: sgcs.Config, field: str, **options: Any) -> None:
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._module: Module | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main, config, field, options),
                                        name=f"sgcs-ads-{field}")
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise UsageError(f"attach to {field!r} did not complete in {START_TIMEOUT} s")
        if self._error is not None:
            self._thread.join()
            raise self._error

    async def _main(self, config: sgcs.Config, field: str, options: dict[str, Any]) -> None:
        try:
            async with sgcs.open_node(config) as node, attach_trio(node, field, **options) as module:
                self._module = module
                self._token = trio.lowlevel.current_trio_token()
                self._stop = trio.Event()
                self._ready.set()
                await self._stop.wait()
        except BaseException as error:  # handed to the thread that called attach
            if not self._ready.is_set():
                self._error = error
                self._ready.set()
            else:
                raise

    def _call(self, function: Callable[[], Awaitable[T]]) -> T:
        if self._token is None or not self._thread.is_alive():
            raise UsageError("this module is detached; attach again")
        return trio.from_thread.run(function, trio_token=self._token)

    @property
    def module(self) -> Module:
        assert self._module is not None
        return self._module

    @property
    def me(self) -> int:
        return self.module.me

    @property
    def members(self) -> tuple[int, ...]:
        return self._call(self._members)

    async def _members(self) -> tuple[int, ...]:
        return self.module.members

    def p2p(self, node: int, tcd: int) -> BlockingSendHandle:
        return BlockingSendHandle(self, self.module.p2p(node, tcd))

    def multicast(self, tcd: int, node: int | None = None) -> BlockingSendHandle:
        return BlockingSendHandle(self, self.module.multicast(tcd, node))

    def receive(self, *tcds: int, liveness: bool = False) -> BlockingReceiveHandle:
        async def make() -> ReceiveHandle:
            return self.module.receive(*tcds, liveness=liveness)

        return BlockingReceiveHandle(self, self._call(make))

    def watch(self) -> BlockingReceiveHandle:
        async def make() -> ReceiveHandle:
            return self.module.watch()

        return BlockingReceiveHandle(self, self._call(make))

    def receive_exclusive(self, tcd: int, *, liveness: bool = False, timeout: float = 30.0) -> BlockingReceiveHandle:
        handle = self._call(partial(self.module.receive_exclusive, tcd, liveness=liveness, timeout=timeout))
        return BlockingReceiveHandle(self, handle)

    def holder(self, tcd: int) -> int | None:
        """The member holding single-TCD code ``tcd`` by this module's table (``Module.holder``)."""
        async def look() -> int | None:
            return self.module.holder(tcd)

        return self._call(look)

    def reconciled(self, timeout: float = 30.0) -> bool:
        """Wait until the current view's claim tables are exchanged and the merge
        rule applied (``Module.reconciled``); False if ``timeout`` seconds pass first."""
        async def wait() -> bool:
            with trio.move_on_after(timeout):
                await self.module.reconciled()
                return True
            return False

        return self._call(wait)

    def flush(self) -> None:
        self._call(self.module.flush)

    def restrict(self, timeout: float = 10.0) -> None:
        """Enter maintenance (``Module.restrict``): other members refuse point-to-point
        and targeted sends to this node with ``NodeInMaintenance`` until ``lift``."""
        self._call(partial(self.module.restrict, timeout=timeout))

    def lift(self, timeout: float = 10.0) -> None:
        """Leave maintenance (``Module.lift``)."""
        self._call(partial(self.module.lift, timeout=timeout))

    @property
    def maintenance(self) -> frozenset[int]:
        """The members in maintenance, as this module knows them."""
        async def look() -> frozenset[int]:
            return self.module.maintenance

        return self._call(look)

    def detach(self) -> None:
        """Release exclusive codes, leave the data field, close the node."""
        if self._token is not None and self._stop is not None and self._thread.is_alive():
            stop = self._stop
            trio.from_thread.run_sync(stop.set, trio_token=self._token)
        self._thread.join()

    def __enter__(self) -> BlockingModule:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.detach()


def attach(config: sgcs.Config, field: str, *, queue_size: int = 1_024, send_queue: int = 10_000,
           survival: SurvivalParams | None = SurvivalParams()) -> BlockingModule:
    """Open a node with ``config`` and attach a module to ``field``; ``detach()`` (or ``with``) ends both."""
    return BlockingModule(config, field, queue_size=queue_size, send_queue=send_queue, survival=survival)
