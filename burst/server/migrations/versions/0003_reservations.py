"""Money reserved by verbs under way, before the clusters they make are in their members' journals.

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("reservations",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
                    sa.Column("usd", sa.Float, nullable=False),
                    sa.Column("created", sa.Float, nullable=False),
                    sa.Column("holder", sa.String(120), nullable=False))


def downgrade() -> None:
    op.drop_table("reservations")
