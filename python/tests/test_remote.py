"""Data and models in an object store, against a real S3 server (moto_server on
127.0.0.1, started by scripts/test.sh, or here when the tests run alone): a run on
``s3://`` gives the local run's model and predictions; an existing object is never
replaced; each fault is a clear error within the retry budget; a pass cut by the network
resumes from its checkpoint. Every client gets dummy credentials, so none asks a cloud
metadata address."""

import os
import pathlib
import shutil
import socket
import struct
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import boto3
import pytest

import sketchfit as sf

from conftest import CREDENTIALS, REPO
from test_interop import PIPELINE as interop_pipeline

def _bin():
    path = os.environ.get("SKETCHFIT_BIN") or str(REPO / "target" / "debug" / "sketchfit")
    assert os.path.exists(path), f"no sketchfit binary at {path}"
    return path


def run(env, *args, timeout=300, cwd=None):
    start = time.monotonic()
    r = subprocess.run([_bin(), *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    r.seconds = time.monotonic() - start
    return r


def ok(env, *args, cwd=None):
    r = run(env, *args, cwd=cwd)
    assert r.returncode == 0, f"sketchfit {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}"
    return r.stdout


def _get(s3, bucket, key):
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def _arrays(blob: bytes) -> bytes:
    """A model file's arrays (everything after its header): the models of a local and a
    remote run differ only in the data paths their header records."""
    n = struct.unpack("<Q", blob[:8])[0]
    return blob[8 + n:]


def _header(blob: bytes) -> dict:
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(json.loads(blob[8:8 + n])["__metadata__"]["sketchfit"])


# The interop tests' digits pipeline, checkpointing after every 100-row chunk so that a
# cut pass has a checkpoint to resume from.
PIPELINE = interop_pipeline + "checkpoint_every = 1\nchunk_rows = 100\n"


def _digits_parts(tmp_path, parts=4):
    """The digits' training rows as `parts` files of several row groups each."""
    t = pq.read_table(REPO / "data" / "digits_train.parquet")
    out = []
    for i, idx in enumerate(np.array_split(np.arange(t.num_rows), parts)):
        p = tmp_path / f"part-{i}.parquet"
        pq.write_table(t.take(idx), p, row_group_size=100)
        out.append(p)
    return out


def _upload(s3, bucket, files, prefix="train"):
    for f in files:
        s3.upload_file(str(f), bucket, f"{prefix}/{pathlib.Path(f).name}")


def test_train_accumulate_solve_and_predict_on_s3_give_the_local_results(env, s3, bucket, tmp_path):
    files = _digits_parts(tmp_path)
    _upload(s3, bucket, files)
    local_toml = tmp_path / "local.toml"
    local_toml.write_text(PIPELINE.format(train=tmp_path / "part-*.parquet"))
    remote_toml = tmp_path / "remote.toml"
    remote_toml.write_text(PIPELINE.format(train=f"s3://{bucket}/train/part-*.parquet"))
    ok(env, "train", local_toml, "-o", tmp_path / "local.sfm", "--quiet")
    # A remote output's checkpoint is local, in the working directory, and removed at the end.
    out = ok(env, "train", remote_toml, "-o", f"s3://{bucket}/models/m.sfm", "--quiet", cwd=tmp_path)
    assert f"model written to s3://{bucket}/models/m.sfm" in out
    local = (tmp_path / "local.sfm").read_bytes()
    remote = _get(s3, bucket, "models/m.sfm")
    # Byte for byte the same arrays; the header differs only in the data paths it records.
    assert _arrays(remote) == _arrays(local)
    hl, hr = _header(local), _header(remote)
    assert hr["pipeline"]["data"]["train"] == [f"s3://{bucket}/train/part-*.parquet"]
    for h in (hl, hr):
        h["pipeline"]["data"]["train"] = None
        h["pipeline"].pop("source", None)  # the pipeline file's name
        h.pop("checksum")
    assert hl == hr
    assert not (tmp_path / "m.sfm.ckpt").exists()

    # Shards to the store, solved from the store: the same predictions as the local model.
    for i in range(2):
        ok(env, "accumulate", remote_toml, "--shard", f"{i}/2", "-o", f"s3://{bucket}/parts/p{i}.sfs", "--quiet")
    ok(env, "solve", remote_toml, f"s3://{bucket}/parts/p0.sfs", f"s3://{bucket}/parts/p1.sfs",
       "-o", f"s3://{bucket}/models/solved.sfm", "--quiet")

    # predict: model and rows from the store, predictions to it, byte-identical to local.
    s3.upload_file(str(REPO / "data" / "digits_test.parquet"), bucket, "test/digits_test.parquet")
    ok(env, "predict", tmp_path / "local.sfm", "-i", REPO / "data" / "digits_test.parquet", "-o", tmp_path / "pred.parquet")
    for model in ("models/m.sfm", "models/solved.sfm"):
        key = f"pred/{model.split('/')[1]}.parquet"
        ok(env, "predict", f"s3://{bucket}/{model}", "-i", f"s3://{bucket}/test/*.parquet", "-o", f"s3://{bucket}/{key}")
        assert _get(s3, bucket, key) == (tmp_path / "pred.parquet").read_bytes()

    # An existing object is never replaced, and its bytes stay as they were.
    before = _get(s3, bucket, "models/m.sfm")
    r = run(env, "train", remote_toml, "-o", f"s3://{bucket}/models/m.sfm", "--quiet")
    assert r.returncode == 2 and "exists" in r.stderr and "never replaces" in r.stderr
    assert _get(s3, bucket, "models/m.sfm") == before
    r = run(env, "predict", tmp_path / "local.sfm", "-i", REPO / "data" / "digits_test.parquet", "-o", f"s3://{bucket}/pred/m.sfm.parquet")
    assert r.returncode == 2 and "exists" in r.stderr
    # An output onto an input is refused by its URL.
    r = run(env, "predict", tmp_path / "local.sfm", "-i", f"s3://{bucket}/test/digits_test.parquet", "-o", f"s3://{bucket}/test/digits_test.parquet")
    assert r.returncode == 2 and ("input" in r.stderr or "exists" in r.stderr)


def test_the_python_package_reads_and_writes_the_store(env, s3, bucket, tmp_path, s3_endpoint):
    files = _digits_parts(tmp_path, parts=2)
    _upload(s3, bucket, files)
    opts = {"aws_endpoint": s3_endpoint, "allow_http": True, "aws_region": "us-east-1"}
    est = sf.SketchRidgeClassifier(stages=[{"kind": "rff", "dim": 512}], alpha=0.01, random_state=3)
    remote = est.fit(f"s3://{bucket}/train/part-*.parquet", "label", storage_options=opts)
    local = sf.SketchRidgeClassifier(stages=[{"kind": "rff", "dim": 512}], alpha=0.01, random_state=3).fit(
        [str(f) for f in files], "label")
    test = pq.read_table(REPO / "data" / "digits_test.parquet").drop(["label"])
    np.testing.assert_array_equal(remote.decision_function(test), local.decision_function(test))
    remote.save(f"s3://{bucket}/py/model.sfm", storage_options=opts)
    back = sf.Model.load(f"s3://{bucket}/py/model.sfm", storage_options=opts)
    np.testing.assert_array_equal(back.decision_function(test), local.decision_function(test))
    pipe = sf.Pipeline('task = "classification"\n[data]\ntrain = []\nfeatures = ["px*"]\nlabel = "label"\n'
                       '[[stages]]\nkind = "rff"\ndim = 256\n[ridge]\nlambda = 0.01\n[run]\nseed = 2\n')
    parts = [sf.Statistics.accumulate(pipe, f"s3://{bucket}/train/part-*.parquet", shard=(i, 2), storage_options=opts)
             for i in range(2)]
    parts[0].save(f"s3://{bucket}/py/p0.sfs", storage_options=opts)
    p0 = sf.Statistics.load(f"s3://{bucket}/py/p0.sfs", storage_options=opts)
    merged = p0.merge(parts[1]).solve(pipe)
    # The same shards of the local files, merged alike: the same model exactly (and the
    # one-process fit to rounding, its sums added in another order).
    here = [sf.Statistics.accumulate(pipe, [str(f) for f in files], shard=(i, 2)) for i in range(2)]
    np.testing.assert_array_equal(merged.decision_function(test), here[0].merge(here[1]).solve(pipe).decision_function(test))
    single = pipe.fit([str(f) for f in files]).decision_function(test)
    np.testing.assert_allclose(merged.decision_function(test), single, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="never replaces"):
        remote.save(f"s3://{bucket}/py/model.sfm", storage_options=opts)


def test_faults_are_clear_errors_within_the_retry_budget(env, s3, bucket, tmp_path):
    files = _digits_parts(tmp_path, parts=1)
    _upload(s3, bucket, files)
    model = tmp_path / "m.sfm"
    toml = tmp_path / "p.toml"

    def train(url, out=model, *extra, e=env):
        toml.write_text(PIPELINE.format(train=url))
        return run(e, "train", toml, "-o", out, "--quiet", *extra)

    r = train(f"s3://{bucket}/train/missing.parquet")
    assert r.returncode == 2 and f"s3://{bucket}/train/missing.parquet" in r.stderr and "no such object" in r.stderr
    r = train("s3://no-such-bucket-here/train/part-0.parquet")
    assert r.returncode == 2 and "no such" in r.stderr
    r = train(f"s3://{bucket}/train/nothing-*.parquet")
    assert r.returncode == 2 and "no object matches" in r.stderr
    r = train("s4://bucket/x.parquet")
    assert r.returncode == 2 and "not a storage scheme" in r.stderr
    # A truncated object: its footer is gone.
    blob = files[0].read_bytes()
    s3.put_object(Bucket=bucket, Key="bad/cut.parquet", Body=blob[: len(blob) // 2])
    r = train(f"s3://{bucket}/bad/cut.parquet")
    assert r.returncode == 2 and "bad/cut.parquet" in r.stderr
    # An unknown option is named; a secret given on the command line is never printed.
    r = train(f"s3://{bucket}/train/part-0.parquet", model, "--storage-option", "aws_no_such_key=1")
    assert r.returncode == 2 and "aws_no_such_key" in r.stderr
    secret = "s3cr3t-do-not-print"
    r = train(f"s3://{bucket}/train/missing.parquet", model, "--storage-option", f"aws_secret_access_key={secret}")
    assert r.returncode == 2 and secret not in r.stderr and secret not in r.stdout
    # A server that accepts connections and never answers: an error within the budget
    # (a 1 s request timeout, one retry), not a hang; nothing under the output name.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    try:
        e = {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        r = train(f"s3://{bucket}/train/part-0.parquet", model, "--storage-option", "timeout=1s",
                  "--storage-option", "max_retries=1", "--storage-option", "retry_timeout=5", e=e)
    finally:
        silent.close()
    assert r.returncode == 1 and "after up to" in r.stderr, r.stderr
    assert r.seconds < 30
    assert not model.exists()
    assert secret not in (tmp_path / "p.toml").read_text()


class _CuttingProxy:
    """A TCP proxy to the S3 server that counts the requests through it and, past
    `limit` of them, stops forwarding and accepting: a network that fails in the middle
    of a pass."""

    def __init__(self, upstream_port, limit=None):
        self.limit, self.requests, self.up = limit, 0, upstream_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.cut = threading.Event()
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.cut.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.up))
            self.conns += [c, u]
            threading.Thread(target=self._pipe, args=(c, u, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, False), daemon=True).start()

    def _pipe(self, a, b, from_client):
        try:
            while not self.cut.is_set():
                data = a.recv(65536)
                if not data:
                    break
                if from_client:
                    self.requests += data.count(b" HTTP/1.1\r\n")
                    if self.limit is not None and self.requests > self.limit:
                        self.close()
                        break
                b.sendall(data)
        except OSError:
            pass

    def close(self):
        self.cut.set()
        for s in [self.sock, *self.conns]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_pass_cut_by_the_network_resumes_from_its_checkpoint(env, s3, bucket, tmp_path, s3_endpoint, where):
    files = _digits_parts(tmp_path, parts=4)
    _upload(s3, bucket, files)
    toml = tmp_path / "p.toml"
    text = PIPELINE.format(train=f"s3://{bucket}/train/part-*.parquet")
    if where == "s3":
        # A checkpoint in the store: the one object a run replaces (its own), put
        # unconditionally at each checkpoint and deleted once the model is written.
        text += f'checkpoint = "s3://{bucket}/ckpt/m.ckpt"\n'
    toml.write_text(text)
    local = tmp_path / "local.toml"
    local.write_text(PIPELINE.format(train=tmp_path / "part-*.parquet"))
    ok(env, "train", local, "-o", tmp_path / "local.sfm", "--quiet")
    upstream = int(s3_endpoint.rsplit(":", 1)[1])
    # How many requests a whole run makes; the cut comes six before its end, in the pass
    # (the last thing a run reads; the model is written locally).
    counter = _CuttingProxy(upstream)
    try:
        ok({**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{counter.port}"}, "train", toml, "-o", tmp_path / "whole.sfm", "--quiet")
    finally:
        counter.close()
    assert counter.requests > 20
    proxy = _CuttingProxy(upstream, limit=counter.requests - 6)
    try:
        e = {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"}
        model = tmp_path / "m.sfm"
        r = run(e, "train", toml, "-o", model, "--quiet", "--storage-option", "max_retries=1",
                "--storage-option", "retry_timeout=3")
    finally:
        proxy.close()
    assert r.returncode == 1, r.stderr
    assert "after up to" in r.stderr and "resumes from its checkpoint" in r.stderr
    checkpoint_there = (lambda: (tmp_path / "m.sfm.ckpt").exists()) if where == "local" else (
        lambda: s3.list_objects_v2(Bucket=bucket, Prefix="ckpt/").get("KeyCount", 0) == 1)
    assert not model.exists() and checkpoint_there(), r.stderr
    # The network is back: the run continues from its checkpoint to the local model.
    out = run(env, "train", toml, "-o", model, "--resume")
    assert out.returncode == 0 and "resuming from" in out.stderr, out.stderr
    assert _arrays(model.read_bytes()) == _arrays((tmp_path / "local.sfm").read_bytes())
    assert not checkpoint_there()


class _RangeHandler(__import__("http.server").server.SimpleHTTPRequestHandler):
    """A static file server that answers Range requests (206), as object stores and CDNs
    do; Python's own answers them with the whole file."""

    def log_message(self, *args):
        pass

    def send_head(self):
        rng = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not rng or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        start, end = rng.removeprefix("bytes=").split("-")
        start, end = int(start), min(int(end) if end else size - 1, size - 1)
        f = open(path, "rb")
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        return _Limited(f, end - start + 1)


class _Limited:
    def __init__(self, f, n):
        self.f, self.n = f, n

    def read(self, k=-1):
        k = self.n if k < 0 else min(k, self.n)
        data = self.f.read(k)
        self.n -= len(data)
        return data

    def close(self):
        self.f.close()


def test_a_single_object_over_http_trains_the_local_model(env, tmp_path):
    import functools
    import http.server

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_RangeHandler, directory=str(REPO / "data")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/digits_train.parquet"
        local, remote = tmp_path / "local.toml", tmp_path / "http.toml"
        local.write_text(PIPELINE.format(train=REPO / "data" / "digits_train.parquet"))
        remote.write_text(PIPELINE.format(train=url))
        ok(env, "train", local, "-o", tmp_path / "local.sfm", "--quiet")
        ok(env, "train", remote, "-o", tmp_path / "http.sfm", "--quiet", "--storage-option", "allow_http=true")
        missing = run(env, "train", remote, "-o", tmp_path / "x.sfm", "--quiet", "--storage-option", "allow_http=true",
                      "--set", f'data.train=["{url}.missing"]')
    finally:
        server.shutdown()
    assert _arrays((tmp_path / "http.sfm").read_bytes()) == _arrays((tmp_path / "local.sfm").read_bytes())
    assert missing.returncode == 2 and "no such object" in missing.stderr, missing.stderr


def test_nothing_in_the_store_is_lost_to_a_checkpoint_however_it_is_spelt(env, s3, bucket, tmp_path):
    """``run.checkpoint`` naming the model's URL, an object the run did not write, or a
    training object under a scheme alias (``s3a://``) is refused before the first row,
    and every object stays as it was."""
    files = _digits_parts(tmp_path, parts=1)
    _upload(s3, bucket, files)
    s3.put_object(Bucket=bucket, Key="other/notes.txt", Body=b"someone's object")
    toml = tmp_path / "p.toml"
    toml.write_text(PIPELINE.format(train=f"s3://{bucket}/train/part-*.parquet"))

    def objects():
        listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        return {o["Key"]: _get(s3, bucket, o["Key"]) for o in listed}

    before = objects()
    model = f"s3://{bucket}/models/m.sfm"
    for checkpoint in (model, f"s3a://{bucket}/models/m.sfm", f"s3://{bucket}/other/notes.txt",
                       f"s3a://{bucket}/train/part-0.parquet", f"s3://{bucket}//train/./part-0.parquet"):
        r = run(env, "train", toml, "-o", model, "--quiet", "--set", f'run.checkpoint="{checkpoint}"', cwd=tmp_path)
        assert r.returncode == 2 and "run.checkpoint" in r.stderr, (checkpoint, r.stderr)
        assert objects() == before, checkpoint
    # A checkpoint of its own in the store serves and is removed; the model stays.
    out = ok(env, "train", toml, "-o", model, "--quiet", "--set", f'run.checkpoint="s3://{bucket}/ckpt/m.ckpt"')
    assert "model written" in out
    after = objects()
    assert "models/m.sfm" in after and not any(k.startswith("ckpt/") for k in after)
    assert {k: v for k, v in after.items() if k != "models/m.sfm"} == before


def test_settings_to_change_are_exit_2_naming_them_not_network_faults(env, s3, bucket, tmp_path):
    files = _digits_parts(tmp_path, parts=1)
    _upload(s3, bucket, files)
    toml = tmp_path / "p.toml"
    # A glob in a bucket that does not exist: the listing's 404 is the user's to fix.
    toml.write_text(PIPELINE.format(train="s3://no-such-bucket-for-globs/train/*.parquet"))
    r = run(env, "train", toml, "-o", tmp_path / "m.sfm", "--quiet")
    assert r.returncode == 2 and "no such bucket" in r.stderr, r.stderr
    # s3:// against a plain-http endpoint without allow_http: nothing was sent; say the setting.
    toml.write_text(PIPELINE.format(train=f"s3://{bucket}/train/part-0.parquet"))
    plain = {k: v for k, v in env.items() if k != "AWS_ALLOW_HTTP"}
    r = run(plain, "train", toml, "-o", tmp_path / "m.sfm", "--quiet")
    assert r.returncode == 2 and "allow_http" in r.stderr and "retries" not in r.stderr, r.stderr
    assert not (tmp_path / "m.sfm").exists()


def test_a_password_in_a_url_reaches_no_model_report_message_or_listing(env, tmp_path):
    import functools
    import http.server

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_RangeHandler, directory=str(REPO / "data")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    secret = "PASSWORD-never-printed"
    try:
        url = f"http://reader:{secret}@127.0.0.1:{server.server_address[1]}/digits_train.parquet"
        toml = tmp_path / "p.toml"
        toml.write_text(PIPELINE.format(train=url))
        # Without allow_http: a setting to name, and the URL's password is not in the message.
        r = run(env, "train", toml, "-o", tmp_path / "x.sfm")
        assert r.returncode == 2 and "allow_http" in r.stderr and secret not in r.stderr + r.stdout, r.stderr
        r = run(env, "train", toml, "-o", tmp_path / "m.sfm", "--report", tmp_path / "r.json",
                "--storage-option", "allow_http=true")
        assert r.returncode == 0, r.stderr
        assert secret not in r.stderr + r.stdout
        assert secret not in (tmp_path / "r.json").read_text()
        assert secret.encode() not in (tmp_path / "m.sfm").read_bytes()
        info = run(env, "inspect", tmp_path / "m.sfm", "--json")
        assert info.returncode == 0 and secret not in info.stdout and "***@127.0.0.1" in info.stdout
        # A part records its row groups by URL: redacted there too, and the parts still solve.
        r = run(env, "accumulate", toml, "-o", tmp_path / "p0.sfs", "--storage-option", "allow_http=true", "-q")
        assert r.returncode == 0 and secret not in r.stderr, r.stderr
        assert secret.encode() not in (tmp_path / "p0.sfs").read_bytes()
        r = run(env, "solve", toml, tmp_path / "p0.sfs", "-o", tmp_path / "s.sfm", "--storage-option", "allow_http=true", "-q")
        assert r.returncode == 0 and secret not in r.stderr + r.stdout, r.stderr
        # An error that quotes the URL (a missing object) hides it too.
        missing = run(env, "train", toml, "-o", tmp_path / "y.sfm", "--storage-option", "allow_http=true",
                      "--set", f'data.train=["{url}.missing"]')
        assert missing.returncode == 2 and secret not in missing.stderr and "***@" in missing.stderr, missing.stderr
    finally:
        server.shutdown()


LANDMARKS = PIPELINE.replace(
    'kind = "tensor_sketch"\ndegree = 3\noffset = 1.0\ndim = 1024', 'kind = "nystrom"\ndegree = 3\noffset = 1.0\ndim = 256'
)


def test_a_night_over_the_store_reads_only_the_new_day(env, s3, bucket, tmp_path):
    """The retraining guide's night against the local S3 server: maps in the store, one
    part per day, the solve over a glob of parts with a window; the landmark map's model
    equals the local one's arrays."""
    files = _digits_parts(tmp_path, parts=3)
    _upload(s3, bucket, files, prefix="events")
    job = tmp_path / "job.toml"
    job.write_text(LANDMARKS.format(train=f"s3://{bucket}/events/part-0.parquet"))
    maps = f"s3://{bucket}/maps/m.maps"
    ok(env, "fit-maps", job, "-o", maps, "-q")
    for day in range(3):
        ok(env, "accumulate", job, "--maps", maps, "-i", f"s3://{bucket}/events/part-{day}.parquet",
           "-o", f"s3://{bucket}/parts/day-{day}.sfs", "-q")
    ok(env, "solve", job, f"s3://{bucket}/parts/day-*.sfs", "--last", "2", "--maps", maps,
       "-o", f"s3://{bucket}/models/night.sfm", "-q")
    # The same night from local files and a local copy of the maps.
    local_maps = tmp_path / "m.maps"
    local_maps.write_bytes(_get(s3, bucket, "maps/m.maps"))
    for day in (1, 2):
        ok(env, "accumulate", job, "--maps", local_maps, "-i", files[day], "-o", tmp_path / f"day-{day}.sfs", "-q")
    ok(env, "solve", job, tmp_path / "day-1.sfs", tmp_path / "day-2.sfs", "--maps", local_maps,
       "-o", tmp_path / "night.sfm", "-q")
    assert _arrays(_get(s3, bucket, "models/night.sfm")) == _arrays((tmp_path / "night.sfm").read_bytes())
    # A day given twice over the store is refused, and the parts and maps stay as they were.
    before = _get(s3, bucket, "parts/day-2.sfs")
    r = run(env, "solve", job, f"s3://{bucket}/parts/day-2.sfs", f"s3://{bucket}/parts/day-2.sfs", "--maps", maps,
            "-o", f"s3://{bucket}/models/twice.sfm")
    assert r.returncode == 2 and "counted twice" in r.stderr, r.stderr
    assert _get(s3, bucket, "parts/day-2.sfs") == before


def _guide_script(name):
    """The shell block of the batch-jobs guide whose second line names `name`."""
    text = (REPO / "docs" / "src" / "guide" / "batch-jobs.md").read_text()
    for block in text.split("```sh\n")[1:]:
        body = block.split("```", 1)[0]
        lines = body.splitlines()
        if len(lines) > 1 and lines[1].startswith(f"# {name}: "):
            return body
    raise AssertionError(f"no script {name} in the batch-jobs guide")


def test_the_guides_nightly_script_runs_two_nights_over_the_store(env, s3, bucket, tmp_path):
    """The guide's cron script (the CronJob runs it too), as printed, over the local S3
    server: two nights, each reading only its own day; the second night's model is the
    local model of both days."""
    script = tmp_path / "nightly.sh"
    script.write_text(_guide_script("nightly.sh"))
    files = _digits_parts(tmp_path, parts=2)
    days = ["2026-12-05", "2026-12-06"]
    for day, f in zip(days, files):
        s3.upload_file(str(f), bucket, f"events/date={day}/{f.name}")
    job = tmp_path / "job.toml"
    job.write_text(LANDMARKS.format(train=f"s3://{bucket}/events/date={days[0]}/*.parquet"))
    ok(env, "fit-maps", job, "-o", f"s3://{bucket}/maps/2026-12.maps", "-q")
    night_env = dict(env, LAKE=f"s3://{bucket}", PATH=os.path.dirname(_bin()) + os.pathsep + env.get("PATH", ""))
    for day in days:
        r = subprocess.run(["sh", str(script)], cwd=tmp_path, env=dict(night_env, DAY=day),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    local_maps = tmp_path / "m.maps"
    local_maps.write_bytes(_get(s3, bucket, "maps/2026-12.maps"))
    for i, f in enumerate(files):
        ok(env, "accumulate", job, "--maps", local_maps, "-i", f, "-o", tmp_path / f"day-{i}.sfs", "-q")
    ok(env, "solve", job, tmp_path / "day-0.sfs", tmp_path / "day-1.sfs", "--maps", local_maps,
       "-o", tmp_path / "both.sfm", "-q")
    assert _arrays(_get(s3, bucket, f"models/{days[1]}.sfm")) == _arrays((tmp_path / "both.sfm").read_bytes())
    # The first night's model holds its day alone.
    assert _header(_get(s3, bucket, f"models/{days[0]}.sfm"))["rows"] == len(pq.read_table(files[0]))
