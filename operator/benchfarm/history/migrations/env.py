"""Alembic's environment: run the migrations on the connection `db.Database.migrate` hands over."""

from alembic import context

from benchfarm.history.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
