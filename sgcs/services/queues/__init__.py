"""Queues on sgcs: a queue manager per node (memory and durable SQLite queues,
priorities 0-9, bind/unbind, receive with acknowledgement and transactional
receive), store and forward to other nodes' queues exactly once, and queues
replicated on a group through safe (total) order. See docs/queues.md.

The store alone (``QueueStore``) needs neither trio nor a network."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .store import DEAD, LEASED, READY, XMIT_EXPIRED, Message, QueueFull, QueueInfo, QueueStore, Transaction, Unbind

if TYPE_CHECKING:
    from .manager import QueueManager, open_queue_manager
    from .replicated import ReplicatedQueue, open_replicated_queue

__all__ = ["DEAD", "LEASED", "READY", "Message", "QueueFull", "QueueInfo", "QueueManager", "QueueStore",
           "ReplicatedQueue", "Transaction", "Unbind", "XMIT_EXPIRED", "open_queue_manager", "open_replicated_queue"]

_LAZY = {"QueueManager": "manager", "open_queue_manager": "manager",
         "ReplicatedQueue": "replicated", "open_replicated_queue": "replicated"}


def __getattr__(name: str) -> Any:
    # The manager and the replicated queue import trio and sgcs's API: only on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
