"""The native runtime (``runtime/``, libedgenlp) through ctypes.

Tokenizes in C++ with the same rules as the Hugging Face tokenizer and runs the
bundle's ``model.pte`` on the ExecuTorch C++ runtime, outside the Python
process's libtorch::

    with NativeRunner("out/minilm-sst2", threads=2) as runner:
        logits = runner.predict_logits(["a gripping film", "dull"])   # float32 [2, num_labels]
    native_tokenize("out/minilm-sst2", ["Hello, world!"])             # [[101, 7592, 1010, 2088, 999, 102]]

A dynamic bundle runs segment by segment in C++ (``edgenlp_logits_dynamic``)
through :class:`NativeDynamicRunner`, which ``get_runner(..., runtime="native")``
returns for it; :class:`NativeRunner` runs the static methods of any bundle.

The library is looked up in ``$EDGENLP_NATIVE_LIB``, then inside the installed
package (``edgenlp/_native/lib/``, what the wheel of ``tools/build_wheel.sh``
carries), then in ``runtime/build/<arch>/libedgenlp.so`` of the source tree
(what ``bash runtime/build.sh`` writes).
"""

from __future__ import annotations

import ctypes
import enum
import logging
import os
import platform
import threading
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from edgenlp.errors import BundleError, EdgeNLPError
from edgenlp.run.base import Runner, check_texts
from edgenlp.run.dynamic import DYNAMIC_OPTIONS, DynamicRunner, Prediction, resolve_settings

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]


class Status(enum.IntEnum):
    """``edgenlp_status`` of runtime/include/edgenlp.h, names without the ``EDGENLP_`` prefix.

    The header is the source; a test checks that this mirror matches it.
    """

    OK = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_IO = 2
    ERR_BUNDLE = 3
    ERR_CHECKSUM = 4
    ERR_INVALID_UTF8 = 5
    ERR_MODEL = 6
    ERR_BUFFER_TOO_SMALL = 7
    ERR_NO_MODEL = 8
    ERR_OUT_OF_MEMORY = 9
    ERR_INTERNAL = 10
    ERR_BUNDLE_FORMAT = 11
    ERR_NOT_DYNAMIC = 12


# The C ABI level (EDGENLP_ABI_VERSION of edgenlp.h) whose functions this module calls; an
# older library is refused with a message instead of failing on a missing symbol.
ABI_VERSION = 4

# EDGENLP_DEFAULT: a dynamic setting not given (the handle's / the bundle's value).
DEFAULT = -1

# edgenlp_open_ex flags
OPEN_SKIP_VERIFY = 1
OPEN_LOAD_ALL_METHODS = 2
OPEN_NO_WEIGHT_CACHE = 4
_BUNDLE_ERRORS = (Status.ERR_IO, Status.ERR_BUNDLE, Status.ERR_CHECKSUM, Status.ERR_MODEL, Status.ERR_NO_MODEL,
                  Status.ERR_BUNDLE_FORMAT)

_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


class NativeError(EdgeNLPError):
    """A call into libedgenlp failed; ``status`` is its edgenlp_status code."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class NativeBundleError(BundleError):
    """The native runtime rejected the bundle (missing file, checksum, bad program)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


def host_arch() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


# Where the wheel puts the native runtime (pyproject.toml [tool.scikit-build] wheel.install-dir).
PACKAGED = Path(__file__).resolve().parents[1] / "_native"


def library_path() -> Path:
    """Where libedgenlp is expected: ``$EDGENLP_NATIVE_LIB``, the installed wheel's copy, or the host build dir."""
    env = os.environ.get("EDGENLP_NATIVE_LIB")
    if env:
        return Path(env)
    packaged = sorted((PACKAGED / "lib").glob("libedgenlp.so*"), key=lambda p: len(p.name))
    if packaged:
        return packaged[0]
    return REPO / "runtime" / "build" / host_arch() / "libedgenlp.so"


def native_available() -> bool:
    """Whether the native runtime is built for this host (the runners that need it can be offered)."""
    return library_path().is_file()


def runner_path() -> Path:
    """``edgenlp-run`` beside the library: the installed wheel's copy or the host build dir's."""
    if (PACKAGED / "bin" / "edgenlp-run").is_file():
        return PACKAGED / "bin" / "edgenlp-run"
    return REPO / "runtime" / "build" / host_arch() / "edgenlp-run"


def run_main() -> None:
    """The ``edgenlp-run`` console script: exec the native runner with this process's arguments."""
    import sys

    path = runner_path()
    if not path.is_file():
        print(f"error: edgenlp-run: the native runner is not built: {path} is missing; run `bash runtime/build.sh`",
              file=sys.stderr)
        raise SystemExit(2)
    os.execv(path, [str(path), *sys.argv[1:]])


