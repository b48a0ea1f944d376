"""The post office for programs that do not use trio.

Theory of operation: as ``sgcs.blocking`` does for nodes, the post office
runs in a trio thread of its own (``open_post_office``) and each call crosses
over with ``trio.from_thread.run``; ``close()`` (or leaving the ``with``)
stops it and joins the thread. An exception in the trio thread is raised from
the next call.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Awaitable, Callable, TypeVar

import trio

import sgcs
from sgcs.errors import UsageError

from .messages import Mail, MIState
from .postoffice import Settings
from .service import Faults, PostOfficeService, open_post_office

T = TypeVar("T")


class BlockingPostOffice:
    """A running post office served by its own trio thread; get one from ``open_blocking_post_office``."""

    def __init__(self, domain: int, config: sgcs.Config, path: str | os.PathLike[str], **options: Any) -> None:
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._service: PostOfficeService | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._serve, args=(domain, config, path, options),
                                        name=f"mailboxes-po{domain}", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def _serve(self, domain: int, config: sgcs.Config, path: str | os.PathLike[str], options: dict[str, Any]) -> None:
        try:
            trio.run(self._main, domain, config, path, options)
        except BaseException as exc:  # kept and raised in the callers' threads
            while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            self._failure = exc
        finally:
            self._ready.set()

    async def _main(self, domain: int, config: sgcs.Config, path: str | os.PathLike[str], options: dict[str, Any]) -> None:
        async with open_post_office(domain, config, path, **options) as service:
            self._service, self._token, self._stop = service, trio.lowlevel.current_trio_token(), trio.Event()
            self._ready.set()
            await self._stop.wait()

    def _call(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        if self._failure is not None:
            raise self._failure
        if self._token is None or not self._thread.is_alive():
            raise UsageError("the post office is closed")
        return trio.from_thread.run(function, *args, trio_token=self._token)

    @property
    def domain(self) -> int:
        assert self._service is not None
        return self._service.domain

    def mi_name(self, host: str, ident: str, system: str = "wf") -> str:
        assert self._service is not None
        return self._service.mi_name(host, ident, system)

    def create_mi(self, name: str, app_state: bytes = b"") -> None:
        assert self._service is not None
        self._call(self._service.create_mi, name, app_state)

    def send(self, sender: str, receiver: str, content: bytes, title: str = "") -> None:
        assert self._service is not None
        self._call(self._service.send, sender, receiver, content, title)

    def send_many(self, sender: str, mails: list[tuple[str, bytes]]) -> None:
        assert self._service is not None
        self._call(self._service.send_many, sender, mails)

    def pull(self, name: str, max_mails: int = 10_000) -> list[Mail]:
        assert self._service is not None
        return self._call(self._service.pull, name, max_mails)

    def move(self, name: str, to_domain: int, app_state: bytes | None = None) -> None:
        assert self._service is not None
        self._call(self._service.move, name, to_domain, app_state)

    def running(self) -> list[str]:
        assert self._service is not None
        service = self._service

        async def read() -> list[str]:
            return service.running()
        return self._call(read)

    def mi_state(self, name: str) -> MIState | None:
        assert self._service is not None
        service = self._service

        async def read() -> MIState | None:
            return service.mi_state(name)
        return self._call(read)

    def close(self) -> None:
        if self._token is not None and self._stop is not None and self._thread.is_alive():
            stop = self._stop
            try:
                trio.from_thread.run_sync(stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join()

    def __enter__(self) -> BlockingPostOffice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_blocking_post_office(domain: int, config: sgcs.Config, path: str | os.PathLike[str], *,
                              system: str = "wf", settings: Settings | None = None,
                              faults: Faults | None = None) -> BlockingPostOffice:
    """``open_post_office`` for threads: returns once the post office runs."""
    return BlockingPostOffice(domain, config, path, system=system, settings=settings, faults=faults)
