"""Build flash_attn_ext._C with torch.utils.cpp_extension.

CUDA sources are compiled whenever a CUDA toolkit and a CUDA-enabled torch are present (no GPU is needed);
FLASH_ATTN_EXT_FORCE_CPU=1 builds the CPU kernels alone. TORCH_CUDA_ARCH_LIST is respected; with no GPU to
detect it defaults to "8.0;9.0a". The Hopper attention kernel (wgmma) needs the arch-specific target 9.0a:
a detected 9.0 GPU is built as 9.0a, and an explicit list with 9.0 instead of 9.0a builds without that kernel.
"""
import glob
import os
import subprocess
import sysconfig

from setuptools import find_packages, setup

import torch
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def _flag(name):
    return os.environ.get(name, "0").lower() in ("1", "true", "yes", "on")


def _use_cuda():
    if _flag("FLASH_ATTN_EXT_FORCE_CPU"):
        return False
    return CUDA_HOME is not None and torch.version.cuda is not None


def _sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "csrc", "**", pattern), recursive=True))


def _shared_libstdcxx():
    """The libstdc++ shared object this process runs (torch loaded it), when the C++ compiler would link
    libstdc++ statically instead; else [].

    Why: a compiler that finds only libstdc++.a (the GPU machine's g++ wrapper: its library path has no
    libstdc++.so) gives the extension a private copy of libstdc++ beside the process's shared one, and that
    copy's locale was never set up: the first error message formatting a number (a dim out of range) in a
    fresh process crashed with SIGSEGV instead of raising. Linking the running library by path first makes
    the linker take every libstdc++ symbol from it."""
    # Every compiler setuptools may link with (environment first, then Python's build configuration).
    names = [os.environ.get(v) or sysconfig.get_config_var(v) or "" for v in ("LDCXXSHARED", "CXX", "LDSHARED")]
    compilers = {n.split()[0] for n in names if n.strip()} or {"c++"}
    static_only = False
    for compiler in sorted(compilers):
        try:
            found = subprocess.run([compiler, "-print-file-name=libstdc++.so"], capture_output=True, text=True,
                                   timeout=120).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        static_only = static_only or not os.path.isabs(found)
    if not static_only or not os.path.exists("/proc/self/maps"):
        return []
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libstdc++.so") and os.path.isabs(path):
                return [path]
    return []


LINK_ARGS = ["-fopenmp"] + _shared_libstdcxx()


def _extension():
    cxx = ["-O3", "-std=c++17", "-fopenmp"]
    if not _use_cuda():
        return CppExtension("flash_attn_ext._C", _sources("*.cpp"), include_dirs=[os.path.join(ROOT, "csrc")],
                            extra_compile_args={"cxx": cxx},
                            extra_link_args=LINK_ARGS)
    if "TORCH_CUDA_ARCH_LIST" not in os.environ:
        if torch.cuda.is_available():
            caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
            os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(
                "9.0a" if cap == (9, 0) else f"{cap[0]}.{cap[1]}" for cap in caps)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0;9.0a"
    arch_list = os.environ["TORCH_CUDA_ARCH_LIST"].replace(",", ";").replace(" ", ";").split(";")
    sm90a = any(a.strip().startswith("9.0a") for a in arch_list)
    # define_macros reach the host compiler and nvcc alike (torch passes them to both).
    macros = [("FLASH_ATTN_EXT_WITH_CUDA", None)] + ([("FLASH_ATTN_EXT_SM90A", None)] if sm90a else [])
    nvcc = ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo",
            "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
            "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__"]
    if _flag("FLASH_ATTN_EXT_PTXAS_VERBOSE"):
        nvcc.append("-Xptxas=-v")
    return CUDAExtension("flash_attn_ext._C", _sources("*.cpp") + _sources("*.cu"),
                         include_dirs=[os.path.join(ROOT, "csrc")],
                         define_macros=macros,
                         extra_compile_args={"cxx": cxx, "nvcc": nvcc},
                         extra_link_args=LINK_ARGS)


setup(
    name="flash_attn_ext",
    version="0.1.0",
    packages=find_packages(include=["flash_attn_ext", "flash_attn_ext.*"]),
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildExtension},
)
