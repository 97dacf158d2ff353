"""xgraph."""
