"""What `burst down` kills and removes comes from a cluster's record; a hand edit (or a sync tool)
must never point it at something else. The real CLI, in-process, on records written as a user
would find them on disk: a Ray directory that is not the cluster's, an empty or odd cluster id,
a token path outside the cluster's own directory."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from burst.cli import app


def _record(home, **fields) -> dict:
    record = {"name": "c1", "provider": "local", "cluster_id": "a1b2c3d4e5f6", "state": "running", "created": time.time(),
              "storage_uri": str(home / "store"), **fields}
    (home / "clusters").mkdir(parents=True, exist_ok=True)
    (home / "clusters" / "c1.json").write_text(json.dumps(record))
    return record


@pytest.fixture
def home(tmp_path, monkeypatch):
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("BURST_HOME", str(path))
    return path


@pytest.fixture
def victim(tmp_path):
    """A directory of the user's with a file in it and a process holding it open, as `down` would
    find it if the record named it (it stops every process with files open in the Ray directory)."""
    place = tmp_path / "u"
    place.mkdir()
    (place / "thesis.tex").write_text("years of work")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); time.sleep(120)", str(place / "thesis.tex")])
    yield place
    holder.kill()
    holder.wait()


@pytest.mark.parametrize("fields, words", [
    ({"temp_dir": "VICTIM"}, "is not this cluster's Ray directory"),        # a hand-edited temp_dir: /home/u
    ({"cluster_id": "", "temp_dir": None}, "is not a cluster id"),          # an empty id would sweep every local cluster
    ({"cluster_id": "*", "temp_dir": None}, "is not a cluster id"),
])
def test_a_record_that_names_what_is_not_its_own_is_damaged_and_down_touches_nothing(home, victim, fields, words):
    fields = {k: (str(victim) if v == "VICTIM" else v) for k, v in fields.items()}
    _record(home, **fields)
    before = (home / "clusters" / "c1.json").read_text()
    result = CliRunner().invoke(app, ["down", "c1"])
    said = result.output.strip()
    assert result.exit_code != 0 and "Traceback" not in said and len(said.splitlines()) == 1, said
    assert words in said and "c1" in said
    assert (victim / "thesis.tex").read_text() == "years of work"
    assert (home / "clusters" / "c1.json").read_text() == before  # nothing changed on disk


def test_down_deletes_the_token_it_made_and_never_a_file_a_record_names_elsewhere(home, tmp_path):
    elsewhere = tmp_path / "id_ed25519"
    elsewhere.write_text("a key the user keeps")
    _record(home, temp_dir=str(tmp_path / "rt" / "a1b2c3d4e5f6"), token_path=str(elsewhere), state="running")
    result = CliRunner().invoke(app, ["down", "c1"])
    assert result.exit_code == 0, result.output
    assert elsewhere.read_text() == "a key the user keeps"
    assert not (home / "clusters" / "c1.json").exists()
    # the token burst made, in the cluster's own directory, goes with the cluster
    own = home / "clusters" / "c1" / "auth_token"
    own.parent.mkdir(parents=True)
    own.write_text("0" * 64)
    _record(home, temp_dir=str(tmp_path / "rt" / "a1b2c3d4e5f6"), token_path=str(own), state="running")
    assert CliRunner().invoke(app, ["down", "c1"]).exit_code == 0
    assert not own.exists()
