"""The one line a failed job leaves in its run record (``burst.runtime.job.failure_line``)."""

from burst.runtime.job import failure_line


def test_a_ray_train_controller_error_keeps_its_cause():
    """Ray Train 2.60 words a controller failure as a heading and the cause on the next line; the
    first line alone ("Training failed due to controller error:") was all a failed managed run said."""
    from ray.train.v2.api.exceptions import ControllerError

    line = failure_line(ControllerError(TimeoutError("the worker group did not start in 60 s")))
    assert line == "ControllerError: Training failed due to controller error: the worker group did not start in 60 s"


def test_a_plain_error_is_its_first_line_and_bad_data_says_so():
    assert failure_line(ValueError("no such preset 'huge'\n  at line 3")) == "ValueError: no such preset 'huge'"
    assert failure_line(RuntimeError("")) == "RuntimeError"
    wrapped = RuntimeError("worker group failed\nInvalidArgumentError: DataError: f.h5: 'ECAL' has a negative cell [[node]]")
    assert failure_line(wrapped) == "bad input data: f.h5: 'ECAL' has a negative cell"
