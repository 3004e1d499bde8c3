"""Calls on several threads of one process, each with its own ``storage_options``: every
call runs in a session of its own, so no thread's endpoint, credentials or files reach
another call, during the overlap or after it."""

import concurrent.futures
import pathlib
import socket

import numpy as np
import pyarrow.parquet as pq
import pytest

import sketchfit as sf

from conftest import REPO


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _estimator():
    return sf.SketchRidgeClassifier(stages=[{"kind": "rff", "dim": 256}], alpha=0.01, random_state=4)


def test_overlapping_fits_with_other_storage_options_never_share_them(env, s3, bucket, tmp_path, s3_endpoint):
    t = pq.read_table(REPO / "data" / "digits_train.parquet")
    local = tmp_path / "train.parquet"
    pq.write_table(t, local, row_group_size=200)
    s3.upload_file(str(local), bucket, "train/train.parquet")
    url = f"s3://{bucket}/train/*.parquet"
    test = pq.read_table(REPO / "data" / "digits_test.parquet").drop(["label"])
    alone = _estimator().fit(str(local), "label").decision_function(test)

    good = {"aws_endpoint": s3_endpoint, "allow_http": True, "aws_region": "us-east-1"}
    # An endpoint where nothing listens, no retries: a call that used it fails at once.
    bad = {"aws_endpoint": f"http://127.0.0.1:{_closed_port()}", "allow_http": True, "max_retries": 0,
           "retry_timeout": 1}

    def fit_good(_):
        return _estimator().fit(url, "label", storage_options=good).decision_function(test)

    def fit_bad(_):
        with pytest.raises(OSError):
            _estimator().fit(url, "label", storage_options=bad)
        return True

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        goods = [pool.submit(fit_good, i) for i in range(3)]
        bads = [pool.submit(fit_bad, i) for i in range(3)]
        for f in goods:
            np.testing.assert_array_equal(f.result(), alone)
        assert all(f.result() for f in bads)

    # After the overlap: a call without options uses the environment's endpoint (the
    # fixture's), not the unreachable one another thread gave; one with the bad options
    # still fails, whatever the good calls set.
    np.testing.assert_array_equal(_estimator().fit(url, "label").decision_function(test), alone)
    with pytest.raises(OSError):
        _estimator().fit(url, "label", storage_options=bad)


def test_a_file_one_call_read_is_no_input_of_another_call(tmp_path, digits):
    X, y = digits[0], digits[1]
    est = _estimator().fit(X, y)
    path = tmp_path / "m.sfm"
    est.save(path)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        loaded = pool.submit(sf.Model.load, path).result()
        # The load's session registered the file as its input; the save is another call,
        # in its own session, so it may replace the model file it wrote before.
        pool.submit(est.save, path).result()
    assert pathlib.Path(path).read_bytes() == est.model_.to_bytes()
    assert loaded.header["rows"] == est.model_.header["rows"]
