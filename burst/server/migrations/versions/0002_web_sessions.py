"""Browser sessions of the web view.

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("web_sessions",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("digest", sa.String(64), nullable=False, unique=True),
                    sa.Column("token_id", sa.Integer, sa.ForeignKey("tokens.id"), nullable=False),
                    sa.Column("csrf", sa.String(64), nullable=False),
                    sa.Column("created", sa.Float, nullable=False),
                    sa.Column("expires", sa.Float, nullable=False))


def downgrade() -> None:
    op.drop_table("web_sessions")
