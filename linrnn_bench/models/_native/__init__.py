"""The CPU kernels of the engine's ``"native"`` algorithm, in C++ called through XLA's FFI.

- `planar_scan` (`scan.cc`) computes the same recurrence as `models._scan`'s ``"sequential"``
  loop, ``h_t = lam * h_{t-1} + b_t`` on ``(L, 2, P)`` planar rows, because XLA:CPU compiles a
  loop over time into a generic fusion that streams at about a fifth of the machine's
  bandwidth (see `scan.cc`); `planar_adjoint` is its backward pass in one pass (the adjoint
  recurrence and lambda's cotangent), which `models._scan`'s VJP calls for ``"native"``.
- `bank.bank_output` (`bank.cc`): a bank of single-input single-output systems (S4D), the
  recurrence fused with its readout, with its own VJP.
- `mimo.mimo_output` (`mimo.cc`): a MIMO system's input map, recurrence and readout fused chunk
  by chunk with OpenBLAS GEMMs, with its own VJP (the engine's ``"fused"`` algorithm). OpenBLAS
  comes from the ``scipy-openblas32`` wheel (a pinned dependency; its symbols are prefixed, so
  it does not meet numpy's or scipy's copies), linked with an rpath to the wheel's directory.

What they were measured against (what they replace, and the streaming bandwidth reached by
the scan alone, `benchmarks`' ``TrackScan``) is on docs/performance.md. A fresh output larger
than the last-level cache, or than ``$LINRNN_STREAMING_BYTES`` when set, is written with
streaming stores, and the Makefile's ``GLIBC_TUNABLES`` keep glibc from unmapping freed large
buffers (see `scan.cc`).

The library is compiled from this directory's C++ sources on first use in a process (a few
seconds, once per source and machine) with the C++ compiler ``$CXX`` (default ``g++``) and the
FFI headers that ship with jaxlib, into ``$LINRNN_NATIVE_CACHE`` (default
`linrnn_bench.paths.cache_dir`: ``.cache/native`` in a clone); `make test` and `make report`
build it during set-up (``python -m linrnn_bench.models._native``). The file name is a hash of the sources and headers, the flags,
the compiler's version, jaxlib's and OpenBLAS's versions and the CPU's feature flags (the build
uses ``-march=native``), so a stale or foreign library is never loaded. Where no compiler (or
no OpenBLAS wheel) is found, or ``LINRNN_NATIVE=0``, `status` says why and the engine's
``"auto"`` resolves to the XLA loop (``"sequential"``) for MIMO systems and to the convolution
for banks, which every run records.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

from linrnn_bench import paths

# Every C++ source of this directory goes into one library (the headers are part of its hash);
# TARGETS maps each FFI target name to the handler symbol that a source exports
# (XLA_FFI_DEFINE_HANDLER_SYMBOL).
SOURCES: tuple[Path, ...] = tuple(sorted(Path(__file__).parent.glob("*.cc")))
HEADERS: tuple[Path, ...] = tuple(sorted(Path(__file__).parent.glob("*.h")))
TARGETS: dict[str, str] = {
    "linrnn_planar_scan": "LinrnnPlanarScan",
    "linrnn_planar_adjoint": "LinrnnPlanarAdjoint",
    "linrnn_bank_forward": "LinrnnBankForward",
    "linrnn_bank_backward": "LinrnnBankBackward",
    "linrnn_mimo_forward": "LinrnnMimoForward",
    "linrnn_mimo_backward": "LinrnnMimoBackward",
}
CACHE_ENV = "LINRNN_NATIVE_CACHE"
SWITCH_ENV = "LINRNN_NATIVE"
FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-std=c++17", "-fPIC")  # compile and link


@dataclasses.dataclass(frozen=True)
class Status:
    """Whether the kernel can run in this process, and why not.

    Attributes:
        available: the library is built and its FFI targets registered.
        reason: why it is not available (empty when it is).
        library: path of the shared library (empty when none was built).
    """

    available: bool
    reason: str
    library: str


class NativeUnavailable(RuntimeError):
    """The native kernel cannot run here; the message says why and what to do."""


_lock = threading.Lock()


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def _compiler_version(compiler: str) -> str:
    done = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.splitlines()[0] if done.stdout else compiler


def _blas() -> tuple[list[str], str]:
    """The compiler arguments that link OpenBLAS (the ``scipy-openblas32`` wheel, a pinned
    dependency, whose symbols carry a ``scipy_`` prefix: no clash with numpy's or scipy's own
    copies), and its version."""
    try:
        import scipy_openblas32 as blas
    except ImportError as error:
        raise NativeUnavailable(
            f"the scipy-openblas32 package is missing ({error}); `make test` installs it, or "
            "pip install the version pinned in pyproject.toml"
        ) from error
    lib = blas.get_lib_dir()
    args = ["-I", blas.get_include_dir(), "-L", lib, f"-l{blas.get_library()}",
            f"-Wl,-rpath,{lib}"]
    return args, getattr(blas, "__version__", lib)


def library_path(compiler: str) -> Path:
    """Where the library built by ``compiler`` for these sources, jaxlib, OpenBLAS and CPU
    lives."""
    import jaxlib

    blas_args, blas_version = _blas()
    key = hashlib.sha256()
    parts = [source.read_bytes() for source in SOURCES + HEADERS]
    parts += [" ".join(FLAGS + tuple(blas_args)).encode(), blas_version.encode(),
              _compiler_version(compiler).encode(),
              jaxlib.__version__.encode(), platform.machine().encode(), _cpu_flags().encode()]
    for part in parts:
        key.update(part)
        key.update(b"\0")
    cache = Path(os.environ.get(CACHE_ENV) or paths.cache_dir("native"))
    return cache / f"linrnn_scan-{key.hexdigest()[:16]}.so"


def _build(compiler: str, library: Path) -> None:
    import jax

    library.parent.mkdir(parents=True, exist_ok=True)
    # Written under a temporary name and renamed: concurrent processes (worker processes, asv)
    # never load a half-written file.
    with tempfile.TemporaryDirectory(dir=library.parent) as tmp:
        partial = Path(tmp) / library.name
        blas = _blas()[0]
        # One object per source, compiled side by side (the sources take about as long each),
        # then linked.
        objects = [Path(tmp) / f"{source.stem}.o" for source in SOURCES]
        compiles = [[compiler, *FLAGS, "-c", "-isystem", jax.ffi.include_dir(),
                     *blas, str(source), "-o", str(obj)]
                    for source, obj in zip(SOURCES, objects)]
        running = [(command, subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.PIPE, text=True))
                   for command in compiles]
        link = [compiler, *FLAGS, "-shared", *(str(obj) for obj in objects), *blas, "-o",
                str(partial)]
        for command, process in running:
            _, stderr = process.communicate()
            _raise_if_failed(command, process.returncode, stderr)
        done = subprocess.run(link, capture_output=True, text=True, check=False)
        _raise_if_failed(link, done.returncode, done.stderr)
        os.replace(partial, library)


def _raise_if_failed(command: list[str], returncode: int, stderr: str) -> None:
    if returncode != 0:
        raise NativeUnavailable(
            f"compiling the native kernels failed ({' '.join(command)}):\n{stderr.strip()}"
        )


@functools.cache
def _load() -> Status:
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return Status(False, f"switched off by {SWITCH_ENV}=0", "")
    compiler = _compiler()
    if compiler is None:
        return Status(
            False,
            f"no C++ compiler found (CXX={os.environ.get('CXX', 'g++')!r}); install g++ or set "
            "CXX to build the native kernels",
            "",
        )
    try:
        import jax

        library = library_path(compiler)
        with _lock:
            if not library.exists():
                _build(compiler, library)
        loaded = ctypes.cdll.LoadLibrary(str(library))
        for target, symbol in TARGETS.items():
            handler = getattr(loaded, symbol)
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="cpu")
    except (NativeUnavailable, OSError, AttributeError) as error:
        return Status(False, str(error), "")
    return Status(True, "", str(library))


def status() -> Status:
    """Builds (if needed) and registers the kernels once per process; says whether they run."""
    return _load()


def available() -> bool:
    return status().available


def runs_on(backend: str | None = None) -> bool:
    """Whether the kernels serve ``backend`` (``jax.default_backend()`` unless given): a CPU
    backend, with the library available."""
    import jax

    backend = jax.default_backend() if backend is None else backend
    return backend == "cpu" and available()


def _check(b) -> None:
    current = status()
    if not current.available:
        raise NativeUnavailable(f"the native scan cannot run: {current.reason}.")
    if b.dtype not in (np.float32, np.float64):
        raise ValueError(
            f"The native scan runs float32 and float64; got {b.dtype}. Cast the input, or use "
            "algorithm='sequential'."
        )


def planar_adjoint(lam_re, lam_im, h, g, *, reverse: bool):
    """The backward pass of `planar_scan` in one pass: ``(a, grad_re, grad_im)``.

    ``a`` ``(L, 2, P)`` is the cotangent of ``b`` (the adjoint recurrence with conj(lam),
    against the primal's direction) and ``grad_re, grad_im`` ``(P,)`` the cotangents of
    ``lam_re, lam_im``, for the states ``h`` of the primal scan (``reverse`` is the primal's) and
    their cotangent ``g``: what `models._scan`'s VJP computes with a scan and a reduction, here
    without materialising the shifted slices of ``a`` and ``h`` that the reduction needs (on two
    cores: four copies of a state sequence per training step). Not differentiable itself.
    """
    import jax

    _check(g)
    states = g.shape[-1]
    call = jax.ffi.ffi_call(
        "linrnn_planar_adjoint",
        (
            jax.ShapeDtypeStruct(g.shape, g.dtype),
            jax.ShapeDtypeStruct((states,), g.dtype),
            jax.ShapeDtypeStruct((states,), g.dtype),
        ),
        vmap_method="broadcast_all",
    )
    return call(lam_re, lam_im, h, g, reverse=np.bool_(reverse))


def planar_scan(lam_re, lam_im, b, *, reverse: bool, in_place: bool = False):
    """`models._scan`'s recurrence on ``b`` ``(L, 2, P)`` with ``lam_re, lam_im`` ``(P,)``.

    Batched by `jax.vmap` (every argument gets the batch dimensions, ``broadcast_all``).

    ``in_place`` declares the output an alias of ``b`` (``input_output_aliases``), so the states
    overwrite ``b`` when XLA can prove ``b`` dead, and XLA copies ``b`` first when it cannot.
    The engine does not ask for it: inside a layer XLA copied the input map's output before the
    call (a whole extra pass), and the layer ran slower (docs/performance.md). It pays where the caller donates a
    buffer that nothing else reads (the scan-alone benchmark, `benchmarks/common.py`).
    """
    import jax

    _check(b)
    call = jax.ffi.ffi_call(
        "linrnn_planar_scan",
        jax.ShapeDtypeStruct(b.shape, b.dtype),
        vmap_method="broadcast_all",
        input_output_aliases={2: 0} if in_place else {},
    )
    return call(lam_re, lam_im, b, reverse=np.bool_(reverse))
