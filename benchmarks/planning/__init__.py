"""From names and settings to a validated run plan: typed settings and the ordered layers
they are resolved over, once per run."""
