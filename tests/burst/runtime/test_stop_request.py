"""Who asked a run to stop, as its workers read it from the run's store: the owner's cancel (the web
view's Cancel writes ``cancel``) ends the run STOPPED with its cluster kept; the budget guard's or a
lease's request (any other text) ends it stopped by the budget, as before. Read on every kind of
store a run's stop request lives on: a directory (a local cluster, a Slurm site's shared disk, a
Kubernetes claim as the pods mount it), ``gs://`` (the GCS emulator) and ``abfs://`` (Azurite)."""

from __future__ import annotations

import pytest

from burst.runtime import storage
from burst.runtime.job import CANCEL_REQUEST, RunFiles
from burst.runtime.training import requested_by
from tests.support.storage_servers import azure_store, azurite_server, gcs_server, gcs_store  # noqa: F401 (fixtures)


@pytest.fixture(params=["directory", "gs", "abfs"])
def store(request, tmp_path) -> str:
    if request.param == "directory":
        return str(tmp_path / "store")
    return request.getfixturevalue("gcs_store" if request.param == "gs" else "azure_store")


def test_the_owner_s_cancel_is_told_from_the_budget_s_stop_on_every_store(store):
    files = RunFiles(store, "gan3d-20261129-000000-ab12")
    scan_files = RunFiles(store, "tune-20261129-000000-cd34")
    assert requested_by((files.stop_request,)) == "request"  # nothing written: the guard's, as before
    storage.write_text(files.stop_request, "budget\n")
    assert requested_by((files.stop_request,)) == "request"
    storage.write_text(files.stop_request, CANCEL_REQUEST + "\n")
    assert requested_by((files.stop_request,)) == CANCEL_REQUEST
    # a scan's trial reads its scan's request and its own: the owner's cancel of either is a cancel
    assert requested_by((scan_files.stop_request, files.stop_request)) == CANCEL_REQUEST
    storage.write_text(files.stop_request, "lease\n")
    assert requested_by((scan_files.stop_request, files.stop_request)) == "request"
