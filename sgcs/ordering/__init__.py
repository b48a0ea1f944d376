"""Delivery-order layers (SGCS paper, section 3.4).

FIFO order per sender is provided by the transport's reliable stream itself.
Causal, total and safe delivery (``total``): causal order over the ACK graph
that the transport's records carry, total and safe order by the Lamport
timestamps their senders state, with promises from every member (or, in
large views, a floor computed by the transport's stability gossip); safe
order also waits until every member of the view has acknowledged the
message.
"""
