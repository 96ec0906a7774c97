"""Two sessions on one cluster sharing a variable.

Session A assigns a variable kept in a container on the parameter server;
session B, a separate session (another process could hold it), reads the
value A wrote. Variables outside a container are each session's own, as
before. `weft.reset(client, containers=[...])` clears the container.

    PYTHONPATH=python python3 examples/python/shared_variable.py [--local]
"""
import argparse

import numpy as np

import weft
from weft import ops


def graph():
    g = weft.Graph()
    with g.as_default(), g.device("/job:ps/task:0"):
        counter = ops.variable([3], name="counter", container="demo")
        value = ops.placeholder("float32", [3], name="value")
        assign = ops.assign(counter, value)
    return g, counter, value, assign


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--local", action="store_true", help="start a local cluster (1 worker, 1 ps)")
    args = p.parse_args(argv)
    cluster = weft.LocalCluster(workers=1, ps=1) if args.local else None
    try:
        client = cluster.client() if cluster else weft.Client()
        weft.reset(client, containers=["demo"])  # start from the initial value
        g_a, counter_a, value_a, assign_a = graph()
        g_b, counter_b, _, _ = graph()
        with weft.Session(client, graph=g_a) as a, weft.Session(client, graph=g_b) as b:
            print("B reads before A writes:", b.run(counter_b))
            a.run(assign_a, {value_a: np.array([1.0, 2.0, 3.0], np.float32)})
            seen = b.run(counter_b)
            print("B reads after A writes: ", seen)
        weft.reset(client, containers=["demo"])
        with weft.Session(client, graph=graph()[0]) as c:
            print("after reset:            ", c.run("counter"))
        return seen
    finally:
        if cluster:
            cluster.stop()


if __name__ == "__main__":
    main()
