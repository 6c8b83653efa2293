"""The state behind one instance's wasi-nn calls: graph and execution-context handles and
the host memory their tensors hold.

Invariants (see `wasi_nn` for the ABI's): handles are per instance, counted from 0, and a
handle this instance did not hand out is ``invalid_argument``; at most ``max_handles``
graphs and ``max_contexts`` contexts; every tensor copied to the host is charged to
``host_budget`` before the copy, and released when its context lets go of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from wasmgate.sandbox.models import ModelHandle, ModelProvider
from wasmgate.sandbox.wasi_nn_abi import NnErrno, NnError

_E = NnErrno


@dataclass
class _ExecContext:
    graph: ModelHandle
    inputs: dict[int, npt.NDArray[Any]] = field(default_factory=dict)
    outputs: list[npt.NDArray[Any]] | None = None


class NnHandles:
    """Handle tables and the host-memory account of one guest instance (``NnSession``'s
    state; the wasi-nn calls themselves are its methods)."""

    def __init__(
        self,
        provider: ModelProvider,
        log: Callable[[str], None],
        max_handles: int = 256,
        max_contexts: int = 16,
    ) -> None:
        """Start with no handles; at most ``max_handles`` graphs, ``max_contexts`` contexts."""
        self.provider = provider
        self.log = log
        self.infer_s = 0.0
        self.calls: dict[str, int] = {}
        self.deadline: float | None = None
        self.host_budget: int | None = None
        """Bytes of tensors all contexts may hold on the host (None: unbounded)."""
        self.host_bytes = 0
        self._max = max_handles
        self._max_contexts = max_contexts
        self._graphs: dict[int, ModelHandle] = {}
        self._by_name: dict[str, int] = {}
        self._contexts: dict[int, _ExecContext] = {}
        self._next_graph = 0
        self._next_ctx = 0
        self._stepped: set[int] = set()
        """Contexts whose one single-step ran (``compute_single`` answers end of sequence)."""

    def _charge(self, nbytes: int, what: str) -> None:
        held = self.host_bytes + nbytes
        if self.host_budget is not None and held > self.host_budget:
            raise NnError(
                _E.TOO_LARGE,
                f"{what} of {nbytes} bytes would make host tensors {held} bytes, above the "
                f"request's memory budget of {self.host_budget} bytes",
            )
        self.host_bytes = held

    def _release(self, arrays: list[npt.NDArray[Any]] | None) -> None:
        self.host_bytes -= sum(a.nbytes for a in arrays or [])

    def _open_context(self, model: ModelHandle) -> int:
        if len(self._contexts) >= self._max_contexts:
            raise NnError(_E.TOO_LARGE, f"more than {self._max_contexts} execution contexts")
        ctx = self._next_ctx
        self._contexts[ctx] = _ExecContext(model)
        self._next_ctx += 1
        return ctx

    def _provide(self, get: Callable[[], ModelHandle | None]) -> ModelHandle | None:
        try:
            return get()
        except Exception as e:
            raise NnError(_E.RUNTIME_ERROR, f"model load failed: {e}") from e

    def _add_graph(self, handle: ModelHandle) -> int:
        if len(self._graphs) >= self._max:
            raise NnError(_E.TOO_LARGE, f"more than {self._max} graphs")
        graph = self._next_graph
        self._graphs[graph] = handle
        self._next_graph += 1
        return graph

    def _graph(self, graph: int) -> ModelHandle:
        if graph not in self._graphs:
            raise NnError(_E.INVALID_ARGUMENT, f"no graph with handle {graph & 0xFFFF_FFFF}")
        return self._graphs[graph]

    def _ctx(self, ctx: int) -> _ExecContext:
        if ctx not in self._contexts:
            raise NnError(_E.INVALID_ARGUMENT, f"no execution context {ctx & 0xFFFF_FFFF}")
        return self._contexts[ctx]
