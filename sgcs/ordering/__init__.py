"""Delivery-order layers (SGCS paper, section 3.4).

FIFO order per sender is provided by the transport's reliable stream itself.
Causal, total and safe delivery, built on the ACK graph that the transport's
records carry, arrive with the ordering issue; until then a group joined with
any order is delivered in FIFO order.
"""
