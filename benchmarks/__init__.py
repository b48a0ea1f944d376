"""Measurement scripts over simulator traces and real runs (docs/architecture.md)."""
