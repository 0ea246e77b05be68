"""Compiles and runs a C++ program over csrc's plain headers on the host (tests of device helpers whose logic is
plain C++: test_fast_divmod.py, test_log_sum.py, test_exp_sum.py). Skips the calling test where no C++ compiler is on
PATH."""
import shutil
import subprocess
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CSRC = TESTS.parent / "csrc"


def run_host_program(tmp_path, name, program, flags=()):
    """Builds `program` (C++17, -O2, csrc and tests (host_ulp.h) on the include path, then `flags`) as tmp_path/name
    and runs it: its completed process, stdout as text."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    src = tmp_path / f"{name}.cpp"
    exe = tmp_path / name
    src.write_text(program)
    subprocess.run([cxx, "-O2", "-std=c++17", *flags, f"-I{CSRC}", f"-I{TESTS}", str(src), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True)
