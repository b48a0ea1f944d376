"""Queues on sgcs: a queue manager per node (memory and durable SQLite queues,
priorities 0-9, bind/unbind, receive with acknowledgement and transactional
receive), store and forward to other nodes' queues exactly once, and queues
replicated on a group through total order. See docs/queues.md."""

from .store import DEAD, LEASED, READY, Message, QueueInfo, QueueStore, Unbind

__all__ = ["DEAD", "LEASED", "READY", "Message", "QueueInfo", "QueueStore", "Unbind"]
