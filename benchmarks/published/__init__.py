"""Published tables and claims, and reproduce, which runs and judges them."""