def load_library() -> ctypes.CDLL:
    """Load libedgenlp once per process and declare its signatures.

    Raises :class:`EdgeNLPError` when the library has not been built.
    """
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if not path.is_file():
            raise EdgeNLPError(f"native runtime not built: {path} is missing; run `bash runtime/build.sh`")
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise EdgeNLPError(f"cannot load the native runtime {path}: {exc}") from exc
        abi = lib.edgenlp_abi_version() if hasattr(lib, "edgenlp_abi_version") else 0
        if abi < ABI_VERSION:
            raise EdgeNLPError(f"the native runtime {path} is too old (C ABI level {abi}, this edgenlp needs "
                               f"{ABI_VERSION}): rebuild it with `bash runtime/build.sh`")
        h = ctypes.c_void_p
        c_size = ctypes.c_size_t
        i64p = ctypes.POINTER(ctypes.c_int64)
        f32p = ctypes.POINTER(ctypes.c_float)
        i32p = ctypes.POINTER(ctypes.c_int32)
        sig = {
            "edgenlp_version": (ctypes.c_int, []),
            "edgenlp_abi_version": (ctypes.c_int, []),
            "edgenlp_bundle_format_version": (ctypes.c_int, []),
            "edgenlp_status_string": (ctypes.c_char_p, [ctypes.c_int]),
            "edgenlp_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(h)]),
            "edgenlp_open_ex": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(h)]),
            "edgenlp_close": (None, [h]),
            "edgenlp_last_error": (ctypes.c_char_p, [h]),
            "edgenlp_set_threads": (ctypes.c_int, [h, ctypes.c_int32]),
            "edgenlp_num_labels": (ctypes.c_int, [h, ctypes.POINTER(c_size)]),
            "edgenlp_label_name": (ctypes.c_char_p, [h, c_size]),
            "edgenlp_max_seq_len": (ctypes.c_int, [h, ctypes.POINTER(c_size)]),
            "edgenlp_tokenize": (ctypes.c_int, [h, ctypes.c_char_p, c_size, i64p, i64p, c_size, ctypes.POINTER(c_size)]),
            "edgenlp_logits_batch": (ctypes.c_int, [h, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(c_size), c_size,
                                                    f32p, c_size]),
            "edgenlp_dynamic_layers": (ctypes.c_int, [h, ctypes.POINTER(c_size)]),
            "edgenlp_set_exit_threshold": (ctypes.c_int, [h, ctypes.c_double]),
            "edgenlp_set_keep_ratio": (ctypes.c_int, [h, ctypes.c_double]),
            "edgenlp_set_static": (ctypes.c_int, [h, ctypes.c_int32]),
            "edgenlp_logits_dynamic": (ctypes.c_int, [h, ctypes.c_char_p, c_size, ctypes.c_double, ctypes.c_double,
                                                      ctypes.c_int32, f32p, c_size, i32p, i32p, c_size]),
            "edgenlp_enable_etdump": (ctypes.c_int, [h]),
            "edgenlp_write_etdump": (ctypes.c_int, [h, ctypes.c_char_p]),
        }
        for name, (restype, argtypes) in sig.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        log.debug("loaded %s (version %d, ABI %d)", path, lib.edgenlp_version(), abi)
        _lib = lib
        return lib


def _encode(text: str) -> bytes:
    # surrogatepass lets a lone surrogate reach the native UTF-8 check, which reports it.
    return text.encode("utf-8", "surrogatepass")


