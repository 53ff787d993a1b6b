"""Other libraries' learners on our protocols: learn2learn's MAML, avalanche's baselines."""
