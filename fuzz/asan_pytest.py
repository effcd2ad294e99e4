"""Runs pytest with a sanitized build of the engine module in place of the installed one.

    cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNGRAM_SANITIZE=address,undefined \\
          -Dpybind11_DIR=$(python -m pybind11 --cmakedir)
    cmake --build build/asan --target _engine ngram-serve-native
    LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" ASAN_OPTIONS=detect_leaks=0 \\
    NGRAM_SERVE_NATIVE=build/asan/cpp/server/ngram-serve-native \\
        python fuzz/asan_pytest.py build/asan/_engine.cpython-*.so tests/test_prune.py ...

The module is loaded as ``ngram_service._engine`` before anything imports the
package, so every test uses it. libasan must come first in the process
(LD_PRELOAD: Python itself is not instrumented), and libstdc++ with it (else
ASan cannot find the real __cxa_throw and aborts at the first C++ exception);
LeakSanitizer is off because CPython keeps objects alive until exit on purpose.
"""
from __future__ import annotations

import importlib.util
import sys


def main() -> int:
    if len(sys.argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    spec = importlib.util.spec_from_file_location("ngram_service._engine", sys.argv[1])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ngram_service._engine"] = module
    spec.loader.exec_module(module)
    import pytest

    return pytest.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
