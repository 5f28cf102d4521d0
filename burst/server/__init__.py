"""burst for a research group: one server with the group's users, teams, budgets and clusters in a
database, which runs every member's verbs on the group's targets and holds the team to its money."""
