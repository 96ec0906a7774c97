"""The Python client (python/weft) against a real cluster, as a user would drive it.

One `weft local` cluster (a master, two workers, a parameter server, each a
process on 127.0.0.1, mTLS with the certificates it makes) serves the whole
module. The tests train through `compile`/`fit` under every strategy, check
that `fit` reaches what the same job file reaches, train a functional
residual model (batch norm, add, global pooling) and a layer-normalised
MLP and check their predictions against NumPy, cancel a `fit`, feed bad
arguments, talk to a dead master, run a hand-built graph in a remote
Session, share a variable between two sessions, run the examples, and
install the package offline with pip.
Every wait has a deadline; nothing is timed.
"""
import gzip
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import weft
from weft import errors, ops
from weft.keras import layers

DATA = "/usr/share/datasets/fashion-mnist"
TREE = Path(os.environ.get("WEFT_SOURCE_TREE", Path(__file__).resolve().parent.parent))


def load_idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        data = f.read()
    dims = np.frombuffer(data, ">u4", count=data[3], offset=4)
    return np.frombuffer(data, np.uint8, offset=4 + 4 * data[3]).reshape(dims)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not os.path.isdir(DATA):
        pytest.fail(f"{DATA} is missing: Debian's dataset-fashion-mnist (make deps installs it)")
    c = weft.LocalCluster(workers=2, ps=1, log_dir=str(tmp_path_factory.mktemp("local")))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def client(cluster):
    with cluster.client() as c:
        yield c


@pytest.fixture(scope="module")
def fmnist():
    x = load_idx("train-images-idx3-ubyte.gz").reshape(-1, 784)
    y = load_idx("train-labels-idx1-ubyte.gz")
    x_test = load_idx("t10k-images-idx3-ubyte.gz").reshape(-1, 784)
    y_test = load_idx("t10k-labels-idx1-ubyte.gz")
    return x, y, x_test, y_test


def mlp(strategy, hidden=(256, 128), lr=0.0005):
    with strategy.scope():
        model = weft.keras.Sequential(
            [layers.Dense(hidden[0], activation="relu", input_shape=(784,))]
            + [layers.Dense(h, activation="relu") for h in hidden[1:]]
            + [layers.Dense(10, activation="softmax")], name="fmnist-mlp")
        model.compile(optimizer=weft.keras.optimizers.Adam(learning_rate=lr), metrics=["accuracy"])
    return model


# ---- training through fit -------------------------------------------------------

def test_fit_matches_the_job_file_and_reaches_088(client, fmnist, tmp_path):
    """NumPy arrays through fit against Debian's files through the example job file:
    the same model, data, seed and strategy train to the same accuracy."""
    x, y, x_test, y_test = fmnist
    model = mlp(weft.distribute.MultiWorkerMirroredStrategy(client=client), lr=0.001)
    history = model.fit(x, y, epochs=10, batch_size=128, validation_data=(x_test, y_test), verbose=0)
    assert len(history.history["loss"]) >= 1
    assert history.history["loss"][-1] < history.history["loss"][0]
    accuracy = history.history["val_accuracy"][-1]
    assert accuracy >= 0.88, history.history

    job = weft.job.as_job_spec(str(TREE / "examples" / "fmnist_mlp_multi_worker_mirrored.pbtxt"))
    assert (job.batch_size, job.epochs, job.seed) == (128, 10, 1)
    assert job.optimizer.adam.learning_rate == pytest.approx(0.001)
    job.intra_op_threads = 0  # as fit runs it: threads change only the order of float sums
    status = client.wait(client.submit(job), timeout=600)
    assert status.state == "SUCCEEDED"
    assert abs(status.test_accuracy - accuracy) <= 5e-3, (status.test_accuracy, accuracy)

    # evaluate and predict use the trained weights, on the cluster.
    loss, eval_accuracy = model.evaluate(x_test, y_test)
    assert abs(eval_accuracy - accuracy) <= 1e-3
    probabilities = model.predict(x_test[:2000])
    assert probabilities.shape == (2000, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-4)
    assert (probabilities.argmax(axis=1) == y_test[:2000]).mean() >= 0.85

    # The weights come back through the master, and save to an .npz.
    weights = model.get_weights()
    assert {k: v.shape for k, v in weights.items()} == {
        "layer0_dense/kernel": (784, 256), "layer0_dense/bias": (256,), "layer1_dense/kernel": (256, 128),
        "layer1_dense/bias": (128,), "layer2_dense/kernel": (128, 10), "layer2_dense/bias": (10,)}
    saved = np.load(model.save_weights(str(tmp_path / "weights")))
    np.testing.assert_array_equal(saved["layer2_dense/kernel"], weights["layer2_dense/kernel"])
    # A job that wrote no checkpoint has none to read.
    with pytest.raises(errors.WeftError, match="has written no checkpoint"):
        client.read_checkpoint(status.job_id)


@pytest.mark.parametrize("make", [
    lambda c: weft.distribute.OneDeviceStrategy(client=c),
    lambda c: weft.distribute.MirroredStrategy(client=c),
    lambda c: weft.distribute.ParameterServerStrategy(client=c),
    lambda c: weft.distribute.ParameterServerStrategy(sync=True, client=c),
    lambda c: weft.distribute.CentralStorageStrategy(client=c),
], ids=["one_device", "mirrored", "parameter_server_async", "parameter_server_sync", "central_storage"])
def test_every_strategy_trains_a_short_run(client, fmnist, make):
    x, y, x_test, y_test = fmnist
    model = mlp(make(client), hidden=(64,), lr=0.002)
    history = model.fit(x[:6000], y[:6000], epochs=2, batch_size=64, validation_data=(x_test[:2000], y_test[:2000]),
                        verbose=0)
    assert history.history["val_accuracy"][-1] >= 0.70, history.history
    assert model.checkpoint_path and "step-" in model.checkpoint_path


def test_fit_from_a_dataset_on_the_tasks(client):
    model = mlp(weft.distribute.MultiWorkerMirroredStrategy(client=client), hidden=(64,), lr=0.002)
    seen = []
    cb = weft.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append((epoch, logs)))
    history = model.fit(weft.data.fashion_mnist(train_limit=6000, test_limit=2000), epochs=2, batch_size=64,
                        validation_data="test", callbacks=[cb], verbose=0)
    assert seen and seen[-1][0] == 1 and "loss" in seen[-1][1]
    assert history.history["val_accuracy"][-1] >= 0.70


