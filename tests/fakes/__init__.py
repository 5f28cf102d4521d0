"""Stand-ins for what the tests cannot reach: the Pulumi CLI, kubectl and helm, ssh, and the clouds' API answers."""
