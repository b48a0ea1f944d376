"""The package version, in a module of its own: ``sgcs/__init__.py`` re-exports
it, and modules inside the package (the trace recorder) read it from here, so
none of them imports the package it belongs to (an import cycle)."""

__version__ = "0.2.0"
