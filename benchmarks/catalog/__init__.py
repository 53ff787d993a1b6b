"""What is installed: named benchmark specs, their reference numbers, and the plugins
that add methods and benchmarks."""
