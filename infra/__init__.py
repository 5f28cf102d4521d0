"""Pulumi programs, one module per stack, and the Automation API driver (not built yet)."""
