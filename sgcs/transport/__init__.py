"""Dissemination and reliability layers (SGCS paper, sections 3.1 to 3.3).

Today this holds only the foundation's plain unreliable multicast
(``unreliable.py``). PSRM gossip repair, NACK recovery, piggybacked ACKs,
stability and the flow window replace it in the transport issue.
"""
