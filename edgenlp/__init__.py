"""edgenlp: put BERT-family models on phones and ARM boards.

Fine-tune cheaply, compress under a device budget, lower to ExecuTorch and ONNX,
run through a native runtime and profile where every millisecond goes.

Importing this package has no side effects; heavy modules (torch, executorch,
onnxruntime) are imported by the functions that need them.
"""

__version__ = "0.3.0"

__all__ = ["__version__"]
