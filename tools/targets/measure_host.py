"""Measure this machine's per-core compute and memory bandwidth for ``targets/host.toml``.

Prints the numbers (and ``--json`` writes them) that ``targets/host.toml``
states: CPU model, cores, ISA flags, fp32 GEMM GFLOP/s on one thread (torch,
the same MKL/oneDNN-free path the runtimes' XNNPACK rivals), int8 GEMM GOP/s on
one thread (ONNX Runtime ``MatMulInteger``, u8 x s8), and memory copy bandwidth
(numpy, 256 MiB buffers; reported as read + write bytes).

    PYTHONPATH=$PWD python tools/targets/measure_host.py --json /tmp/host.json

Each figure is the best of several repetitions (a shared machine only ever
makes things slower).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import numpy as np

log = logging.getLogger(__name__)


def best_time(fn, *, reps: int, inner: int = 1) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def fp32_gemm_gflops(n: int = 1024, reps: int = 7) -> float:
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    t = best_time(lambda: torch.mm(a, b), reps=reps, inner=3)
    return 2 * n**3 / t / 1e9


def int8_gemm_gops(m: int = 128, k: int = 1536, n: int = 1536, reps: int = 7) -> float:
    """ONNX Runtime MatMulInteger (uint8 activations x int8 weights), the op its dynamic int8 flow emits."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w = rng.integers(-127, 127, size=(k, n), dtype=np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w"], ["y"])], "mmi",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
        [helper.make_tensor("w", TensorProto.INT8, [k, n], w.tobytes(), raw=True)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    a = rng.integers(0, 255, size=(m, k), dtype=np.uint8)
    t = best_time(lambda: sess.run(None, {"a": a}), reps=reps, inner=5)
    del onnx
    return 2 * m * k * n / t / 1e9


def copy_bandwidth_gbps(mib: int = 256, reps: int = 5) -> float:
    src = np.ones(mib << 18, dtype=np.float32)
    dst = np.empty_like(src)
    t = best_time(lambda: np.copyto(dst, src), reps=reps)
    return 2 * src.nbytes / t / 1e9


def cpu_facts() -> dict:
    from edgenlp.utils import cpu_info

    info = cpu_info()
    mhz = []
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("cpu MHz"):
                mhz.append(float(line.split(":")[1]))
            if line.startswith("flags") and "flags" not in info:
                info["flags"] = sorted(line.split(":", 1)[1].split())
    except OSError:
        pass
    info["mhz"] = max(mhz) if mhz else None
    info["cores"] = os.cpu_count()
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the numbers to this file")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = {"cpu": cpu_facts(), "fp32_gemm_gflops_1t": round(fp32_gemm_gflops(), 1), "int8_gemm_gops_1t": round(int8_gemm_gops(), 1),
           "copy_bandwidth_gbps": round(copy_bandwidth_gbps(), 1), "load_avg": os.getloadavg()}
    out["cpu"].pop("flags", None) if not args.json else None
    log.info(json.dumps({k: v for k, v in out.items() if k != "cpu"} | {"cpu": {k: v for k, v in out["cpu"].items() if k != "flags"}}, indent=1))
    if args.json:
        from edgenlp.utils import atomic_write_json

        atomic_write_json(args.json, out)


if __name__ == "__main__":
    main()
