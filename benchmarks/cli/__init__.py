"""The command line (python -m benchmarks): parsing, the commands, progress and console output."""
