"""A minimal ONNX graph builder: named values, constants as initializers, one op per call.

The exporter writes the streaming graph op by op (rather than tracing torch) so the
graph is small, real-valued, dynamic in batch and T, and built in milliseconds.
"""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DTYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
}


class Graph:
    """Collects nodes, initializers, inputs and outputs of one ONNX graph."""

    def __init__(self, opset: int, float_dtype=np.float32):
        self.opset = opset
        self.float_dtype = np.dtype(float_dtype)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._ids = itertools.count()
        self._consts: dict[tuple, str] = {}

    def fresh(self, hint: str) -> str:
        return f"{hint}_{next(self._ids)}"

    def const(self, value, name: str | None = None, dtype=None) -> str:
        """An initializer (floats default to the graph's float dtype); equal unnamed
        constants are stored once (two branches of an ``If`` emit the same weights)."""
        arr = np.asarray(value)
        if dtype is not None:
            arr = arr.astype(dtype)
        elif arr.dtype.kind == "f":
            arr = arr.astype(self.float_dtype)
        elif arr.dtype.kind in "iub":
            arr = arr.astype(np.int64)
        key = None
        if name is None:
            data = arr.tobytes()
            digest = data if arr.size <= 8 else hashlib.blake2b(data, digest_size=20).digest()
            key = (arr.dtype.str, arr.shape, digest)
            if key in self._consts:
                return self._consts[key]
        name = name or self.fresh("const")
        self.inits.append(numpy_helper.from_array(arr, name))
        if key is not None:
            self._consts[key] = name
        return name

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs):
        """Append a node; returns its output name (or a list of names when n_out > 1)."""
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def input(self, name: str, dtype, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, DTYPES[np.dtype(dtype)], shape))
        return name

    def output(self, value: str, name: str, dtype, shape) -> None:
        self.nodes.append(helper.make_node("Identity", [value], [name]))
        self.outputs.append(helper.make_tensor_value_info(name, DTYPES[np.dtype(dtype)], shape))

    # Small conveniences -------------------------------------------------------------
    def slice(self, x: str, start, end, axis: int, step: int | None = None) -> str:
        """x[start:end] along ``axis``; start/end are ints or names of int64 (1,) tensors."""
        s = start if isinstance(start, str) else self.const([start])
        e = end if isinstance(end, str) else self.const([end])
        args = [x, s, e, self.const([axis])]
        if step is not None:
            args.append(self.const([step]))
        return self.op("Slice", *args)

    def subgraph(self, name: str, inputs: list[str], body) -> onnx.GraphProto:
        """A body graph (of ``Scan``): ``body(sub, *input_names)`` emits into ``sub`` (a
        Graph sharing this one's names and constants: they are outer-scope initializers)
        and returns its output values."""
        sub = Graph(self.opset, self.float_dtype)
        sub._ids, sub.inits, sub._consts = self._ids, self.inits, self._consts
        ins = [self.fresh(n) for n in inputs]
        outs = body(sub, *ins)
        names = [self.fresh(f"{name}_out") for _ in outs]
        sub.nodes += [
            helper.make_node("Identity", [v], [o]) for v, o in zip(outs, names, strict=True)
        ]

        def info(n: str) -> onnx.ValueInfoProto:
            return helper.make_tensor_value_info(n, DTYPES[self.float_dtype], None)

        return helper.make_graph(sub.nodes, name, [info(n) for n in ins], [info(n) for n in names])

    def dim(self, x: str, axis: int) -> str:
        """The size of ``x`` along ``axis`` as an int64 (1,) tensor."""
        return self.op("Shape", x, start=axis, end=axis + 1)

    def model(self, name: str, producer_version: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, self.inputs, self.outputs, self.inits)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", self.opset)]
            + [helper.make_opsetid(d, 1) for d in sorted({n.domain for n in self.nodes} - {""})],
            producer_name="liquid-stream",
            producer_version=producer_version,
        )
        model.ir_version = min(model.ir_version, 9)
        return model
