"""Data shapes of the CRDs and plans (pydantic, no I/O)."""
