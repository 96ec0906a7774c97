"""Remote sessions: a graph run step by step on a weft cluster, as TensorFlow's v1 Session.

    with weft.Session(client, graph=g) as sess:
        sess.run(train_op, feed_dict={x: batch})
        print(sess.run(w))

The first ``run`` sends the graph to the master (CreateSession); nodes added
to the graph later are sent before the next run (ExtendSession). Variables
live on the tasks for the session's life, except those in a ``container``
(``weft.ops.variable(..., container="name")``), which outlive it and are
shared by every session of the same user that names them, until
``weft.reset(client, containers=[...])`` clears them.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

import grpc
import numpy as np

from weft import errors, tensors
from weft._pb import master_service_pb2 as ms
from weft.client import Client
from weft.graph import Graph, Tensor, get_default_graph

Fetch = Union[Tensor, str]


def _client(target) -> Client:
    if isinstance(target, Client):
        return target
    if target is None or isinstance(target, str):
        if isinstance(target, str) and target.startswith("grpc://"):
            target = target[len("grpc://"):]
        return Client(target)
    raise TypeError(f"target must be a weft.Client or 'host:port', not {type(target).__name__}")


class Session:
    """A session on the cluster of ``target`` (a Client, or the master's "grpc://host:port")."""

    def __init__(self, target: Union[Client, str, None] = None, graph: Optional[Graph] = None) -> None:
        if graph is not None and not isinstance(graph, Graph):
            raise TypeError(f"graph must be a weft.Graph, not {type(graph).__name__}")
        self.client = _client(target)
        self.graph = graph or get_default_graph()
        self.handle: Optional[str] = None
        self._sent = 0  # nodes of self.graph the master has
        self._closed = False

    def _rpc(self, what: str, method, request):
        try:
            return method(request, timeout=self.client.timeout)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, what, self.client.master) from None

    def _sync_graph(self) -> None:
        if self._closed:
            raise RuntimeError("the session is closed")
        n = len(self.graph)
        if self.handle is None:
            r = self._rpc("CreateSession", self.client.stub.CreateSession,
                          ms.CreateSessionRequest(graph_def=self.graph.as_graph_def()))
            self.handle, self._sent = r.session_handle, n
        elif n > self._sent:
            self._rpc("ExtendSession", self.client.stub.ExtendSession,
                      ms.ExtendSessionRequest(session_handle=self.handle, graph_def=self.graph.as_graph_def(self._sent)))
            self._sent = n

    def _name(self, t: Fetch, what: str) -> str:
        if isinstance(t, Tensor):
            if t.graph is not self.graph:
                raise ValueError(f"{what}: {t.name} is not in this session's graph")
            return t.name
        if isinstance(t, str) and t:
            return t
        raise TypeError(f"{what}: expected a weft.Tensor or a tensor name, not {type(t).__name__}")

    def run(self, fetches: Union[Fetch, Sequence[Fetch], None] = None,
            feed_dict: Optional[Dict[Fetch, Any]] = None, targets: Sequence[Fetch] = ()) -> Any:
        """Runs one step: computes ``fetches`` (a tensor, or a list) with ``feed_dict``'s values.

        Returns a NumPy array per fetch, in the structure given. ``targets``:
        nodes run for their effect only.
        """
        single = isinstance(fetches, (Tensor, str))
        fetch_list: List[Fetch] = [] if fetches is None else [fetches] if single else list(fetches)
        request = ms.RunStepRequest()
        request.fetch.extend(self._name(f, "fetches") for f in fetch_list)
        request.target.extend(self._name(t, "targets").split(":")[0] for t in targets)
        for key, value in (feed_dict or {}).items():
            feed = request.feed.add(name=self._name(key, "feed_dict"))
            try:
                tensors.to_proto(value, out=feed.tensor)
            except (TypeError, ValueError) as e:
                raise type(e)(f"feed_dict[{feed.name!r}]: {e}") from None
        self._sync_graph()
        request.session_handle = self.handle
        r = self._rpc("RunStep", self.client.stub.RunStep, request)
        values = [tensors.to_numpy(t.tensor) for t in r.tensor]
        if fetches is None:
            return None
        return values[0] if single else values

    def close(self) -> None:
        """Closes the session on the master (its variables go, its containers stay)."""
        if self._closed:
            return
        self._closed = True
        if self.handle is not None:
            self._rpc("CloseSession", self.client.stub.CloseSession,
                      ms.CloseSessionRequest(session_handle=self.handle))

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def reset(target: Union[Client, str, None] = None, containers: Optional[Sequence[str]] = None) -> None:
    """Clears the caller's named ``containers`` on every task of the cluster.

    Without containers (an admin only): closes every session and clears
    every container, as TensorFlow's ``Session.reset``.
    """
    client = _client(target)
    names = list(containers or [])
    for c in names:
        if not isinstance(c, str) or not c:
            raise ValueError(f"containers: {c!r} is not a container name")
    try:
        client.stub.Reset(ms.ResetRequest(container=names), timeout=client.timeout)
    except grpc.RpcError as e:
        raise errors.from_rpc_error(e, "Reset", client.master) from None
