"""weft's Python client: job control, Keras-style models and remote sessions.

    import weft
    client = weft.Client()                       # WEFT_MASTER, WEFT_CA, ...
    strategy = weft.distribute.MultiWorkerMirroredStrategy(client=client)
    with strategy.scope():
        model = weft.keras.Sequential([weft.keras.layers.Dense(10, input_shape=(784,))])
        model.compile(optimizer="adam",
                      loss=weft.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    model.fit(x, y, epochs=10, batch_size=64)

    g = weft.Graph()
    with g.as_default(), g.device("/job:ps/task:0"):
        v = weft.ops.variable([2], name="v", container="shared")
    with weft.Session(client, graph=g) as sess:
        sess.run(v)
"""
from weft import data, distribute, errors, keras  # noqa: F401
from weft.client import Client
from weft.errors import WeftError
from weft.graph import Graph, Tensor, get_default_graph
from weft import ops  # noqa: F401
from weft.session import Session, reset
from weft.job import JobStatus
from weft.local import LocalCluster

__version__ = "0.1.0"
__all__ = ["Client", "Graph", "JobStatus", "LocalCluster", "Session", "Tensor", "WeftError", "data", "distribute",
           "errors", "get_default_graph", "keras", "ops", "reset"]
