"""(filled in by its op family)."""
