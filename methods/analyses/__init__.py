"""What in-context learners measure beside their loss: GD alignment, curves, probes, figures."""
