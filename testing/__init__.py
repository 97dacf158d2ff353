"""Fixtures the tests, benchmarks and fuzz harness share; not part of the installed package.

`testing.runtime` (hand-made placement, zoo models with random weights, loading a repository
script), `testing.kernels` (running one kernel on one ONNX node, the conformance cases) and
`testing.int8_models` (the quantized models of the int8 tests). Import them with the repository
root on sys.path: tests/conftest.py and the benchmarks put it there.
"""
