"""Sequence layers: linear self-attention, the mesa layer, DeltaNet and gated linear attention."""
