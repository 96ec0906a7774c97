"""Fashion-MNIST with a multilayer perceptron through compile/fit, under any strategy.

    PYTHONPATH=python python3 examples/python/fmnist_mlp.py --strategy=multi_worker_mirrored

Trains on the cluster of WEFT_MASTER (with WEFT_CA, WEFT_CERT, WEFT_KEY), or
on a local cluster it starts (--local) from the `weft` binary. The arrays
are read here with NumPy and sent to the cluster once; the job file
examples/fmnist_mlp_multi_worker_mirrored.pbtxt is the same model.
"""
import argparse
import gzip
import os
import sys

import numpy as np

import weft
from weft.keras import layers

DATA = "/usr/share/datasets/fashion-mnist"
STRATEGIES = {
    "one_device": lambda: weft.distribute.OneDeviceStrategy,
    "mirrored": lambda: weft.distribute.MirroredStrategy,
    "multi_worker_mirrored": lambda: weft.distribute.MultiWorkerMirroredStrategy,
    "parameter_server": lambda: weft.distribute.ParameterServerStrategy,
    "parameter_server_sync": lambda: lambda **kw: weft.distribute.ParameterServerStrategy(sync=True, **kw),
    "central_storage": lambda: weft.distribute.CentralStorageStrategy,
}


def load_idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        data = f.read()
    dims = np.frombuffer(data, ">u4", count=data[3], offset=4)
    return np.frombuffer(data, np.uint8, offset=4 + 4 * data[3]).reshape(dims)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategy", choices=sorted(STRATEGIES), default="multi_worker_mirrored")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--train_limit", type=int, default=0, help="use only the first N training examples")
    p.add_argument("--local", action="store_true", help="start a local cluster (2 workers, 1 ps)")
    args = p.parse_args(argv)

    x = load_idx("train-images-idx3-ubyte.gz").reshape(-1, 784)
    y = load_idx("train-labels-idx1-ubyte.gz")
    x_test = load_idx("t10k-images-idx3-ubyte.gz").reshape(-1, 784)
    y_test = load_idx("t10k-labels-idx1-ubyte.gz")
    if args.train_limit:
        x, y = x[:args.train_limit], y[:args.train_limit]

    cluster = weft.LocalCluster(workers=2, ps=1) if args.local else None
    try:
        client = cluster.client() if cluster else weft.Client()
        strategy = STRATEGIES[args.strategy]()(client=client)
        with strategy.scope():
            model = weft.keras.Sequential([
                layers.Dense(256, activation="relu", input_shape=(784,)),
                layers.Dense(128, activation="relu"),
                layers.Dense(10, activation="softmax"),
            ], name="fmnist-mlp")
            model.compile(optimizer=weft.keras.optimizers.Adam(learning_rate=0.0005), metrics=["accuracy"])
        history = model.fit(x / 255.0, y, epochs=args.epochs, batch_size=64, validation_data=(x_test / 255.0, y_test))
        loss, accuracy = model.evaluate(x_test, y_test)
        print(f"{args.strategy}: loss per epoch {[round(v, 4) for v in history.history['loss']]}")
        print(f"{args.strategy}: test accuracy {accuracy:.4f}, test loss {loss:.4f}")
        return accuracy
    finally:
        if cluster:
            cluster.stop()


if __name__ == "__main__":
    main()
    sys.exit(0)
