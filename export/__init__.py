"""Export: turn a trained model's step-wise (streaming) form into an ONNX graph."""
