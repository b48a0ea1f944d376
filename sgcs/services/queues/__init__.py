"""Queues on sgcs: a queue manager per node (memory and durable SQLite queues,
priorities 0-9, create/delete, receive with acknowledgement and transactional
receive), client sessions (bind = connect, unbind by the paper's two rules,
push delivery by callback or async iterator with bounded prefetch), store and forward to other nodes' queues exactly once, and queues
replicated on a group through safe (total) order. See docs/queues.md.

The store alone (``QueueStore``) needs neither trio nor a network."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .store import DEAD, LEASED, READY, XMIT_EXPIRED, Message, QueueFull, QueueInfo, QueueStore, Transaction, Unbind

if TYPE_CHECKING:
    from .manager import QueueManager, open_queue_manager
    from .replicated import ReplicatedQueue, open_replicated_queue
    from .session import ConnectionOK, SendTicket, Session, SessionClosed, Subscription, Unbound

__all__ = ["DEAD", "LEASED", "READY", "ConnectionOK", "Message", "QueueFull", "QueueInfo", "QueueManager", "QueueStore",
           "ReplicatedQueue", "SendTicket", "Session", "SessionClosed", "Subscription", "Transaction", "Unbind",
           "Unbound", "XMIT_EXPIRED", "open_queue_manager", "open_replicated_queue"]

_LAZY = {"QueueManager": "manager", "open_queue_manager": "manager",
         "ReplicatedQueue": "replicated", "open_replicated_queue": "replicated",
         **{name: "session" for name in ("ConnectionOK", "SendTicket", "Session", "SessionClosed", "Subscription",
                                         "Unbound")}}


def __getattr__(name: str) -> Any:
    # The manager, the sessions and the replicated queue import trio and sgcs's API: only on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
