"""Membership layers (SGCS paper, section 4).

Today: ``static.View``, a view that grows on first contact and shrinks on a
graceful leave. Failure detection, view agreement and virtual synchrony arrive
with the membership issue.
"""
