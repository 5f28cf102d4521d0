"""What every workload shares: CPU facts and oneDNN, the epoch loop its trainer inherits, and the
sample-level distances of the fast-calorimeter community's evaluation."""
