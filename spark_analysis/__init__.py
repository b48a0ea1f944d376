"""PySpark analysis of sgcs traces (trace schema 1, shared/DESIGN.md).

Empty until the analysis issue lands: invariant checks, latency, reliability,
failure detection and load against N will live here as Spark jobs.
"""
