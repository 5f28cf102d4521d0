"""Teams, users, their tokens and the clusters they brought up.

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("teams",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("name", sa.String(40), nullable=False, unique=True),
                    sa.Column("monthly_budget_usd", sa.Float, nullable=True),
                    sa.Column("held_month", sa.String(7), nullable=True),
                    sa.Column("created", sa.Float, nullable=False))
    op.create_table("users",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("name", sa.String(40), nullable=False, unique=True),
                    sa.Column("team_id", sa.Integer, sa.ForeignKey("teams.id"), nullable=False),
                    sa.Column("role", sa.String(10), nullable=False),
                    sa.Column("uid", sa.String(12), nullable=False, unique=True),
                    sa.Column("monthly_budget_usd", sa.Float, nullable=True),
                    sa.Column("held_month", sa.String(7), nullable=True),
                    sa.Column("created", sa.Float, nullable=False))
    op.create_table("tokens",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
                    sa.Column("digest", sa.String(64), nullable=False, unique=True),
                    sa.Column("created", sa.Float, nullable=False),
                    sa.Column("expires", sa.Float, nullable=True),
                    sa.Column("revoked", sa.Float, nullable=True))
    op.create_table("clusters",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
                    sa.Column("name", sa.String(40), nullable=False),
                    sa.Column("cluster_id", sa.String(64), nullable=False),
                    sa.Column("provider", sa.String(20), nullable=False),
                    sa.Column("region", sa.String(60), nullable=False),
                    sa.Column("hourly_usd", sa.Float, nullable=False),
                    sa.Column("created", sa.Float, nullable=False),
                    sa.Column("expires", sa.Float, nullable=True),
                    sa.Column("ended", sa.Float, nullable=True),
                    sa.Column("stopped_by", sa.String(200), nullable=True),
                    sa.UniqueConstraint("user_id", "cluster_id"))


def downgrade() -> None:
    for table in ("clusters", "tokens", "users", "teams"):
        op.drop_table(table)
