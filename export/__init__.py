"""Export: turn a trained model's step-wise (streaming) form into an ONNX graph.

Layering (tests/test_layering.py): export imports the core (``liquid_stream``) only —
never ``liquid_stream.training`` nor ``liquid_stream.apps``. Its command, ``liquid-stream
export``, lives in :mod:`.cli`.
"""
