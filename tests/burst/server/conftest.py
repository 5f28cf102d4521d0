"""What the server's test modules share: one real PostgreSQL per module (Debian's, by initdb in a
temporary directory; ``tests.support.postgres``). A module that uses it marks itself
``needs(postgres.missing())``, so it skips in one line where PostgreSQL is not installed."""

import pytest

from tests.support import postgres


@pytest.fixture(scope="module")
def database():
    with postgres.running() as url:
        yield url
