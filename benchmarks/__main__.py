"""``python -m benchmarks``: the command-line entry point."""

from benchmarks.cli import main

raise SystemExit(main())
