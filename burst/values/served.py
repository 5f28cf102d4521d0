"""What a burst server and its clients agree on: which commands a member runs through the server,
which files travel with them, and how a served process knows it is one."""

FORWARDED = ("plan", "up", "status", "down", "train", "run", "logs", "tune", "datasets", "workloads")
MONEY_VERBS = ("plan", "up", "run", "train", "tune")  # held to what the member's team has left
SENT_WITH_COMMAND = ("--policy", "--gate", "--space")  # files the client reads on its machine and sends along
STORE_SCHEMES = ("gs", "gcs", "abfs", "abfss", "s3")  # what a member's --data may name through a server: a bucket, never a file there
UPLOAD = "@upload:"  # the word that stands, in the words sent, for the N-th file sent
SERVED_UPLOADS = "BURST_SERVED_UPLOADS"  # set in a process the server runs for a member: where that member's files are
