"""Mutation check for the kernel tester: inject one defect per kernel variant, see the tester fail.

Each defect is a one-place source edit (skip the last block, drop a dot-product
half, a wrong scale or zero point, a bad transpose). For every defect this
script copies runtime/kernels to a temporary folder, applies the edit, builds
the tester with g++ (or aarch64-linux-gnu-g++), runs it for the defect's ISA
(natively, or under qemu-aarch64 -cpu cortex-a76) and expects a non-zero exit.
AVX-512 defects run natively on an AVX-512 CPU, else with the AVX-512
intrinsics emulated by SIMDe (libsimde-dev), else are only compiled.

    python runtime/kernels/tests/inject_defects.py [--only NAME]

Exits 1 if a defect went unnoticed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1]

X86_FLAGS = {
    "f32-spmm-avx2.cpp": ["-mavx2", "-mfma"],
    "qd8-f32-qc8w-spmm-avx2.cpp": ["-mavx2", "-mfma"],
    "f32-spmm-avx512f.cpp": ["-mavx2", "-mfma", "-mavx512f"],
    "qd8-f32-qc8w-spmm-avx512vnni.cpp": ["-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"],
}
ARM_FLAGS = {"qd8-f32-qc8w-spmm-neondot.cpp": ["-march=armv8.2-a+dotprod"], "f32-spmm-neon.cpp": [],
             "qd8-f32-qc8w-spmm-neon.cpp": []}
COMMON = ["sparse_linear.cpp", "f32-spmm-scalar.cpp", "qd8-f32-qc8w-spmm-scalar.cpp"]

# (name, arch, isa run by the tester, file, old text, new text); file may be a list of (file, old, new) edits
DEFECTS = [
    ("scalar f32: fma off by 1e-4", "x86", "scalar", "traits-scalar.h",
     "return acc + a * b; }", "return acc + a * b * 1.0001f; }"),
    ("scalar int8: dot4 drops the 4th channel", "x86", "scalar", "traits-scalar.h",
     "for (int j = 0; j < 4; ++j)\n      acc +=", "for (int j = 0; j < 3; ++j)\n      acc +="),
    ("generic f32: the last block of every row skipped", "x86", "avx2", "spmm_generic.h",
     "const int e = rs[rb + 1];\n      for (; b + S <= e; b += S) {\n#pragma GCC unroll 4\n        for (int s = 0; s < S; ++s)\n          f32_block",
     "const int e = std::max(rs[rb], rs[rb + 1] - 1);\n      for (; b + S <= e; b += S) {\n#pragma GCC unroll 4\n        for (int s = 0; s < S; ++s)\n          f32_block"),
    ("generic: odd last block dropped (int8)", "x86", "avx2", "spmm_generic.h",
     "for (; b < e; ++b) qd8_block", "for (; b + 1 < e; ++b) qd8_block"),
    ("pack_f32: last block column dropped", "x86", "scalar", "sparse_linear.cpp",
     "      if (!any) continue;\n      out.col.push_back(static_cast<std::uint16_t>(k0));\n      out.values.insert(out.values.end(), v, v + R * C);",
     "      if (!any || k0 + C >= k) continue;\n      out.col.push_back(static_cast<std::uint16_t>(k0));\n      out.values.insert(out.values.end(), v, v + R * C);"),
    ("avx2 f32: transpose swaps two rows", "x86", "avx2", "traits-avx2.h",
     "_mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));",
     "_mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));"),
    ("avx2 int8: epilogue forgets the weight scale", "x86", "avx2", "traits-avx2.h",
     "_mm256_mul_ps(_mm256_loadu_ps(sx), _mm256_set1_ps(wscale))", "_mm256_loadu_ps(sx)"),
    ("avx2 int8: zero point off by one", "x86", "avx2", "traits-avx2.h",
     "z = _mm256_set1_epi32(p.zero)", "z = _mm256_set1_epi32(p.zero + 1)"),
    ("avx2 int8: kernel quantizes to 8 bits, contract says 7", "x86", "avx2", "qd8-f32-qc8w-spmm-avx2.cpp",
     "qd8_run<Avx2Q8, 1, 1, 4, 2>(w, x, m, y, ws, 127)", "qd8_run<Avx2Q8, 1, 1, 4, 2>(w, x, m, y, ws, 255)"),
    ("avx2 int8: 8-bit activations everywhere (vpmaddubsw saturates int16)", "x86", "avx2", [
        ("qd8-f32-qc8w-spmm-avx2.cpp", "qd8_run<Avx2Q8, 1, 1, 4, 2>(w, x, m, y, ws, 127)",
         "qd8_run<Avx2Q8, 1, 1, 4, 2>(w, x, m, y, ws, 255)"),
        ("sparse_linear.cpp", "qd8_kernel_isa(isa) == Isa::kAvx2 ? 127 : 255", "255")], None, None),
    ("avx512 f32: broadcast of the next weight", "x86", "avx512", "f32-spmm-avx512f.cpp",
     "return _mm512_set1_ps(*p);", "return _mm512_set1_ps(p[1]);"),
    ("avx512vnni int8: dpbusd drops the accumulator", "x86", "avx512vnni", "qd8-f32-qc8w-spmm-avx512vnni.cpp",
     "return _mm512_dpbusd_epi32(acc, x, w);", "return _mm512_dpbusd_epi32(_mm512_setzero_si512(), x, w);"),
    ("neon f32: broadcast of the next weight", "arm", "neon", "traits-neon.h",
     "return vld1q_dup_f32(p); }", "return vld1q_dup_f32(p + 1); }"),
    ("neon f32: transpose swaps columns", "arm", "neon", "traits-neon.h",
     "vst1q_f32(d + ldd, vcombine_f32(vget_low_f32(p01.val[1]), vget_low_f32(p23.val[1])));",
     "vst1q_f32(d + ldd, vcombine_f32(vget_low_f32(p01.val[1]), vget_low_f32(p23.val[0])));"),
    ("neon int8: dot4 drops the upper half (smull2)", "arm", "neon", "traits-neon.h",
     "vpadalq_s16(acc, vpaddq_s16(p0, p1))", "vpadalq_s16(acc, vpaddq_s16(p0, vdupq_n_s16(0)))"),
    ("neon int8: activations not flipped to signed", "arm", "neon", "traits-neon.h",
     "const uint8x8_t flip = vdup_n_u8(0x80);", "const uint8x8_t flip = vdup_n_u8(0x00);"),
    ("neondot int8: sdot with the activations twice", "arm", "neondot", "qd8-f32-qc8w-spmm-neondot.cpp",
     "vdotq_s32(acc, vreinterpretq_s8_s32(x), vreinterpretq_s8_s32(w))",
     "vdotq_s32(acc, vreinterpretq_s8_s32(x), vreinterpretq_s8_s32(x))"),
]


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


SIMDE = Path("/usr/include/simde/x86/avx512.h")


def build(src: Path, arch: str, out: Path, *, simde: bool = False) -> None:
    """The tester from src; simde: AVX-512 intrinsics emulated on AVX2 (ENK_SIMDE_AVX512)."""
    cxx = "g++" if arch == "x86" else "aarch64-linux-gnu-g++"
    objs = []
    flags = X86_FLAGS if arch == "x86" else ARM_FLAGS
    for name in [*COMMON, *flags, "../tests/sparse_linear_tester.cpp"]:
        obj = out / (Path(name).stem + ".o")
        extra = ["-mavx2", "-mfma", "-DENK_SIMDE_AVX512", "-Wno-psabi"] if simde else flags.get(name, [])
        subprocess.run([cxx, "-std=c++17", "-O3", "-Wno-maybe-uninitialized", *extra, "-I", str(src.parent / "include"),
                        "-I", str(src), "-c", str(src / name), "-o", str(obj)], check=True)
        objs.append(str(obj))
    subprocess.run([cxx, *objs, "-o", str(out / "tester"), *(["-static"] if arch == "arm" else [])], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run the defects whose name contains this text")
    args = ap.parse_args()
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= cpu_flags()
    missed = 0
    for name, arch, isa, file, old, new in DEFECTS:
        edits = file if isinstance(file, list) else [(file, old, new)]
        if args.only and args.only not in name:
            continue
        if arch == "arm" and (shutil.which("aarch64-linux-gnu-g++") is None or shutil.which("qemu-aarch64") is None):
            print(f"skip  {name}: no aarch64 cross toolchain / qemu-aarch64")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "kernels"
            shutil.copytree(KERNELS, root, ignore=shutil.ignore_patterns("__pycache__"))
            bad = False
            for f, o, n in edits:
                path = root / "src" / f
                text = path.read_text()
                if text.count(o) != 1:
                    print(f"ERROR {name}: the text to edit occurs {text.count(o)} times in {f}")
                    bad = True
                    break
                path.write_text(text.replace(o, n))
            if bad:
                missed += 1
                continue
            (root / "obj").mkdir()
            emulate = isa.startswith("avx512") and not avx512
            if emulate and not SIMDE.is_file():
                build(root / "src", arch, root / "obj")
                print(f"built {name}: compiled; no AVX-512 here and no SIMDe (libsimde-dev) to emulate it")
                continue
            build(root / "src", arch, root / "obj", simde=emulate)
            tester = str(root / "obj" / "tester")
            cmd = [tester, "--quick", "--isa", isa]
            if arch == "arm":
                cmd = ["qemu-aarch64", "-cpu", "cortex-a76", *cmd]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            first = next((ln for ln in proc.stdout.splitlines() if ln.startswith("FAIL")), "")
            if proc.returncode == 0:
                print(f"MISSED {name}: the tester passed")
                missed += 1
            else:
                print(f"caught {name}{' (AVX-512 emulated by SIMDe)' if emulate else ''}: {first[:220]}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
