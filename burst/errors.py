"""One exception type for every failure a user can fix; the CLI prints its message on one line."""


class BurstError(Exception):
    """A clear, user-facing error; ``exit_code`` 2 for bad input, 1 for failures at run time."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
