"""weft's protocol modules (generated from proto/ by weft._codegen)."""
from weft import _codegen

_codegen.ensure_generated()

from weft._generated.proto import checkpoint_pb2  # noqa: E402
from weft._generated.proto import cluster_pb2  # noqa: E402
from weft._generated.proto import graph_pb2  # noqa: E402
from weft._generated.proto import job_pb2  # noqa: E402
from weft._generated.proto import master_service_pb2  # noqa: E402
from weft._generated.proto import master_service_pb2_grpc  # noqa: E402
from weft._generated.proto import tensor_pb2  # noqa: E402
from weft._generated.proto import worker_service_pb2  # noqa: E402

__all__ = ["checkpoint_pb2", "cluster_pb2", "graph_pb2", "job_pb2", "master_service_pb2",
           "master_service_pb2_grpc", "tensor_pb2", "worker_service_pb2"]
