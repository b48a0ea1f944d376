"""Measurement scripts over simulator traces and real runs (shared/DESIGN.md, "Testing habits")."""
