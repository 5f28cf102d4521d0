"""Alembic's environment for the server's database: always given a connection by ``database.upgrade``."""

from alembic import context

from burst.server.database import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
