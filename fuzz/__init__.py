"""Fuzzing and soak harnesses for xgraph (see README.md here and docs/security.md)."""
