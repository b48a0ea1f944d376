"""The command-line apps: ``sgcs`` (``cli.py``, also ``python -m sgcs``), ``sgcs
chat``, ``sgcs demo``, ``sgcs bench``, ``sgcs stats``, and the member processes
that demo and bench start (``python -m sgcs.apps.demo_member`` and
``bench_member``; ``members.py`` starts and watches them).

The apps use the library; nothing in the library imports them
(docs/architecture.md). Their contract is the command line (names, options,
exit codes); these modules' Python names are not public API.
"""
