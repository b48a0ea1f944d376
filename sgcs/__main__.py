"""``python -m sgcs ...``: the same as the ``sgcs`` console script."""

from .apps.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
