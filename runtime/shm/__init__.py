"""System shared memory (Triton's extension), below the transports: the regions local
clients register (`registry`), each one mapped once (`region`), and one request's inputs and
outputs in them (`attach`). HTTP and gRPC serve it; docs/shared-memory.md is the user's
account, trust model included."""
