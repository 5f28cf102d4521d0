"""What tests share: real servers and sites started for them, the cloud guard, the process census."""
