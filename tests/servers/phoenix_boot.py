"""Start Arize Phoenix (run by its own venv's python) with its gRPC server bound to PHOENIX_HOST.

Phoenix 20.26 binds its OTLP gRPC receiver to ``[::]`` whatever PHOENIX_HOST says
(phoenix/server/grpc_server.py: ``add_insecure_port(f"[::]:{port}")``) and has no
setting to change it, so the test launcher rewrites the address grpc is asked to bind
before Phoenix starts. Nothing else of Phoenix is changed.
"""

import os
import sys

import grpc.aio._server as grpc_server

_HOST = os.environ.get("PHOENIX_HOST", "127.0.0.1")
_insecure, _secure = grpc_server.Server.add_insecure_port, grpc_server.Server.add_secure_port


def _local(address: str) -> str:
    return address.replace("[::]", _HOST, 1) if address.startswith("[::]:") else address


def add_insecure_port(self, address):  # type: ignore[no-untyped-def]
    return _insecure(self, _local(address))


def add_secure_port(self, address, server_credentials):  # type: ignore[no-untyped-def]
    return _secure(self, _local(address), server_credentials)


grpc_server.Server.add_insecure_port = add_insecure_port  # type: ignore[method-assign]
grpc_server.Server.add_secure_port = add_secure_port  # type: ignore[method-assign]

if __name__ == "__main__":
    from phoenix.server.main import main

    sys.argv = ["phoenix", "serve"]
    main()
