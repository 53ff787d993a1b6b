"""Sweeps of methods x grid x seeds, each cell a normal run; local, warm or on Ray."""
