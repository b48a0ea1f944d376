"""sgcs: scalable group communication.

Processes join and leave named groups, multicast and unicast inside them, and
are told of every membership change as a new view. See README.md.

The public surface is what ``__all__`` names, plus three submodules:
``sgcs.blocking`` (the same API for programs without trio), ``sgcs.metrics``
(statistics in the Prometheus text format) and the services under
``sgcs.services``. Everything else (the sans-I/O protocol core, the drivers in
``sgcs.io``, the command-line apps in ``sgcs.apps``) is internal and may change
without notice; docs/architecture.md draws the layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _compiled

_compiled.install()  # before any compiled module is imported: compiled or sources, all or nothing

from ._version import __version__
from .config import Config, Order, secret_from_env
from .errors import DecodeError, SgcsError, UsageError, WouldBlock

if TYPE_CHECKING:
    from .api import (
        Delivery,
        Event,
        GroupClosed,
        GroupHandle,
        MemberBusy,
        MemberSuspected,
        MessageId,
        NodeHandle,
        NotDelivered,
        OptimisticView,
        Rollback,
        TransitionalView,
        View,
        ViewChange,
        open_node,
    )

# The trio API loads on first use, so the simulator and the protocol modules
# can be imported without importing trio. These names are the ones imported
# from ``api`` under TYPE_CHECKING above (tests/test_api_events.py checks it).
_API_NAMES = frozenset(
    {
        "Delivery",
        "Event",
        "GroupClosed",
        "GroupHandle",
        "MemberBusy",
        "MemberSuspected",
        "MessageId",
        "NodeHandle",
        "NotDelivered",
        "OptimisticView",
        "Rollback",
        "TransitionalView",
        "View",
        "ViewChange",
        "open_node",
    }
)

__all__ = sorted(
    {"Config", "DecodeError", "Order", "SgcsError", "UsageError", "WouldBlock", "__version__", "secret_from_env"}
    | _API_NAMES
)


def __getattr__(name: str) -> Any:
    if name in ("blocking", "metrics"):  # submodules on first use: sgcs.blocking.open_node, sgcs.metrics.serve
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name in _API_NAMES:
        from . import api

        value = getattr(api, name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'sgcs' has no attribute {name!r}")
