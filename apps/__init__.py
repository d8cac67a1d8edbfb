"""Apps: live applications that run an exported ONNX model on streaming input."""
