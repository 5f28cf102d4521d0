"""Stand-ins for what the tests cannot reach: the Pulumi CLI, kubectl and helm, ssh, a TPU VM's boundary, and the clouds' API answers."""
