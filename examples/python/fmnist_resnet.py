"""Fashion-MNIST with a small residual network, built with the functional API.

    PYTHONPATH=python python3 examples/python/fmnist_resnet.py --epochs=12

The network of examples/fmnist_resnet.pbtxt: a batch-normalised stem and a
max-pool (14x14, 32 channels), a residual block, a strided residual block
with a 1x1 projection shortcut (7x7, 64 channels), global average pooling
and a dense classifier. Layers are called on the tensors they read, and
``weft.keras.Model(inputs, outputs)`` turns the graph into weft's ModelSpec
(each layer names the layers it reads). Trains on the cluster of
WEFT_MASTER (with WEFT_CA, WEFT_CERT, WEFT_KEY), or on a local cluster it
starts (--local) from the `weft` binary.
"""
import argparse
import sys

import weft
from weft.keras import layers

from fmnist_mlp import STRATEGIES, load_idx


def conv_bn(x, filters, kernel_size, name, bn_name, strides=1, activation=None):
    """A convolution without bias and the batch norm that offsets it (its beta is the bias)."""
    x = layers.Conv2D(filters, kernel_size, strides=strides, padding="same", use_bias=False, name=name)(x)
    return layers.BatchNormalization(activation=activation, name=bn_name)(x)


def resnet():
    inp = weft.keras.Input(shape=(28, 28, 1))
    x = conv_bn(inp, 32, 3, "stem", "stem_bn", activation="relu")
    pool = layers.MaxPooling2D(2, name="pool")(x)
    # Block 1: 14x14x32, identity shortcut.
    x = conv_bn(pool, 32, 3, "b1_conv1", "b1_bn1", activation="relu")
    x = conv_bn(x, 32, 3, "b1_conv2", "b1_bn2")
    b1 = layers.Add(activation="relu", name="b1")([pool, x])
    # Block 2: 7x7x64, strided, projection shortcut.
    x = conv_bn(b1, 64, 3, "b2_conv1", "b2_bn1", strides=2, activation="relu")
    x = conv_bn(x, 64, 3, "b2_conv2", "b2_bn2")
    shortcut = conv_bn(b1, 64, 1, "b2_proj", "b2_proj_bn", strides=2)
    x = layers.Add(activation="relu", name="b2")([shortcut, x])
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    outputs = layers.Dense(10, activation="softmax", name="logits")(x)
    return weft.keras.Model(inputs=inp, outputs=outputs, name="fmnist-resnet")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategy", choices=sorted(STRATEGIES), default="one_device")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--train_limit", type=int, default=0, help="use only the first N training examples")
    p.add_argument("--test_limit", type=int, default=0, help="use only the first N test examples")
    p.add_argument("--local", action="store_true", help="start a local cluster (2 workers, 1 ps)")
    args = p.parse_args(argv)

    x = load_idx("train-images-idx3-ubyte.gz")[..., None]
    y = load_idx("train-labels-idx1-ubyte.gz")
    x_test = load_idx("t10k-images-idx3-ubyte.gz")[..., None]
    y_test = load_idx("t10k-labels-idx1-ubyte.gz")
    if args.train_limit:
        x, y = x[:args.train_limit], y[:args.train_limit]
    if args.test_limit:
        x_test, y_test = x_test[:args.test_limit], y_test[:args.test_limit]

    cluster = weft.LocalCluster(workers=2, ps=1) if args.local else None
    try:
        client = cluster.client() if cluster else weft.Client()
        strategy = STRATEGIES[args.strategy]()(client=client)
        with strategy.scope():
            model = resnet()
            # examples/fmnist_resnet.pbtxt's optimizer: AdamW, a one-epoch warm-up, then a cosine.
            steps = args.epochs * (len(x) // 64)
            warmup = max(1, min(len(x) // 64, steps // 4))
            schedule = weft.keras.optimizers.schedules.CosineDecay(
                0.0, max(1, steps - warmup), alpha=0.01, warmup_target=0.002, warmup_steps=warmup)
            model.compile(optimizer=weft.keras.optimizers.AdamW(schedule, weight_decay=0.05), metrics=["accuracy"])
        model.summary()
        history = model.fit(x / 255.0, y, epochs=args.epochs, batch_size=64,
                            validation_data=(x_test / 255.0, y_test))
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
