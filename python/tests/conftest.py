import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time

import boto3
import numpy as np
import pyarrow.parquet as pq
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli():
    """The command line binary (``SKETCHFIT_BIN``, or the workspace's debug build, made
    here if it is missing): the interop tests need it and fail without it."""
    path = os.environ.get("SKETCHFIT_BIN") or str(REPO / "target" / "debug" / "sketchfit")
    if not os.path.exists(path):
        subprocess.run(["cargo", "build", "--quiet", "--bin", "sketchfit"], cwd=REPO, check=True)
    assert os.path.exists(path), f"no sketchfit binary at {path}"

    def run(*args):
        r = subprocess.run([path, *map(str, args)], capture_output=True, text=True)
        assert r.returncode == 0, f"sketchfit {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}"
        return r.stdout

    return run


@pytest.fixture(scope="session")
def digits():
    """The shipped digits (the CLI's main job data): train and test, features and labels."""
    tr = pq.read_table(REPO / "data" / "digits_train.parquet")
    te = pq.read_table(REPO / "data" / "digits_test.parquet")
    feats = [c for c in tr.column_names if c.startswith("px")]

    def split(t):
        X = np.column_stack([t.column(c).to_numpy() for c in feats]).astype(np.float32)
        return X, t.column("label").to_numpy()

    return split(tr) + split(te) + (tr, te, feats)


# The object-store fixtures: a local S3 server (moto_server on 127.0.0.1, started by
# scripts/test.sh, or here when the tests run alone), shared by every test module that
# reads or writes a store.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing-key",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-value",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint():
    given = os.environ.get("SKETCHFIT_TEST_S3")
    if given:
        yield given
        return
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    assert exe, "moto_server is not installed (pip install 'moto[server]')"
    port = _free_port()
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield url
    proc.kill()
    proc.wait()


@pytest.fixture(scope="session")
def env(s3_endpoint):
    e = {**os.environ, **CREDENTIALS, "AWS_ENDPOINT_URL": s3_endpoint}
    os.environ.update({**CREDENTIALS, "AWS_ENDPOINT_URL": s3_endpoint})
    return e


@pytest.fixture(scope="session")
def s3(env, s3_endpoint):
    return boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"], aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])


_BUCKETS = iter(range(10**6))


@pytest.fixture()
def bucket(s3):
    name = f"sf-test-{os.getpid()}-{next(_BUCKETS)}"
    s3.create_bucket(Bucket=name)
    return name


