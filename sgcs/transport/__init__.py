"""Dissemination and reliability (SGCS paper, sections 3.1 to 3.3).

* ``reliable``: one member's reliable multicast stream in one group: PSRM
  (unreliable multicast, then digest gossip to an O(log N) partial view), NACK
  recovery from any holder, piggybacked ACK deltas, stability and garbage
  collection, and the network-wide flow window.
* ``unicast``: reliable per-pair unicast streams.
* ``records``: the values exchanged between the transport and the node.
* ``framing``: batching records into datagrams under a byte budget.
* ``params``: the protocol's parameters as every layer reads them (``Params``,
  built from ``sgcs.Config`` once per node).
"""