def stripes(n, seed):
    """8x8 images of three easy classes: horizontal stripes, vertical stripes, noise only."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = rng.integers(0, 64, (n, 8, 8))
    lines = 160 * (np.arange(8) % 2 == 0)
    x[y == 0] += lines[None, :, None]
    x[y == 1] += lines[None, None, :]
    return x.astype(np.uint8).reshape(n, 8, 8, 1), y


def residual_model():
    inp = weft.keras.Input(shape=(8, 8, 1))
    x = layers.Conv2D(8, 3, padding="same", use_bias=False)(inp)
    x = layers.BatchNormalization(momentum=0.9)(x)
    x = layers.Activation("relu")(x)
    y = layers.Conv2D(8, 3, padding="same", use_bias=False)(x)
    # Synchronised: on one replica the same statistics, through the sums' ops.
    y = layers.BatchNormalization(momentum=0.9, activation="relu", synchronized=True)(y)
    x = layers.GlobalAveragePooling2D()(layers.Add()([x, y]))
    return weft.keras.Model(inputs=inp, outputs=layers.Dense(3, activation="softmax")(x), name="residual")


def numpy_forward(w, x):
    """residual_model's forward pass in NumPy, with the moving statistics."""
    def conv(v, k):  # SAME padding, stride 1
        p = np.pad(v, ((0, 0), (1, 1), (1, 1), (0, 0)))
        return sum(p[:, i:i + v.shape[1], j:j + v.shape[2]] @ k[i, j] for i in range(3) for j in range(3))

    def bn_relu(name, v):
        v = (v - w[f"{name}/moving_mean"]) / np.sqrt(w[f"{name}/moving_variance"] + 1e-3)
        return np.maximum(v * w[f"{name}/gamma"] + w[f"{name}/beta"], 0)
    a = bn_relu("batch_normalization", conv(x, w["conv2d/kernel"]))
    b = bn_relu("batch_normalization_1", conv(a, w["conv2d_1/kernel"]))
    logits = (a + b).mean(axis=(1, 2)) @ w["dense/kernel"] + w["dense/bias"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_a_functional_residual_model_fits_evaluates_and_predicts(client):
    x, y = stripes(640, 1)
    x_test, y_test = stripes(320, 2)
    with weft.distribute.OneDeviceStrategy(client=client).scope():
        model = residual_model()
        # A warm-up and a cosine decay over the 40 steps, decoupled weight decay, clipping.
        schedule = weft.keras.optimizers.schedules.CosineDecay(0.0, 36, warmup_target=0.01, warmup_steps=4)
        model.compile(optimizer=weft.keras.optimizers.AdamW(schedule, weight_decay=1e-4, global_clipnorm=5.0),
                      metrics=["accuracy"])
    from weft._pb import job_pb2
    job = model.to_job_spec(job_pb2.DatasetSpec(), (8, 8, 1), batch_size=32, epochs=1)
    assert job.optimizer.adamw.learning_rate == pytest.approx(0.01)
    assert job.optimizer.schedule.cosine.decay_steps == 36 and job.optimizer.clip_global_norm == 5.0
    spec = job.model
    assert [(l.name, list(l.inputs)) for l in spec.layer] == [
        ("conv2d", ["input"]), ("batch_normalization", ["conv2d"]), ("activation", ["batch_normalization"]),
        ("conv2d_1", ["activation"]), ("batch_normalization_1", ["conv2d_1"]),
        ("add", ["activation", "batch_normalization_1"]), ("global_average_pooling2d", ["add"]),
        ("dense", ["global_average_pooling2d"])]
    assert spec.layer[4].batch_norm.synchronized and not spec.layer[1].batch_norm.synchronized
    model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    loss, accuracy = model.evaluate(x_test, y_test)
    assert accuracy >= 0.8, (loss, accuracy)  # chance: 1/3

    probabilities = model.predict(x_test)
    assert probabilities.shape == (320, 3)
    assert abs((probabilities.argmax(axis=1) == y_test).mean() - accuracy) <= 2 / 320
    w = model.get_weights()
    assert "conv2d/bias" not in w and w["batch_normalization_1/moving_variance"].shape == (8,)
    np.testing.assert_allclose(probabilities, numpy_forward(w, x_test / 255.0), atol=1e-4)


def test_layer_normalization_fits_and_predicts_as_numpy_normalises(client):
    x, y = stripes(640, 3)
    x_test, y_test = stripes(320, 4)
    with weft.distribute.OneDeviceStrategy(client=client).scope():
        inp = weft.keras.Input(shape=(8, 8, 1))
        h = layers.LayerNormalization(epsilon=0.01, activation="relu")(layers.Dense(16)(layers.Flatten()(inp)))
        model = weft.keras.Model(inputs=inp, outputs=layers.Dense(3, activation="softmax")(h), name="layer_norm")
        model.compile(optimizer=weft.keras.optimizers.Adam(learning_rate=0.01), metrics=["accuracy"])
    from weft._pb import job_pb2
    spec = model.to_job_spec(job_pb2.DatasetSpec(), (8, 8, 1), batch_size=32, epochs=1).model
    assert [l.WhichOneof("kind") for l in spec.layer] == ["flatten", "dense", "layer_norm", "dense"]
    assert abs(spec.layer[2].layer_norm.epsilon - 0.01) < 1e-9 and spec.layer[2].layer_norm.activation == job_pb2.RELU
    model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    loss, accuracy = model.evaluate(x_test, y_test)
    assert accuracy >= 0.8, (loss, accuracy)  # chance: 1/3
    w = model.get_weights()
    assert w["layer_normalization/gamma"].shape == (16,) and w["layer_normalization/beta"].shape == (16,)
    assert not any(k.startswith("layer_normalization/moving") for k in w)
    assert not np.allclose(w["layer_normalization/gamma"], 1)  # trained

    h = (x_test / 255.0).reshape(320, 64) @ w["dense/kernel"] + w["dense/bias"]
    h = (h - h.mean(axis=1, keepdims=True)) / np.sqrt(h.var(axis=1, keepdims=True) + 0.01)
    h = np.maximum(h * w["layer_normalization/gamma"] + w["layer_normalization/beta"], 0)
    logits = h @ w["dense_1/kernel"] + w["dense_1/bias"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(model.predict(x_test), e / e.sum(axis=1, keepdims=True), atol=1e-4)


def _numpy_recurrent(kind, w, steps, units):
    """The last step's h of an LSTM or GRU (Keras's gate orders and biases) in NumPy."""
    def sig(z):
        return 1 / (1 + np.exp(-z))
    k, rk, b = w[f"{kind}/kernel"], w[f"{kind}/recurrent_kernel"], w[f"{kind}/bias"]
    h = np.zeros((steps.shape[0], units))
    c = np.zeros_like(h)
    u = units
    for t in range(steps.shape[1]):
        if kind == "lstm":
            z = steps[:, t] @ k + h @ rk + b
            i, f, g, o = sig(z[:, :u]), sig(z[:, u:2 * u]), np.tanh(z[:, 2 * u:3 * u]), sig(z[:, 3 * u:])
            c = f * c + i * g
            h = o * np.tanh(c)
        else:
            xi, hi = steps[:, t] @ k + b[0], h @ rk + b[1]
            z, r = sig(xi[:, :u] + hi[:, :u]), sig(xi[:, u:2 * u] + hi[:, u:2 * u])
            h = z * h + (1 - z) * np.tanh(xi[:, 2 * u:] + r * hi[:, 2 * u:])
    return h


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_a_recurrent_layer_reads_image_rows_as_steps_and_predicts_as_numpy_recurs(client, kind):
    # Stripes across the rows or down the columns: a recurrent layer over the
    # 8 rows must carry what it saw in earlier rows to tell them apart.
    x, y = stripes(640, 5)
    x_test, y_test = stripes(320, 6)
    with weft.distribute.OneDeviceStrategy(client=client).scope():
        inp = weft.keras.Input(shape=(8, 8, 1))
        h = (layers.LSTM if kind == "lstm" else layers.GRU)(16)(layers.Reshape((8, 8))(inp))
        model = weft.keras.Model(inputs=inp, outputs=layers.Dense(3, activation="softmax")(h), name=kind)
        model.compile(optimizer=weft.keras.optimizers.Adam(learning_rate=0.02), metrics=["accuracy"])
    from weft._pb import job_pb2
    spec = model.to_job_spec(job_pb2.DatasetSpec(), (8, 8, 1), batch_size=32, epochs=1).model
    assert [l.WhichOneof("kind") for l in spec.layer] == ["reshape", kind, "dense"]
    assert getattr(spec.layer[1], kind).units == 16 and not getattr(spec.layer[1], kind).return_sequences
    model.fit(x, y, epochs=3, batch_size=32, verbose=0)
    loss, accuracy = model.evaluate(x_test, y_test)
    assert accuracy >= 0.8, (loss, accuracy)  # chance: 1/3
    w = model.get_weights()
    gates = 4 if kind == "lstm" else 3
    assert w[f"{kind}/kernel"].shape == (8, 16 * gates) and w[f"{kind}/recurrent_kernel"].shape == (16, 16 * gates)
    assert w[f"{kind}/bias"].shape == ((64,) if kind == "lstm" else (2, 48))
    logits = _numpy_recurrent(kind, w, (x_test / 255.0).reshape(320, 8, 8), 16) @ w["dense/kernel"] + w["dense/bias"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(model.predict(x_test), e / e.sum(axis=1, keepdims=True), atol=1e-4)


def test_binary_crossentropy_fits_one_sigmoid_and_predicts_class_1s_probability(client):
    # Class 1: the first four bytes outweigh the last four.
    def data(n, seed):
        x = np.random.default_rng(seed).integers(0, 256, (n, 8), dtype=np.uint8)
        return x, (x[:, :4].astype(int).sum(1) > x[:, 4:].astype(int).sum(1)).astype(np.int64)
    x, y = data(2048, 3)
    x_test, y_test = data(512, 4)
    with pytest.raises(ValueError, match="one logit"):
        _binary_model(2)
    with weft.distribute.OneDeviceStrategy(client=client).scope():
        model = _binary_model(1)
    from weft._pb import job_pb2
    spec = model.to_job_spec(job_pb2.DatasetSpec(), (8,), batch_size=32, epochs=1).model
    assert spec.loss == job_pb2.BINARY_CROSS_ENTROPY and spec.num_classes == 2
    assert spec.layer[-1].dense.activation == job_pb2.ACTIVATION_NONE  # the sigmoid is the loss's
    model.fit(x, y, epochs=6, batch_size=32, verbose=0)
    loss, accuracy = model.evaluate(x_test, y_test)
    assert accuracy >= 0.9, (loss, accuracy)  # chance: about 1/2
    p = model.predict(x_test)
    assert p.shape == (512, 1) and np.all((p >= 0) & (p <= 1))
    assert np.mean((p[:, 0] > 0.5) == y_test) == pytest.approx(accuracy, abs=1e-6)
    q = p[:, 0].astype(np.float64)
    bce = np.mean(np.where(y_test == 1, -np.log(q), -np.log1p(-q)))
    assert bce == pytest.approx(loss, rel=1e-3)


def _binary_model(units):
    model = weft.keras.Sequential([layers.Dense(16, activation="relu", input_shape=(8,)),
                                   layers.Dense(units, activation="sigmoid")], name="binary")
    model.compile(optimizer=weft.keras.optimizers.Adam(learning_rate=0.01), loss="binary_crossentropy",
                  metrics=["accuracy"])
    if units != 1:
        from weft._pb import job_pb2
        model.to_job_spec(job_pb2.DatasetSpec(), (8,), batch_size=8, epochs=1)
    return model


def test_a_series_spec_names_its_columns_and_refuses_bad_arguments():
    spec = weft.data.series("/data/w.csv", "t", 30, inputs=["a", "t"], horizon=2).to_proto()
    assert (spec.dir, list(spec.train_files), spec.series.column) == ("/data", ["w.csv"], "t")
    assert list(spec.series.inputs) == ["a", "t"] and spec.series.window == 30 and spec.series.horizon == 2
    for kw, words in (({"path": "w.csv"}, "absolute path"), ({"window": 0}, "window"), ({"inputs": "a"}, "inputs"),
                      ({"test_fraction": 1}, "test_fraction")):
        args = {"path": "/data/w.csv", "column": "t", "window": 3, **kw}
        with pytest.raises(ValueError, match=words):
            weft.data.series(**args)


WEATHER = "/usr/lib/python3/dist-packages/vega_datasets/_data/seattle-weather.csv"


def test_a_regression_fits_a_series_under_multi_worker_mirrored_and_predicts_its_val_loss(tmp_path):
    # examples/seattle_weather_lstm.pbtxt through the Python client: a cluster
    # of its own, whose data root holds the CSV (Debian's python3-vega-datasets).
    if not os.path.exists(WEATHER):
        pytest.fail(f"{WEATHER} is missing: Debian's python3-vega-datasets (make deps installs it)")
    with pytest.raises(ValueError, match="for classes"):
        weft.keras.Sequential([layers.Dense(1, input_shape=(3,))]).compile(loss="mse", metrics=["accuracy"])
    cluster = weft.LocalCluster(workers=2, data_root=os.path.dirname(WEATHER), log_dir=str(tmp_path / "local"))
    try:
        with cluster.client() as client:
            with weft.distribute.MultiWorkerMirroredStrategy(client=client).scope():
                model = weft.keras.Sequential([layers.LSTM(32, input_shape=(30, 1)), layers.Dense(1)], name="weather")
                model.compile(optimizer=weft.keras.optimizers.Adam(learning_rate=0.005), loss="mse")
            data = weft.data.series(WEATHER, "temp_max", 30)
            history = model.fit(data, epochs=4, batch_size=32, validation_data="test", verbose=0)
            # One entry per epoch, each with its own figures, though the
            # epochs end faster than a watcher's statuses arrive.
            val = history.history["val_loss"]
            assert history.epoch == [0, 1, 2, 3] and "val_accuracy" not in history.history, history.history
            assert len(set(val)) == 4 and len(set(history.history["loss"])) == 4, history.history
            # Standardised targets: an untrained model is near 1, repeating the last day 0.13.
            assert 0 < val[-1] < 0.3, val
            assert model.evaluate(data) == pytest.approx(val[-1], rel=1e-5)
            # The test windows as the SERIES dataset makes them; predict's outputs give the same loss.
            import csv
            with open(WEATHER, newline="") as f:
                v = np.array([float(r["temp_max"]) for r in csv.DictReader(f)])
            test = int(len(v) * 0.1)
            z = (v - v[:-test].mean()) / v[:-test].std()
            tz = z[-test:]
            x = np.stack([tz[i:i + 30] for i in range(test - 30)]).reshape(-1, 30, 1).astype(np.float32)
            out = model.predict(x)
            assert out.shape == (test - 30, 1)
            assert np.mean((out[:, 0] - tz[30:]) ** 2) == pytest.approx(val[-1], rel=1e-3)
    finally:
        cluster.stop()


def test_a_cancelled_fit_raises_and_the_cluster_keeps_serving(client, fmnist):
    x, y, _, _ = fmnist
    model = mlp(weft.distribute.MultiWorkerMirroredStrategy(client=client), hidden=(64,))
    cancelled = threading.Event()

    class CancelOnceRunning(weft.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch > 0 and not cancelled.is_set():
                cancelled.set()
                client.cancel(model.last_job_id)

    with pytest.raises(errors.JobCancelledError, match="cancelled"):
        model.fit(x, y, epochs=50, batch_size=64, callbacks=[CancelOnceRunning()], verbose=0)
    assert cancelled.is_set()
    assert client.status(model.last_job_id).state == "CANCELLED"
    assert len(client.devices()) >= 3
    model.fit(x[:2000], y[:2000], epochs=1, batch_size=64, verbose=0)  # and trains again


# ---- bad input --------------------------------------------------------------------

@pytest.mark.parametrize("call, exc, words", [
    (lambda: layers.Dense(-3), ValueError, "units"),
    (lambda: layers.Dense("ten"), TypeError, "units"),
    (lambda: layers.Dense(10, activation="swish"), ValueError, "activation"),
    (lambda: layers.Dropout(1.5), ValueError, "rate"),
    (lambda: layers.Conv2D(8, (3, 5)), ValueError, "kernel_size"),
    (lambda: weft.keras.optimizers.Adam(learning_rate=-1), ValueError, "learning_rate"),
    (lambda: weft.keras.optimizers.get("rmsprop"), ValueError, "optimizer"),
    (lambda: weft.keras.optimizers.SGD(clipnorm=1.0), ValueError, "global_clipnorm"),
    (lambda: weft.keras.optimizers.AdamW(weight_decay=-1), ValueError, "weight_decay"),
    (lambda: weft.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5), ValueError, "staircase"),
    (lambda: weft.keras.optimizers.schedules.CosineDecay(0.1, 10, warmup_target=1, warmup_steps=2), ValueError,
     "starts from 0"),
    (lambda: weft.keras.optimizers.schedules.CosineDecay(0.1, 0), ValueError, "decay_steps"),
    (lambda: weft.distribute.ParameterServerStrategy(replicas_to_aggregate=2), ValueError, "replicas_to_aggregate"),
    (lambda: weft.distribute.MultiWorkerMirroredStrategy(steps_per_execution=0), ValueError,
     "steps_per_execution must be 'auto' or a positive int"),
    (lambda: weft.Client("127.0.0.1:1", insecure=True, timeout=-1), ValueError, "timeout"),
    (lambda: weft.Client("no-port", insecure=True), ValueError, "master"),
    (lambda: weft.Client("127.0.0.1:1", ca=7), TypeError, "ca"),
    (lambda: layers.LSTM(0), ValueError, "LSTM: units must be positive"),
    (lambda: layers.LSTM(4, dropout=0.2), ValueError, "LSTM: dropout=0.2 is not supported"),
    (lambda: layers.GRU(4, reset_after=False), ValueError, "GRU: reset_after=False is not supported"),
], ids=["units", "units_type", "activation", "rate", "kernel_size", "learning_rate", "optimizer", "clipnorm",
        "adamw_weight_decay", "staircase", "warmup_from_zero", "decay_steps",
        "replicas_to_aggregate", "steps_per_execution", "timeout", "master", "ca_type", "lstm_units", "lstm_dropout",
        "gru_reset_after"])
def test_bad_arguments_name_the_argument(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_optimizers_write_their_schedules_into_the_job():
    sgd = weft.keras.optimizers.SGD(
        weft.keras.optimizers.schedules.ExponentialDecay(0.1, 100, 0.5, staircase=True),
        momentum=0.9, nesterov=True, weight_decay=5e-4).to_proto()
    assert sgd.momentum.learning_rate == pytest.approx(0.1) and sgd.momentum.weight_decay == pytest.approx(5e-4)
    assert sgd.schedule.step.every_steps == 100 and sgd.schedule.step.factor == pytest.approx(0.5)
    assert sgd.clip_global_norm == 0
    adamw = weft.keras.optimizers.get("adamw").to_proto()
    assert adamw.WhichOneof("kind") == "adamw" and adamw.adamw.weight_decay == pytest.approx(0.004)
    assert not adamw.HasField("schedule")


def test_gradient_accumulation_updates_every_k_batches_as_one_step_of_k_micro_batches():
    from weft._pb import job_pb2
    model = weft.keras.Sequential([layers.Dense(10, activation="softmax", input_shape=(784,))])
    model.compile(optimizer=weft.keras.optimizers.AdamW(1e-3, gradient_accumulation_steps=4))
    job = model.to_job_spec(job_pb2.DatasetSpec(), (784,), batch_size=32, epochs=1)
    assert job.batch_size == 128 and job.optimizer.gradient_accumulation_steps == 4
    model.compile(optimizer=weft.keras.optimizers.SGD(0.1))
    job = model.to_job_spec(job_pb2.DatasetSpec(), (784,), batch_size=32, epochs=1)
    assert job.batch_size == 32 and job.optimizer.gradient_accumulation_steps == 0
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="gradient_accumulation_steps"):
            weft.keras.optimizers.Adam(gradient_accumulation_steps=bad)


def test_mixed_precision_policy_sets_the_job_and_trains(client, fmnist):
    from weft._pb import job_pb2
    mp = weft.keras.mixed_precision
    with pytest.raises(ValueError, match="policy 'mixed_float8' is unknown"):
        mp.set_global_policy("mixed_float8")
    try:
        mp.set_global_policy("mixed_bfloat16")
        assert mp.global_policy().compute_dtype == "bfloat16" and mp.global_policy().variable_dtype == "float32"
        model = weft.keras.Sequential([layers.Dense(10, activation="softmax", input_shape=(784,))])
        model.compile(optimizer="adam")
        job = model.to_job_spec(job_pb2.DatasetSpec(), (784,), batch_size=32, epochs=1)
        assert job.mixed_precision.compute == job_pb2.MixedPrecision.BFLOAT16
        # The policy is read at compile, as Keras' layers read it when made.
        mp.set_global_policy("mixed_float16")
        assert model.to_job_spec(job_pb2.DatasetSpec(), (784,), batch_size=32,
                                 epochs=1).mixed_precision.compute == job_pb2.MixedPrecision.BFLOAT16
        x, y, x_test, y_test = fmnist
        model = mlp(weft.distribute.MultiWorkerMirroredStrategy(client=client), hidden=(64,), lr=0.002)
        assert model.to_job_spec(job_pb2.DatasetSpec(), (784,), batch_size=64,
                                 epochs=2).mixed_precision.compute == job_pb2.MixedPrecision.FLOAT16
        history = model.fit(x[:6000], y[:6000], epochs=2, batch_size=64,
                            validation_data=(x_test[:2000], y_test[:2000]), verbose=0)
        assert history.history["val_accuracy"][-1] >= 0.70, history.history
    finally:
        mp.set_global_policy("float32")
    model = weft.keras.Sequential([layers.Dense(10, activation="softmax", input_shape=(784,))])
    model.compile(optimizer="adam")
    assert not model.to_job_spec(job_pb2.DatasetSpec(), (784,), batch_size=32, epochs=1).HasField("mixed_precision")


def test_categorical_crossentropy_trains_on_one_hot_rows_and_refuses_distributions(client, fmnist):
    import numpy as np
    loss = weft.keras.losses.get("categorical_crossentropy")
    assert loss.labels(np.eye(4)[[2, 0, 3]]).tolist() == [2, 0, 3]
    with pytest.raises(ValueError, match="row 1 is not one-hot"):
        loss.labels(np.array([[0, 1, 0], [0.5, 0.5, 0]]))
    with pytest.raises(ValueError, match="one-hot rows"):
        loss.labels(np.array([1, 2]))
    with pytest.raises(ValueError, match="label_smoothing"):
        weft.keras.losses.CategoricalCrossentropy(label_smoothing=0.1)
    x, y, x_test, y_test = fmnist
    with weft.distribute.OneDeviceStrategy(client=client).scope():
        model = weft.keras.Sequential([layers.Dense(64, activation="relu", input_shape=(784,)),
                                       layers.Dense(10, activation="softmax")])
        model.compile(optimizer=weft.keras.optimizers.Adam(0.002), loss="categorical_crossentropy",
                      metrics=["accuracy"])
    one_hot = np.eye(10, dtype=np.float32)
    history = model.fit(x[:6000], one_hot[y[:6000]], epochs=2, batch_size=64,
                        validation_data=(x_test[:2000], one_hot[y_test[:2000]]), verbose=0)
    assert history.history["val_accuracy"][-1] >= 0.70, history.history


def test_functional_models_refuse_what_weft_lacks():
    inp = weft.keras.Input(shape=(8, 8, 1))
    conv = layers.Conv2D(4, 3)
    conv(inp)
    with pytest.raises(ValueError, match="Conv2D: the layer was already called.* cannot be shared"):
        conv(inp)
    with pytest.raises(ValueError, match="Add: add needs two or more inputs, got 1"):
        layers.Add()([inp])
    with pytest.raises(ValueError, match="add's inputs must have one shape"):
        layers.Add()([inp, layers.Conv2D(1, 3)(inp)])
    with pytest.raises(ValueError, match="BatchNormalization: center=False is not supported"):
        layers.BatchNormalization(center=False)
    with pytest.raises(ValueError, match="BatchNormalization: axis=1 is not supported"):
        layers.BatchNormalization(axis=1)
    with pytest.raises(TypeError, match="synchronized must be True or False"):
        layers.BatchNormalization(synchronized="yes")
    with pytest.raises(ValueError, match="LayerNormalization: axis=1 is not supported.* the last axis"):
        layers.LayerNormalization(axis=1)
    with pytest.raises(ValueError, match="LayerNormalization: axis=\\[1, 2, 3\\] is not supported"):
        layers.LayerNormalization(axis=[1, 2, 3])
    with pytest.raises(ValueError, match="LayerNormalization: center=False is not supported"):
        layers.LayerNormalization(center=False)
    with pytest.raises(ValueError, match="LayerNormalization: epsilon must be > 0"):
        layers.LayerNormalization(epsilon=0)
    with pytest.raises(TypeError, match="LayerNormalization: unknown argument 'momentum'"):
        layers.LayerNormalization(momentum=0.9)
    assert layers.LayerNormalization(axis=[-1]).to_proto().layer_norm.epsilon == pytest.approx(1e-3)
    with pytest.raises(TypeError, match="Dense: unknown argument 'kernel_regularizer'"):
        layers.Dense(3, kernel_regularizer="l2")
    with pytest.raises(ValueError, match="Dense: dense needs a flat input"):
        layers.Dense(3)(inp)
    named = [layers.Flatten(name="same") for _ in range(2)]
    with pytest.raises(ValueError, match="'same'; layer names must be unique"):
        weft.keras.Model(inputs=inp, outputs=layers.Dense(2)(named[1](named[0](inp))))
    joined = layers.Add()([inp, weft.keras.Input(shape=(8, 8, 1))])
    with pytest.raises(ValueError, match="an Input that is not the model's inputs"):
        weft.keras.Model(inputs=inp, outputs=layers.Dense(2)(layers.Flatten()(joined)))


def test_bad_fit_arguments_name_the_argument(client, fmnist):
    x, y, _, _ = fmnist
    model = mlp(weft.distribute.OneDeviceStrategy(client=client), hidden=(16,))
    with pytest.raises(TypeError, match="batch_size"):
        model.fit(x[:100], y[:100], batch_size="64")
    with pytest.raises(ValueError, match="epochs"):
        model.fit(x[:100], y[:100], epochs=0)
    with pytest.raises(ValueError, match="y has 99 labels for 100 examples"):
        model.fit(x[:100], y[:99])
    with pytest.raises(ValueError, match="x: weft's datasets hold 8-bit examples"):
        model.fit(np.full((10, 784), 0.3337, np.float32), y[:10])
    with pytest.raises(ValueError, match="validation_data"):
        model.fit(x[:100], y[:100], validation_data=(x[:10],))
    with pytest.raises(RuntimeError, match="compile"):
        weft.keras.Sequential([layers.Dense(10, input_shape=(784,))]).fit(x[:10], y[:10])
    with pytest.raises(ValueError, match="batch_size 128 is larger than the 100 training examples"):
        model.fit(x[:100], y[:100], batch_size=128, verbose=0)
    # The master's own refusals arrive as InvalidArgumentError (a ValueError) naming the layer.
    with weft.distribute.OneDeviceStrategy(client=client).scope():
        bad = weft.keras.Sequential([layers.Reshape((7,), input_shape=(784,)), layers.Dense(10, activation="softmax")])
        bad.compile()
    with pytest.raises(errors.InvalidArgumentError, match="reshape"):
        bad.fit(x[:100], y[:100], batch_size=10, verbose=0)


def test_without_credentials_the_client_refuses_plaintext(cluster):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
    code = "import weft; weft.Client('%s')" % cluster.master
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "ca: no CA certificate" in r.stderr, r.stderr


def test_a_dead_master_is_a_clear_error(cluster):
    c = weft.Client("127.0.0.1:1", ca=str(cluster.tls_dir / "ca.crt"), cert=str(cluster.tls_dir / "local.crt"),
                    key=str(cluster.tls_dir / "local.key"), timeout=5)
    with pytest.raises(errors.UnavailableError, match="the master at 127.0.0.1:1 is unavailable"):
        c.devices()


def test_unknown_job_is_not_found(client):
    with pytest.raises(errors.NotFoundError):
        client.status("job-0-0000000000000000")


# ---- graphs and sessions ----------------------------------------------------------

def test_a_custom_graph_in_a_remote_session(client):
    sys.path.insert(0, str(TREE / "examples" / "python"))
    try:
        import custom_graph
    finally:
        sys.path.pop(0)
    g, x, y, scale, loss, train, w, b = custom_graph.build(3, 0.1)
    rng = np.random.default_rng(1)
    true_w = np.array([[2.0], [-3.0], [0.5]], np.float32)
    with weft.Session(client, graph=g) as sess:
        first = None
        for _ in range(100):
            xs = rng.normal(size=(32, 3)).astype(np.float32)
            value, *_ = sess.run([loss] + train, {x: xs, y: xs @ true_w + 1.0, scale: np.float32(2 / 32)})
            first = value if first is None else first
        fitted_w, fitted_b = sess.run([w, b])
    assert value < first * 1e-3
    np.testing.assert_allclose(fitted_w, true_w, atol=1e-3)
    np.testing.assert_allclose(fitted_b, [1.0], atol=1e-3)


def test_session_errors_name_the_node(client):
    g = weft.Graph()
    with g.as_default():
        a = ops.placeholder("float32", [2, 3], name="a")
        bad = ops.matmul(a, ops.constant(np.ones((4, 1), np.float32)), name="bad_matmul")
    with weft.Session(client, graph=g) as sess:
        with pytest.raises(errors.InvalidArgumentError, match="bad_matmul"):
            sess.run(bad, {a: np.ones((2, 3), np.float32)})
    with weft.Session(client, graph=weft.Graph()) as sess:
        with pytest.raises(TypeError, match="feed_dict"):
            sess.run([], {"a": object()})


def shared_graph(container="pytest"):
    g = weft.Graph()
    with g.as_default(), g.device("/job:ps/task:0"):
        v = ops.variable([3], name="shared_v", container=container)
        value = ops.placeholder("float32", [3], name="value")
        assign = ops.assign(v, value)
    return g, v, value, assign


def test_two_sessions_share_a_variable_in_a_container(client):
    weft.reset(client, containers=["pytest"])
    g_a, v_a, value_a, assign_a = shared_graph()
    g_b, v_b, _, _ = shared_graph()
    with weft.Session(client, graph=g_a) as a, weft.Session(client, graph=g_b) as b:
        np.testing.assert_array_equal(b.run(v_b), [0, 0, 0])
        a.run(assign_a, {value_a: np.array([1, 2, 3], np.float32)})
        np.testing.assert_array_equal(b.run(v_b), [1, 2, 3])
    # The container outlives both sessions...
    g_c, v_c, _, _ = shared_graph()
    with weft.Session(client, graph=g_c) as c:
        np.testing.assert_array_equal(c.run(v_c), [1, 2, 3])
    # ...until it is reset.
    weft.reset(client, containers=["pytest"])
    with weft.Session(client, graph=shared_graph()[0]) as d:
        np.testing.assert_array_equal(d.run("shared_v"), [0, 0, 0])


def test_variables_outside_a_container_stay_per_session(client):
    def graph():
        g = weft.Graph()
        with g.as_default(), g.device("/job:ps/task:0"):
            v = ops.variable([2], name="private_v")
            p = ops.placeholder("float32", [2], name="p")
            assign = ops.assign(v, p)
        return g, v, p, assign
    g_a, v_a, p_a, assign_a = graph()
    g_b, v_b, _, _ = graph()
    with weft.Session(client, graph=g_a) as a, weft.Session(client, graph=g_b) as b:
        a.run(assign_a, {p_a: np.array([5, 6], np.float32)})
        np.testing.assert_array_equal(a.run(v_a), [5, 6])
        np.testing.assert_array_equal(b.run(v_b), [0, 0])


def user_client(cluster, name):
    """A Client with a new user certificate `name` from the cluster's CA."""
    tls = cluster.tls_dir
    if not (tls / f"{name}.crt").is_file():
        r = subprocess.run([cluster.binary, "certs", "issue", str(tls), f"--name={name}", "--role=user"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    return weft.Client(cluster.master, ca=str(tls / "ca.crt"), cert=str(tls / f"{name}.crt"),
                       key=str(tls / f"{name}.key"))


def test_containers_are_per_user(cluster):
    alice, bob = user_client(cluster, "alice"), user_client(cluster, "bob")
    weft.reset(alice, containers=["pytest"])
    weft.reset(bob, containers=["pytest"])
    g_a, v_a, value_a, assign_a = shared_graph()
    with weft.Session(alice, graph=g_a) as a:
        a.run(assign_a, {value_a: np.array([7, 7, 7], np.float32)})
    with weft.Session(bob, graph=shared_graph()[0]) as b:
        np.testing.assert_array_equal(b.run("shared_v"), [0, 0, 0])  # bob's "pytest" is another container
    weft.reset(bob, containers=["pytest"])  # clears bob's only
    with weft.Session(alice, graph=shared_graph()[0]) as a:
        np.testing.assert_array_equal(a.run("shared_v"), [7, 7, 7])
    with pytest.raises(errors.PermissionDeniedError):
        weft.reset(bob)  # every session and container: an admin's call


def test_only_the_owner_reads_a_jobs_checkpoint(cluster, fmnist):
    x, y, _, _ = fmnist
    alice, bob = user_client(cluster, "alice"), user_client(cluster, "bob")
    model = mlp(weft.distribute.OneDeviceStrategy(client=alice), hidden=(16,))
    model.fit(x[:1000], y[:1000], epochs=1, batch_size=50, verbose=0)
    job = model.last_job_id
    mine = alice.read_checkpoint(job)
    assert mine["replica_0/layer0_dense/kernel"].shape == (784, 16)  # one replica, as MIRRORED names it
    assert model.get_weights()["layer0_dense/kernel"].shape == (784, 16)
    with pytest.raises(errors.PermissionDeniedError):
        bob.read_checkpoint(job)
    with pytest.raises(ValueError, match="step"):
        alice.read_checkpoint(job, step=-1)
    with pytest.raises(errors.NotFoundError, match="no checkpoint of step 7"):
        alice.read_checkpoint(job, step=7)


def test_a_bad_container_name_is_refused(client):
    g = weft.Graph()
    with g.as_default():
        v = ops.variable([1], name="v_bad", container="../etc")
    with weft.Session(client, graph=g) as s:
        with pytest.raises(errors.InvalidArgumentError, match="v_bad"):
            s.run(v)


# ---- examples and packaging -------------------------------------------------------

@pytest.mark.parametrize("script, args, expect", [
    ("shared_variable.py", [], "B reads after A writes:  [1. 2. 3.]"),
    ("custom_graph.py", ["--steps=120"], "w [ 2."),
    ("fmnist_mlp.py", ["--strategy=parameter_server_sync", "--epochs=1", "--train_limit=4000"], "test accuracy"),
    ("fmnist_resnet.py", ["--epochs=1", "--train_limit=1000", "--test_limit=500"], "test accuracy"),
], ids=["shared_variable", "custom_graph", "fmnist_mlp", "fmnist_resnet"])
def test_examples_run(cluster, script, args, expect):
    env = dict(os.environ, **cluster.env())
    r = subprocess.run([sys.executable, str(TREE / "examples" / "python" / script)] + args, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert expect in r.stdout, r.stdout[-3000:]


def test_pip_installs_offline_and_the_package_works_installed(tmp_path, cluster):
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                        "--target", str(target), str(TREE / "python")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (target / "weft" / "_generated" / "proto" / "master_service_pb2_grpc.py").is_file()
    code = ("import weft, sys; assert weft.__file__.startswith(sys.argv[1]), weft.__file__; "
            "print(len(weft.Client().devices()))")
    env = dict(os.environ, **cluster.env(), PYTHONPATH=str(target))
    r = subprocess.run([sys.executable, "-c", code, str(target)], env=env, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) >= 3


# ---- pieces without a cluster -----------------------------------------------------

def test_generated_modules_follow_the_protos(tmp_path):
    from weft import _codegen
    root = tmp_path / "tree"
    (root / "proto").mkdir(parents=True)
    for p in (TREE / "proto").glob("*.proto"):
        (root / "proto" / p.name).write_bytes(p.read_bytes())
    out = tmp_path / "gen"
    _codegen.generate(root, out)
    assert _codegen.is_current(root, out)
    text = (out / "proto" / "master_service_pb2_grpc.py").read_text()
    assert "from weft._generated.proto import master_service_pb2" in text and "from proto import" not in text
    with open(root / "proto" / "tensor.proto", "a") as f:
        f.write("\n// changed\n")
    assert not _codegen.is_current(root, out)
    _codegen.generate(root, out)
    assert _codegen.is_current(root, out)


def test_arrays_become_idx_files_with_their_scale():
    from weft.data import ArrayData
    x = np.arange(2 * 3 * 2, dtype=np.uint8).reshape(2, 3, 2)
    d = ArrayData(x / 255.0, np.array([1, 7]))
    assert d.scale == 255.0 and d.example_shape == (3, 2)
    images = d.files["train_images"]
    assert images[:4] == bytes([0, 0, 8, 3]) and images[4:16] == bytes([0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 2])
    assert images[16:] == x.tobytes()
    assert d.files["train_labels"][-2:] == bytes([1, 7])
    assert ArrayData(x.astype(np.float32), [0, 1]).scale == 1.0  # whole numbers: scale 1
    assert d.digest() == ArrayData(x, [1, 7]).digest()            # the same bytes, the same dataset


def test_crc32c_and_a_corrupt_manifest(tmp_path):
    from weft.checkpoints import crc32c, list_checkpoints, read_manifest
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    step = tmp_path / "step-000000000010"
    step.mkdir()
    import struct
    (step / "MANIFEST").write_bytes(b"WEFTMANI" + struct.pack("<III", 1, 3, 12345) + b"abc")
    with pytest.raises(ValueError, match="checksum mismatch"):
        read_manifest(step)
    (listed,) = list_checkpoints(tmp_path)
    assert not listed.valid and "checksum" in listed.problem and listed.step == 10


def test_a_token_file_open_to_others_is_refused(tmp_path, cluster):
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    token.chmod(0o644)
    with pytest.raises(ValueError, match="open to other users: chmod 600"):
        weft.Client(cluster.master, ca=str(cluster.tls_dir / "ca.crt"), token_file=str(token))
    token.chmod(0o600)
    token.write_text("two words\n")
    with pytest.raises(ValueError, match="more than one word"):
        weft.Client(cluster.master, ca=str(cluster.tls_dir / "ca.crt"), token_file=str(token))


def test_embeddings_fit_and_predict_as_numpy_looks_them_up(client):
    """Token ids through Embedding and PositionEmbedding: the class is a function of
    the id at one position, which only the tables can learn. Integer arrays are
    ids here (the model starts with an Embedding), not pixels to divide by 255."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 20, (640, 8))
    x_test = rng.integers(0, 20, (320, 8))
    y, y_test = x[:, 2].astype(int) % 3, x_test[:, 2].astype(int) % 3
    with weft.distribute.OneDeviceStrategy(client=client).scope():
        model = weft.keras.Sequential([layers.Embedding(20, 8, input_shape=(8,)), layers.PositionEmbedding(),
                                       layers.Flatten(), layers.Dense(3, activation="softmax")], name="embeddings")
        model.compile(optimizer=weft.keras.optimizers.Adam(learning_rate=0.02), metrics=["accuracy"])
    from weft._pb import job_pb2
    spec = model.to_job_spec(job_pb2.DatasetSpec(), (8,), batch_size=32, epochs=1).model
    assert [l.WhichOneof("kind") for l in spec.layer] == ["embedding", "position_embedding", "flatten", "dense"]
    assert (spec.layer[0].embedding.input_dim, spec.layer[0].embedding.output_dim) == (20, 8)
    model.fit(x, y, epochs=4, batch_size=32, verbose=0)
    loss, accuracy = model.evaluate(x_test, y_test)
    assert accuracy >= 0.9, (loss, accuracy)  # chance: 1/3
    w = model.get_weights()
    # A Sequential's layers are named layer<i>_<kind>.
    tokens, positions = w["layer0_embedding/embeddings"], w["layer1_position_embedding/embeddings"]
    assert tokens.shape == (20, 8) and positions.shape == (8, 8)

    h = tokens[x_test.astype(int)] + positions
    logits = h.reshape(320, 64) @ w["layer3_dense/kernel"] + w["layer3_dense/bias"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(model.predict(x_test), e / e.sum(axis=1, keepdims=True), atol=1e-4)
    np.testing.assert_allclose(model.predict(x_test.astype(np.float32)), model.predict(x_test), atol=1e-6)
    bad = x_test[:2].copy()
    bad[1, 5] = 20
    with pytest.raises(errors.InvalidArgumentError, match=r"ids\[1,5\] \(flat index 13\) is 20: an id must be a "
                                                          r"whole number in \[0, 20\)"):
        model.predict(bad)
    with pytest.raises(ValueError, match="Embedding: mask_zero=True is not supported"):
        layers.Embedding(20, 8, mask_zero=True)
    with pytest.raises(ValueError, match="Embedding: input_dim must be positive, got 0"):
        layers.Embedding(0, 8)
    with pytest.raises(ValueError, match="PositionEmbedding: position_embedding needs \\(sequence, features\\)"):
        layers.PositionEmbedding()(weft.keras.Input(shape=(8,)))


def numpy_attention(w, x, prefix, heads, causal):
    """weft's multi_head_attention in NumPy: projections, softmax(q k^T / sqrt(key_dim)) v per head, output."""
    n, s, _ = x.shape

    def proj(v, p):
        return v @ w[f"{prefix}/{p}/kernel"] + w[f"{prefix}/{p}/bias"]
    q, k, v = (proj(x, p).reshape(n, s, heads, -1).transpose(0, 2, 1, 3) for p in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    o = (e / e.sum(axis=-1, keepdims=True)) @ v
    return proj(o.transpose(0, 2, 1, 3).reshape(n, s, -1), "attention_output")


def test_multi_head_attention_fits_and_predicts_as_numpy_attends(client):
    x, y = stripes(640, 5)
    x_test, y_test = stripes(320, 6)
    x, x_test = x.reshape(640, 8, 8), x_test.reshape(320, 8, 8)  # 8 rows of 8 pixels: a sequence
    with weft.distribute.OneDeviceStrategy(client=client).scope():
        inp = weft.keras.Input(shape=(8, 8))
        attended = layers.MultiHeadAttention(num_heads=2, key_dim=4)(query=inp, value=inp, use_causal_mask=True)
        h = layers.Dense(8, activation="relu")(layers.Add()([inp, attended]))  # per position
        model = weft.keras.Model(inputs=inp, outputs=layers.Dense(3, activation="softmax")(layers.Flatten()(h)),
                                 name="attention")
        model.compile(optimizer=weft.keras.optimizers.Adam(learning_rate=0.01), metrics=["accuracy"])
    from weft._pb import job_pb2
    spec = model.to_job_spec(job_pb2.DatasetSpec(), (8, 8), batch_size=32, epochs=1).model
    assert [l.WhichOneof("kind") for l in spec.layer] == ["multi_head_attention", "add", "dense", "flatten", "dense"]
    mha = spec.layer[0].multi_head_attention
    assert (mha.num_heads, mha.key_dim, mha.causal) == (2, 4, True)
    assert h.shape == (None, 8, 8)
    model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    loss, accuracy = model.evaluate(x_test, y_test)
    assert accuracy >= 0.8, (loss, accuracy)  # chance: 1/3
    w = model.get_weights()
    for p in ("query", "key", "value"):
        assert w[f"multi_head_attention/{p}/kernel"].shape == (8, 8)
        assert w[f"multi_head_attention/{p}/bias"].shape == (8,)
    assert w["multi_head_attention/attention_output/kernel"].shape == (8, 8)
    assert w["dense/kernel"].shape == (8, 8) and w["dense_1/kernel"].shape == (64, 3)

    v = x_test / 255.0
    h = v + numpy_attention(w, v, "multi_head_attention", 2, True)
    h = np.maximum(h @ w["dense/kernel"] + w["dense/bias"], 0)
    logits = h.reshape(320, 64) @ w["dense_1/kernel"] + w["dense_1/bias"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(model.predict(x_test), e / e.sum(axis=1, keepdims=True), atol=1e-4)


def test_multi_head_attention_refuses_what_weft_lacks():
    inp = weft.keras.Input(shape=(8, 16))
    other = weft.keras.Input(shape=(8, 16))
    with pytest.raises(ValueError, match="MultiHeadAttention: cross-attention is not supported"):
        layers.MultiHeadAttention(2, 8)(inp, other)
    with pytest.raises(ValueError, match="MultiHeadAttention: attention_mask is not supported"):
        layers.MultiHeadAttention(2, 8)(inp, inp, attention_mask=np.ones((8, 8)))
    with pytest.raises(ValueError, match="MultiHeadAttention: return_attention_scores=True is not supported"):
        layers.MultiHeadAttention(2, 8)(inp, return_attention_scores=True)
    with pytest.raises(ValueError, match="MultiHeadAttention: dropout=0.1 is not supported"):
        layers.MultiHeadAttention(2, 8, dropout=0.1)
    with pytest.raises(ValueError, match="MultiHeadAttention: value_dim=4 is not supported"):
        layers.MultiHeadAttention(2, 8, value_dim=4)
    with pytest.raises(TypeError, match="MultiHeadAttention: unknown argument 'heads'"):
        layers.MultiHeadAttention(2, heads=3)
    with pytest.raises(ValueError, match="MultiHeadAttention: num_heads must be positive, got 0"):
        layers.MultiHeadAttention(0)
    with pytest.raises(ValueError, match="num_heads 3 does not divide the input's 16 features; set key_dim"):
        layers.MultiHeadAttention(3)(inp)
    with pytest.raises(ValueError, match="multi_head_attention needs a sequence input"):
        layers.MultiHeadAttention(2)(weft.keras.Input(shape=(16,)))
    # Self-attention as Keras spells it; key_dim None takes 16 / 2; causal in a Sequential.
    spec = layers.MultiHeadAttention(2, name="a")(inp, inp, inp).layer.to_proto()
    assert spec.multi_head_attention.key_dim == 0 and not spec.multi_head_attention.causal
    seq = layers.MultiHeadAttention(4, 4, causal=True, input_shape=(8, 16)).to_proto().multi_head_attention
    assert (seq.num_heads, seq.key_dim, seq.causal) == (4, 4, True)
    assert layers.Dense(5)(inp).shape == (None, 8, 5)  # Dense on a sequence, per position


def _np_avg_pool(x, k, s, same):
    """Keras's average pooling on NHWC: under SAME, the mean of the in-image positions only."""
    n, h, w, c = x.shape
    ho, wo = (-(-h // s), -(-w // s)) if same else ((h - k) // s + 1, (w - k) // s + 1)
    pt = max((ho - 1) * s + k - h, 0) // 2 if same else 0
    pl = max((wo - 1) * s + k - w, 0) // 2 if same else 0
    out = np.zeros((n, ho, wo, c))
    for i in range(ho):
        for j in range(wo):
            i0, j0 = max(i * s - pt, 0), max(j * s - pl, 0)
            out[:, i, j] = x[:, i0:min(i * s - pt + k, h), j0:min(j * s - pl + k, w)].mean(axis=(1, 2))
    return out


def _np_conv_same(x, kernel, bias):
    k = kernel.shape[0]
    p = (k - 1) // 2
    xp = np.pad(x, ((0, 0), (p, k - 1 - p), (p, k - 1 - p), (0, 0)))
    h, w = x.shape[1:3]
    out = sum(np.einsum("nhwc,cf->nhwf", xp[:, a:a + h, b:b + w], kernel[a, b]) for a in range(k) for b in range(k))
    return out + bias


def test_concatenated_branches_and_average_pooling_fit_and_predict(client):
    x, y = stripes(640, 5)
    x_test, y_test = stripes(320, 6)
    with weft.distribute.OneDeviceStrategy(client=client).scope():
        inp = weft.keras.Input(shape=(8, 8, 1))
        a = layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
        b = layers.Conv2D(2, 1, activation="relu")(inp)
        c = layers.AveragePooling2D(3, strides=1, padding="same")(inp)
        cat = layers.Concatenate()([a, b, c])
        assert cat.shape == (None, 8, 8, 7)
        pooled = layers.AveragePooling2D(2)(cat)
        assert pooled.shape == (None, 4, 4, 7)
        out = layers.Dense(3, activation="softmax")(layers.Flatten()(pooled))
        model = weft.keras.Model(inputs=inp, outputs=out, name="inception")
        model.compile(optimizer=weft.keras.optimizers.Adam(learning_rate=0.01), metrics=["accuracy"])
    from weft._pb import job_pb2
    spec = model.to_job_spec(job_pb2.DatasetSpec(), (8, 8, 1), batch_size=32, epochs=1).model
    assert [(l.WhichOneof("kind"), list(l.inputs)) for l in spec.layer][:5] == [
        ("conv2d", ["input"]), ("conv2d", ["input"]), ("avg_pool", ["input"]),
        ("concatenate", ["conv2d", "conv2d_1", "average_pooling2d"]), ("avg_pool", ["concatenate"])]
    assert spec.layer[2].avg_pool.padding == "SAME" and spec.layer[2].avg_pool.stride == 1
    model.fit(x, y, epochs=3, batch_size=32, verbose=0)
    loss, accuracy = model.evaluate(x_test, y_test)
    assert accuracy >= 0.8, (loss, accuracy)  # chance: 1/3

    probabilities = model.predict(x_test)
    w = model.get_weights()
    xs = x_test / 255.0
    ha = np.maximum(_np_conv_same(xs, w["conv2d/kernel"], w["conv2d/bias"]), 0)
    hb = np.maximum(_np_conv_same(xs, w["conv2d_1/kernel"], w["conv2d_1/bias"]), 0)
    h = np.concatenate([ha, hb, _np_avg_pool(xs, 3, 1, True)], axis=-1)
    logits = _np_avg_pool(h, 2, 2, False).reshape(320, -1) @ w["dense/kernel"] + w["dense/bias"]
    want = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(probabilities, want / want.sum(axis=1, keepdims=True), atol=1e-4)

    inp = weft.keras.Input(shape=(8, 8, 1))
    with pytest.raises(ValueError, match="Concatenate\\('cat'\\): concatenate's inputs must agree"):
        layers.Concatenate(name="cat")([layers.Conv2D(2, 3)(inp), inp])
    with pytest.raises(ValueError, match="concatenate needs two or more inputs"):
        layers.Concatenate()([inp])
    with pytest.raises(ValueError, match="last axis only"):
        layers.Concatenate(axis=1)
