"""Apps: live applications that run an exported ONNX model on streaming input.

Layering (tests/test_layering.py): the apps import the core (``liquid_stream``) and each
other only — never ``liquid_stream.training`` nor ``liquid_stream.export`` — and run on
onnxruntime without torch. Their commands live in each domain's ``cli.py`` (``kws/``,
``vitals/``, ``serve/``).
"""
