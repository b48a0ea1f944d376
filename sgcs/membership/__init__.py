"""Membership layers (SGCS paper, section 4).

``detector``: the per-node gossip failure detector (hypercube heartbeats,
suspicion, pull and ask confirmation). ``agreement``: the per-group
three-phase view agreement, with virtual synchrony and optimistic views.
Join and merge are one operation.
"""
