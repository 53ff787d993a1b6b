"""``python -m benchmarks``: the command-line entry point."""

from benchmarks.cli.main import main

raise SystemExit(main())
