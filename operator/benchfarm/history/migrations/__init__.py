"""Alembic migrations of the results database (`db.Database.migrate` runs them)."""
