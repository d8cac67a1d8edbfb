"""The decoder's graph (↔ the decoder part of :meth:`StreamingModel._stack`): last step,
sliding window or running pool."""

from __future__ import annotations

import numpy as np
import onnx

from .emit_common import END


class DecoderEmitter:
    """The method of :class:`~.to_onnx._Emitter` that emits the decoder."""

    def decoder(self, logits: str) -> str:
        """↔ the decoder part of :meth:`StreamingModel._stack`: per-step decoder on
        ``logits (B, T, d)``, last / sliding window / running pool."""
        g, sm = self.g, self.sm
        if sm.decoder == "last":
            return logits
        dout, T = sm.d_output, self.dims["T"]
        x64 = g.op("Cast", logits, to=onnx.TensorProto.DOUBLE)
        one = onnx.helper.make_tensor("one", onnx.TensorProto.DOUBLE, [1], [1.0])
        ones = g.op(
            "ConstantOfShape", g.op("Concat", g.const([1]), T, g.const([1]), axis=0), value=one
        )
        count_in = self.state("decoder.count", ["batch", 1], np.float64)
        sum_in = self.state("decoder.sum", ["batch", dout], np.float64)
        count = g.op(
            "Add", g.op("Unsqueeze", count_in, g.const([1])), g.op("CumSum", ones, g.const(1))
        )
        if sm.decoder == "pool":
            delta, denom = x64, count
        else:
            # history in float32: the logits are float32, so it holds them exactly
            hist = self.state("decoder.history", ["batch", sm.window, dout], np.float32)
            ext = g.op("Concat", hist, logits, axis=1)
            leaving = g.op("Cast", g.slice(ext, 0, T, axis=1), to=onnx.TensorProto.DOUBLE)
            delta = g.op("Sub", x64, leaving)
            denom = g.op("Min", count, g.const(np.array(float(sm.window)), dtype=np.float64))
            self.set_state("decoder.history", g.slice(ext, -sm.window, END, axis=1))
        total = g.op(
            "Add", g.op("Unsqueeze", sum_in, g.const([1])), g.op("CumSum", delta, g.const(1))
        )
        self.set_state(
            "decoder.sum", g.op("Squeeze", g.slice(total, -1, END, axis=1), g.const([1]))
        )
        self.set_state(
            "decoder.count", g.op("Squeeze", g.slice(count, -1, END, axis=1), g.const([1]))
        )
        return g.op("Cast", g.op("Div", total, denom), to=onnx.TensorProto.FLOAT)
