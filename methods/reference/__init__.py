"""The exact algorithms in-context learners are claimed to emulate (GD, GD++, ridge)."""
