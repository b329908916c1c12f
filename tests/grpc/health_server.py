#!/usr/bin/python3
"""A real gRPC server (grpcio, the C core) with the standard health service for the grpc probe
tests. The messages are encoded by hand so that only python3-grpcio is needed:
HealthCheckRequest { string service = 1; } and HealthCheckResponse { ServingStatus status = 1; }.

Usage: health_server.py [--no-health] SERVICE=STATUS...   (STATUS: a ServingStatus number, or
"slow" to answer after 3 s). Prints the port it listens on (127.0.0.1), then serves until killed.
"""
import sys
import time
from concurrent import futures

import grpc


def service_of(request: bytes) -> str:
    # Field 1, wire type 2: tag 0x0a, a length below 128 here, the UTF-8 name.
    if not request:
        return ""
    if request[0] != 0x0A:
        raise ValueError("unexpected field")
    return request[2 : 2 + request[1]].decode()


def main() -> None:
    args = sys.argv[1:]
    health = "--no-health" not in args
    statuses = dict(a.split("=", 1) for a in args if "=" in a)

    def check(request: bytes, context: grpc.ServicerContext) -> bytes:
        name = service_of(request)
        if name not in statuses:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        if statuses[name] == "slow":
            time.sleep(3)
            return bytes([0x08, 1])
        return bytes([0x08, int(statuses[name])])

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    if health:
        handler = grpc.unary_unary_rpc_method_handler(
            check, request_deserializer=None, response_serializer=None
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": handler}),)
        )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
