"""Delivery-order layers (SGCS paper, section 3.4).

Today every order is served by ``fifo.FifoGate``; causal, total and safe
delivery arrive with the ordering issue.
"""
