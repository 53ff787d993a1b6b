"""Running a plan: executing a method on a benchmark, and the one run service that every
caller goes through."""
