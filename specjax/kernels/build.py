"""Compile the CPU kernels for this CPU on first use, cache them, register them with XLA.

One shared library holds the few-row matmul over packed weights (`packed_matmul.cc`) and the
small-block attention over the KV cache (`attention.cc`).

The shared library is built with the system C++ compiler (`$CXX`, else `c++` / `g++` /
`clang++`) against the XLA FFI headers that ship with jaxlib, with `-march=native`, into
`$SPECJAX_CACHE_DIR/kernels/` (default `~/.cache/specjax/kernels/`). Its file name is a hash of
the source, the jaxlib version, the compiler and the CPU's model name and flags, since one home
directory may meet another CPU or another jaxlib. A build that cannot happen (no compiler, a
compile error) logs one warning naming what is missing, and decoding runs on XLA's dot with
the same tokens.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
SOURCES = (HERE / "packed_matmul.cc", HERE / "attention.cc")
HEADERS = (HERE / "parallel_for.h", HERE / "simd.h")
TARGETS = {"float32": "SpecjaxPackedMatmulF32", "bfloat16": "SpecjaxPackedMatmulBF16"}
MANY_TARGETS = {"float32": "SpecjaxPackedMatmulManyF32", "bfloat16": "SpecjaxPackedMatmulManyBF16"}
ATTENTION = "SpecjaxCacheAttention"
TABLE_ROWS = "SpecjaxTableRowsBF16"
FLAGS = ("-O3", "-std=c++17", "-shared", "-fPIC", "-w")


def _march_suffix(march: str) -> str:
    return "" if march == "native" else f"_{march.replace('-', '_')}"


def ffi_name(dtype: str, march: str = "native") -> str:
    """The FFI target of the kernel for weights of `dtype`, built for `march`."""
    return f"specjax_packed_matmul_{dtype}{_march_suffix(march)}"


def many_ffi_name(dtype: str, march: str = "native") -> str:
    """The FFI target of several products of one activation (`kernels.matmul_many`)."""
    return f"specjax_packed_matmul_many_{dtype}{_march_suffix(march)}"


def table_rows_ffi_name(march: str = "native") -> str:
    """The FFI target of a bfloat16 packed table's rows, widened (`kernels.embed_lookup`)."""
    return f"specjax_table_rows_bfloat16{_march_suffix(march)}"


def attention_ffi_name(march: str = "native") -> str:
    """The FFI target of the cache attention kernel built for `march`."""
    return f"specjax_cache_attention{_march_suffix(march)}"


_log = logging.getLogger(__name__)


@functools.cache
def _cpuinfo() -> tuple[str, tuple[str, ...]]:
    """(model name, flags) of the first CPU in /proc/cpuinfo ("", () where there is none)."""
    model, flags = "", ()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and not model:
                model = value.strip()
            elif key == "flags" and not flags:
                flags = tuple(value.split())
    except OSError:
        pass
    return model, flags


def cpu_description() -> dict:
    """The CPU a figure was measured on: model, vector extensions, caches (for result files)."""
    model, flags = _cpuinfo()
    info = {"machine": platform.machine(), "model": model or platform.processor() or "unknown"}
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_tile", "avx_vnni")
    info["vector_extensions"] = [f for f in wanted if f in flags]
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind != "Instruction":
            caches[f"L{level}"] = size
    info["caches"] = caches
    info["cores"] = os.cpu_count()
    return info


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cache_dir() -> Path:
    root = os.environ.get("SPECJAX_CACHE_DIR") or Path.home() / ".cache" / "specjax"
    return Path(root) / "kernels"


def library_key(compiler: str, march: str = "native") -> str:
    """Hash of everything the compiled library depends on."""
    import jaxlib

    model, flags = _cpuinfo()
    try:
        version = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=30
        ).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError):
        version = []
    code = [f.read_bytes().decode() for f in (*SOURCES, *HEADERS)]
    parts = [*code, jaxlib.__version__, *FLAGS, march, model, *flags]
    return hashlib.sha256("\n".join([*parts, *version]).encode()).hexdigest()[:16]


def _compile(compiler: str, out: Path, march: str) -> None:
    import jax

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        tmp_out = Path(tmp) / out.name
        include = f"-I{jax.ffi.include_dir()}"
        sources = [str(f) for f in SOURCES]
        cmd = [compiler, *FLAGS, f"-march={march}", include, *sources, "-o", str(tmp_out)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stderr[-2000:]}")
        os.replace(tmp_out, out)  # atomic: a concurrent process sees the old file or the new


def load(march: str = "native") -> ctypes.CDLL | None:
    """The compiled library for `march`, registered with XLA once per process (`_load`)."""
    return _load(march)  # one cache key per march, however the caller spells the argument


@functools.cache
def _load(march: str) -> ctypes.CDLL | None:
    """The compiled library, registered with XLA; None (after one warning) when unavailable.

    march: the `-march` it is built for: "native" (this CPU: AVX-512 or AVX2 tiles, whichever
    it has) is what decoding uses; another (e.g. "haswell", AVX2) registers its own FFI names
    (`ffi_name(dtype, march)`), which lets the tests run the AVX2 tiles on an AVX-512 CPU.
    """
    missing = [f.name for f in (*SOURCES, *HEADERS) if not f.exists()]
    if missing:
        _log.warning("specjax CPU kernel: source %s is missing; using XLA's dot", missing)
        return None
    compiler = _compiler()
    if compiler is None:
        _log.warning(
            "specjax CPU kernel: no C++ compiler found (set CXX, or install g++ or clang++); "
            "decoding uses XLA's dot (same tokens, slower few-row products)"
        )
        return None
    path = _cache_dir() / f"specjax_kernels-{library_key(compiler, march)}.so"
    try:
        if not path.exists():
            _log.info("specjax CPU kernel: compiling %s", path)
            _compile(compiler, path, march)
        lib = ctypes.CDLL(str(path))
    except (OSError, RuntimeError, subprocess.SubprocessError) as err:
        _log.warning("specjax CPU kernel: build failed (%s); decoding uses XLA's dot", err)
        return None
    import jax

    for dtype, symbol in TARGETS.items():
        jax.ffi.register_ffi_target(
            ffi_name(dtype, march), jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu"
        )
    for dtype, symbol in MANY_TARGETS.items():
        jax.ffi.register_ffi_target(
            many_ffi_name(dtype, march), jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu"
        )
    jax.ffi.register_ffi_target(
        attention_ffi_name(march), jax.ffi.pycapsule(getattr(lib, ATTENTION)), platform="cpu"
    )
    jax.ffi.register_ffi_target(
        table_rows_ffi_name(march), jax.ffi.pycapsule(getattr(lib, TABLE_ROWS)), platform="cpu"
    )
    return lib
