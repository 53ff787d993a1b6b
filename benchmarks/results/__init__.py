"""Results read back: statistics over seeds, leaderboards, their formats and the HTML report."""
