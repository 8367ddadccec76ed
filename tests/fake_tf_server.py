"""For stand-in tasks (no TensorFlow) that play a ps: answer the launcher's readiness and
liveness probe as a TensorFlow server does (``/tensorflow.WorkerService/GetStatus`` on the
task's TF_CONFIG port, every interface)."""

from __future__ import annotations

import json
import os
from typing import Callable


def serve_get_status(config: dict | None = None, on_call: Callable[[], None] | None = None):
    """Start a gRPC server answering GetStatus on this task's port; return it (keep it).
    ``on_call()`` runs before each answer (a stand-in that says it was asked)."""
    from concurrent import futures

    import grpc

    config = config or json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    port = int(config["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
    def get_status(request, context) -> bytes:
        if on_call is not None:
            on_call()
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler("tensorflow.WorkerService", {
        "GetStatus": grpc.unary_unary_rpc_method_handler(get_status)})
    server.add_generic_rpc_handlers((handler,))
    if server.add_insecure_port(f"[::]:{port}") == 0:
        raise OSError(f"bind: Address already in use (port {port})")
    server.start()
    return server