class NativeHandle:
    """An open bundle in libedgenlp. Not reentrant: calls are serialized by a lock.

    ``verify=False`` skips the sha256 check of the bundle files
    (EDGENLP_OPEN_SKIP_VERIFY); ``load_all_methods=True`` loads every bucket's
    method at open instead of on first use (EDGENLP_OPEN_LOAD_ALL_METHODS);
    ``weight_cache=False`` lets every bucket method pack its own copy of the
    weights (EDGENLP_OPEN_NO_WEIGHT_CACHE; the default shares one copy).
    """

    def __init__(self, bundle_dir: str | Path, *, verify: bool = True, load_all_methods: bool = False,
                 weight_cache: bool = True) -> None:
        self._lib = load_library()
        self._lock = threading.Lock()
        self.path = Path(bundle_dir)
        self._h = ctypes.c_void_p()
        flags = ((0 if verify else OPEN_SKIP_VERIFY) | (OPEN_LOAD_ALL_METHODS if load_all_methods else 0)
                 | (0 if weight_cache else OPEN_NO_WEIGHT_CACHE))
        status = self._lib.edgenlp_open_ex(os.fsencode(str(bundle_dir)), flags, ctypes.byref(self._h))
        if status != Status.OK:
            message = self._error()
            self.close()
            raise NativeBundleError(message, status=status) if status in _BUNDLE_ERRORS else NativeError(
                message, status=status)
        n = ctypes.c_size_t()
        self._lib.edgenlp_num_labels(self._h, ctypes.byref(n))
        self.labels = tuple(self._lib.edgenlp_label_name(self._h, i).decode("utf-8") for i in range(n.value))
        self._lib.edgenlp_max_seq_len(self._h, ctypes.byref(n))
        self.max_seq_len = n.value
        self._lib.edgenlp_dynamic_layers(self._h, ctypes.byref(n))
        self.num_layers = n.value  # 0: a bundle without segments

    def _error(self) -> str:
        if not self._h:
            return "libedgenlp: out of memory"
        return self._lib.edgenlp_last_error(self._h).decode("utf-8", "replace")

    def _check(self, status: int) -> None:
        if status == Status.OK:
            return
        if status in _BUNDLE_ERRORS:
            raise NativeBundleError(self._error(), status=status)
        raise NativeError(self._error(), status=status)

    def set_threads(self, threads: int) -> None:
        with self._lock:
            self._check(self._lib.edgenlp_set_threads(self._h, int(threads)))

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        ids = (ctypes.c_int64 * self.max_seq_len)()
        n = ctypes.c_size_t()
        out: list[list[int]] = []
        with self._lock:
            for text in texts:
                data = _encode(text)
                self._check(self._lib.edgenlp_tokenize(self._h, data, len(data), ids, None, self.max_seq_len,
                                                       ctypes.byref(n)))
                out.append(list(ids[: n.value]))
        return out

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        encoded = [_encode(t) for t in texts]
        n = len(encoded)
        k = len(self.labels)
        arr = (ctypes.c_char_p * n)(*encoded)
        lens = (ctypes.c_size_t * n)(*(len(b) for b in encoded))
        out = np.empty((n, k), dtype=np.float32)
        with self._lock:
            self._check(self._lib.edgenlp_logits_batch(
                self._h, arr, lens, n, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.size))
        return out

    def set_exit_threshold(self, value: float | None) -> None:
        """The handle's exit threshold (None: the bundle's); raises :class:`NativeError` out of range."""
        with self._lock:
            self._check(self._lib.edgenlp_set_exit_threshold(self._h, DEFAULT if value is None else float(value)))

    def set_keep_ratio(self, value: float | None) -> None:
        """The handle's keep ratio (None: the bundle's own token pruning)."""
        with self._lock:
            self._check(self._lib.edgenlp_set_keep_ratio(self._h, DEFAULT if value is None else float(value)))

    def set_static(self, value: bool | None) -> None:
        with self._lock:
            self._check(self._lib.edgenlp_set_static(self._h, DEFAULT if value is None else int(bool(value))))

    def logits_dynamic(self, text: str, *, exit_threshold: float | None = None, keep: float | None = None,
                       static: bool | None = None) -> tuple[np.ndarray, int, list[int]]:
        """One text through the segments: (logits float32 [num_labels], exit layer, tokens per layer that ran).

        The options override the handle's settings for this call (None: the handle's). On a bundle
        without segments (all options None) the static methods run and the exit layer is 0.
        """
        data = _encode(text)
        out = np.empty(len(self.labels), dtype=np.float32)
        tokens = (ctypes.c_int32 * max(self.num_layers, 1))()
        layer = ctypes.c_int32()
        with self._lock:
            self._check(self._lib.edgenlp_logits_dynamic(
                self._h, data, len(data), DEFAULT if exit_threshold is None else float(exit_threshold),
                DEFAULT if keep is None else float(keep), DEFAULT if static is None else int(bool(static)),
                out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.size, ctypes.byref(layer), tokens,
                self.num_layers))
        return out, layer.value, list(tokens[: layer.value])

    def enable_etdump(self) -> None:
        with self._lock:
            self._check(self._lib.edgenlp_enable_etdump(self._h))

    def write_etdump(self, path: str | Path) -> None:
        with self._lock:
            self._check(self._lib.edgenlp_write_etdump(self._h, os.fsencode(str(path))))

    def close(self) -> None:
        if self._h:
            self._lib.edgenlp_close(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


def _bundle_dir(bundle) -> Path:
    return Path(getattr(bundle, "path", bundle))


class NativeRunner(Runner):
    """Runner over libedgenlp: native tokenizer + ExecuTorch C++ runtime."""

    name = "native"

    def __init__(self, bundle, *, threads: int | None = None, verify: bool = True,
                 load_all_methods: bool = False, weight_cache: bool = True) -> None:
        self.handle = NativeHandle(_bundle_dir(bundle), verify=verify, load_all_methods=load_all_methods,
                                   weight_cache=weight_cache)
        self.labels = self.handle.labels
        self.threads = threads
        if threads is not None:
            self.handle.set_threads(threads)

    def predict_logits(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        return self.handle.logits(texts)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return self.handle.tokenize(list(texts))

    def close(self) -> None:
        self.handle.close()


def native_tokenize(bundle_dir, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text from the native tokenizer (with [CLS]/[SEP], truncated to max_seq_len).

    Works on tokenizer-only bundles (no model.pte). Raises :class:`BundleError`
    for a bad bundle and :class:`EdgeNLPError` for text that is not valid UTF-8.
    """
    handle = NativeHandle(_bundle_dir(bundle_dir))
    try:
        return handle.tokenize(list(texts))
    finally:
        handle.close()


class NativeDynamicRunner(NativeRunner):
    """A dynamic bundle through libedgenlp: the embedding and segments run in C++, with the exit rule,
    token keeping and re-bucketing of :func:`edgenlp.run.dynamic.run_sentence`.

    Same interface as :class:`edgenlp.run.dynamic.DynamicRunner`: ``predict``,
    ``predict_logits`` and ``predict_details`` take ``static``, ``exit_threshold``
    and ``keep`` per call; the constructor's become the handle's settings.
    ``latency_ms`` times the whole native call (its tokenization included).
    """

    def __init__(self, bundle, *, threads: int | None = None, static: bool = False, exit_threshold=None, keep=None,
                 verify: bool = True, load_all_methods: bool = False, weight_cache: bool = True) -> None:
        from edgenlp.bundle import Bundle

        b = bundle if isinstance(bundle, Bundle) else Bundle.open(bundle)
        entry = b.dynamic
        if entry is None:
            raise BundleError(f"{b.path}: not a dynamic bundle (its manifest has no segments)")
        self.spec, self.segments, self.mask_bias = entry.spec, entry.segments, entry.mask_bias
        self.defaults = {"static": static, "exit_threshold": exit_threshold, "keep": keep}
        self.settings = resolve_settings(self.spec, **self.defaults)  # the Python runtimes' checks and messages
        super().__init__(b.path, threads=threads, verify=verify, load_all_methods=load_all_methods,
                         weight_cache=weight_cache)
        if self.handle.num_layers != self.spec.num_layers:
            raise BundleError(f"{b.path}: libedgenlp sees {self.handle.num_layers} dynamic layers, the manifest "
                              f"{self.spec.num_layers}")
        try:
            self.handle.set_static(bool(static))
            self.handle.set_exit_threshold(exit_threshold)
            self.handle.set_keep_ratio(keep)
        except EdgeNLPError:
            self.close()
            raise

    def _call_options(self, overrides: dict) -> dict:
        unknown = set(overrides) - set(DYNAMIC_OPTIONS) - {"exits", "rule", "trace"}
        if unknown:
            raise TypeError(f"unknown option(s) {sorted(unknown)}")
        # Python-only options, given anything but their idle value
        python_only = [k for k, idle in (("exits", True), ("rule", None), ("trace", False))
                       if overrides.get(k) not in (None, idle)]
        if python_only:
            raise EdgeNLPError(f"the native runtime takes static, exit_threshold and keep per call, not "
                               f"{', '.join(python_only)} (use runtime executorch, onnx or eager)")
        given = {k: overrides[k] for k in DYNAMIC_OPTIONS if overrides.get(k) is not None}
        if given:
            resolve_settings(self.spec, **{**self.defaults, **given})  # the same checks and messages as the others
        return given

    def predict_details(self, texts: Sequence[str], **overrides) -> list:
        """A :class:`edgenlp.run.dynamic.Prediction` per text (logits, exit layer, tokens per layer that ran)."""
        texts = check_texts(texts)
        given = self._call_options(overrides)
        out = []
        for text in texts:
            t0 = time.perf_counter()
            logits, layer, tokens = self.handle.logits_dynamic(text, **given)
            out.append(Prediction(logits, layer, tokens, latency_ms=1000 * (time.perf_counter() - t0)))
        return out

    # label, probabilities, exit layer and tokens per text, as the Python runtimes report them
    predict_logits = DynamicRunner.predict_logits
    predict = DynamicRunner.predict
