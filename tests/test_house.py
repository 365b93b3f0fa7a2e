"""The repository's shape: no import circle among rcuda's modules, the
client's packages import only what lies below them, and no large binary
is committed.

The import graph is read from the modules' own source (every `import` and
`from … import` statement, those inside functions included), not from
running them."""
from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Folder -> the package it is installed as (setup.py's package_dir).
FOLDERS = {"rcuda": "rcuda", "client": "rcuda.client", "server": "rcuda.server", "benchmarks": "rcuda.benchmarks"}
LARGEST_FILE = 1 << 20


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if folder == "rcuda" and parts[0] in ("_lib",):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that module `name` (at `path`) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([node.module] if node.module else []))
            for alias in node.names:  # `from package import module` imports the module
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    found = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each group of modules that import each other (Tarjan's strongly
    connected components of more than one module, or a module importing itself)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_graph_reader_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reader_sees_the_clients_imports():
    graph = import_graph()
    assert "rcuda.client.state" in graph["rcuda.client.runtime.core"] or \
        "rcuda.client.interposer" in graph["rcuda.client.runtime.core"]
    assert "rcuda.client.runtime.memory" in graph["rcuda.client.driver.memory"]
    assert "rcuda.client.transport.link" in graph["rcuda.client.transport.lane"]


def test_no_import_circle():
    found = circles(import_graph())
    assert not found, "modules that import each other:\n" + "\n".join(" <-> ".join(group) for group in found)


#: What each of the client's packages may import of the client (besides itself).
CLIENT_LAYERS = {
    "rcuda.client.transport": (),
    "rcuda.client.memory": ("rcuda.client.transport",),
    "rcuda.client.runtime": ("rcuda.client.transport", "rcuda.client.memory", "rcuda.client.device",
                             "rcuda.client.streams", "rcuda.client.stream_attributes", "rcuda.client.modules",
                             "rcuda.client.graphs", "rcuda.client.capture",
                             "rcuda.client.callbacks", "rcuda.client.interposer", "rcuda.client.registry",
                             "rcuda.client.proc_address", "rcuda.client.driver.handles",
                             "rcuda.client.driver.context_stacks", "rcuda.client.driver.loading"),
    "rcuda.client.libraries.objects": ("rcuda.client.interposer",),
}


def test_the_clients_packages_import_only_what_lies_below_them():
    graph = import_graph()
    wrong = []
    for module, targets in graph.items():
        for package, allowed in CLIENT_LAYERS.items():
            if module != package and not module.startswith(package + "."):
                continue
            for target in targets:
                inside = target == package or target.startswith(package + ".")
                if target.startswith("rcuda.client") and not inside and \
                        not any(target == a or target.startswith(a + ".") for a in allowed):
                    wrong.append(f"{module} imports {target}")
    assert not [m for m, targets in graph.items() if m.startswith("rcuda.client") and
                "rcuda.client.entrypoints" in targets], "only C calls client/entrypoints.py"
    server_uses_client = [f"{m} imports {t}" for m, targets in graph.items() if m.startswith("rcuda.server")
                          for t in targets if t.startswith("rcuda.client")]
    assert not server_uses_client, "\n".join(server_uses_client)
    assert not wrong, "\n".join(wrong)


def test_no_large_binary_is_committed():
    """Wheels, build outputs and data do not belong in the repository
    (measured results may: benchmarks/results/)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing to list")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    large = []
    for name in filter(None, listed.decode().split("\0")):
        path = REPO / name
        if name.startswith("benchmarks/results/") or not path.is_file():
            continue
        if path.stat().st_size > LARGEST_FILE and b"\0" in path.read_bytes()[:8192]:
            large.append(f"{name} ({path.stat().st_size:,} bytes)")
    assert not large, "binaries over 1 MiB committed: " + ", ".join(large)
