"""Triton's CUDA shared-memory extension, answered as a CPU-only Triton answers it.

wasmgate has no GPU memory to map, yet Triton's own system shared-memory example clients
clear CUDA regions first (``unregister_cuda_shared_memory()``) and stop at a 404 or
UNIMPLEMENTED. A CPU-only Triton answers the status with no region, an unregister with
success (there is nothing to remove) and a register with an invalid-argument error; the
HTTP and gRPC front ends (``runtime/http/shm.py``, ``runtime/grpc/shm.py``) answer the same,
under the same rules as the system endpoints (`Regions.allow`).
"""

from __future__ import annotations

from wasmgate.runtime.errors import BadRequest


def refuse_register(name: str) -> BadRequest:
    """Triton's own error for a CUDA region on a machine without GPUs (400 / INVALID_ARGUMENT)."""
    return BadRequest(f"failed to register CUDA shared memory region: '{name}', GPUs not supported")
