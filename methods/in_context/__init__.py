"""In-context learners: LSA and reference methods on regression, GD-SSM, sequence models."""
