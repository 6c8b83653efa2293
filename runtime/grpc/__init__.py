"""KServe V2 over gRPC (``inference.GRPCInferenceService``), off unless ``grpc.port`` is set.

Imported only by the composition root, and only when gRPC is on: a daemon without
``grpc.port`` never imports grpc. The ``*_pb2*`` modules are generated (see the protos
beside them); `server.GrpcListener` owns the listener, `servicer` answers the RPCs and
`convert` maps protobuf tensors to the V2 codec's form.
"""
