"""Packaging for rcuda.  `pip install .` also builds the native interposer."""
from setuptools import setup

setup(
    name="rcuda",
    version="0.1.0",
    description="Run unmodified CUDA programs on remote GPUs",
    python_requires=">=3.10",
    packages=["rcuda", "rcuda._generated", "rcuda.client", "rcuda.server", "rcuda.server.backends"],
    package_dir={"rcuda.client": "client", "rcuda.server": "server"},
    install_requires=["cffi>=1.17", "pyzmq>=25", "msgpack>=1.0", "numpy>=1.24",
                      "pyelftools>=0.31", "zstandard>=0.22", "lz4>=4.3", "cxxfilt>=0.3"],
    extras_require={"cupy": ["cupy-cuda13x"], "test": ["pytest>=8"]},
    entry_points={"console_scripts": ["rcuda = rcuda.cli:main"]},
)
