"""A graph built by hand and run step by step in a remote Session, as with TensorFlow's v1 API.

Linear regression y = x w + b fitted by gradient descent: the parameters
live on the parameter server, the gradient is computed on a worker, and
each `sess.run` is one step on the cluster.

    PYTHONPATH=python python3 examples/python/custom_graph.py [--local]
"""
import argparse

import numpy as np

import weft
from weft import ops


def build(features: int, learning_rate: float):
    g = weft.Graph()
    with g.as_default():
        x = ops.placeholder("float32", [None, features], name="x")
        y = ops.placeholder("float32", [None, 1], name="y")
        with g.device("/job:ps/task:0"):
            w = ops.variable([features, 1], name="w")
            b = ops.variable([1], name="b")
        with g.device("/job:worker/task:0"):
            residual = ops.bias_add(ops.matmul(x, w), b) - y                     # (n, 1)
            loss = ops.reduce_mean(residual * residual, name="loss")
            scale = ops.placeholder("float32", [], name="two_over_n")            # 2 / batch size
            grad_w = ops.mul(ops.matmul(x, residual, transpose_a=True), scale)  # d loss / d w
            grad_b = ops.mul(ops.reshape(ops.reduce_sum(residual), [1]), scale)
        train = [ops.apply_gradient_descent(w, grad_w, learning_rate),
                 ops.apply_gradient_descent(b, grad_b, learning_rate)]
    return g, x, y, scale, loss, train, w, b


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--local", action="store_true", help="start a local cluster (1 worker, 1 ps)")
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    true_w, true_b = np.array([[2.0], [-3.0], [0.5]], np.float32), np.float32(1.0)
    g, x, y, scale, loss, train, w, b = build(3, 0.1)
    cluster = weft.LocalCluster(workers=1, ps=1) if args.local else None
    try:
        client = cluster.client() if cluster else weft.Client()
        with weft.Session(client, graph=g) as sess:
            for step in range(args.steps):
                xs = rng.normal(size=(64, 3)).astype(np.float32)
                ys = xs @ true_w + true_b
                value, *_ = sess.run([loss] + train, {x: xs, y: ys, scale: np.float32(2 / 64)})
                if step % 50 == 0:
                    print(f"step {step}: loss {float(value):.5f}")
            fitted_w, fitted_b = sess.run([w, b])
        print("w", fitted_w.ravel(), "b", fitted_b)
        return fitted_w, fitted_b
    finally:
        if cluster:
            cluster.stop()


if __name__ == "__main__":
    main()
