"""The package's import structure: each layer imports only the layers before it (DESIGN's
list), and no modules import each other in a cycle.

Imports inside functions count too, unless the import's line carries a comment saying
why it is there (e.g. `# lazy: reading the host starts LLVM`); a module-level import
counts whatever its comment says."""
import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jitdl")

# DESIGN.md "Layers and data flow", top to bottom; layer 0 is the package's plain modules
LAYERS = [
    ("_version", "dtypes", "errors", "config", "locks"),
    ("ir",), ("te",), ("capture",), ("schedule",), ("tir",), ("lower",), ("target",),
    ("codegen",), ("runtime",), ("pipeline",), ("cache",), ("autotune",), ("ops",),
    ("frontends",), ("api", "tune"), ("eager",), ("numpy", "nn"), ("__init__", "__main__"),
]
LAYER = {name: n for n, names in enumerate(LAYERS) for name in names}


def modules():
    """{module name: path} of every jitdl source file."""
    out = {}
    for root, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def layer_of(module):
    parts = module.split(".")
    if len(parts) == 1:                      # jitdl itself: its __init__
        return LAYER["__init__"]
    return LAYER[parts[1]]


def imports(module, path, known):
    """(imported jitdl module, line, inside a function, has a comment) per import."""
    with open(path) as f:
        source = f.read()
    lines = source.splitlines()
    tree = ast.parse(source)
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            lazy = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")
                    up = up[:len(up) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                # `from jitdl import dtypes` imports the module jitdl.dtypes
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                         for a in child.names]
            for name in names:
                if name == "jitdl" or name.startswith("jitdl."):
                    while name not in known and "." in name:
                        name = name.rsplit(".", 1)[0]
                    text = lines[child.lineno - 1]
                    out.append((name, child.lineno, in_function, "#" in text))
            visit(child, lazy)
    visit(tree, False)
    return out


def test_layers_import_only_earlier_layers():
    known = modules()
    bad = []
    for module, path in sorted(known.items()):
        own = layer_of(module)
        for name, line, lazy, commented in imports(module, path, known):
            if name == "jitdl" or layer_of(name) <= own:
                continue
            if lazy and commented:
                continue
            bad.append(f"{module}:{line} imports {name} (layer {LAYERS[layer_of(name)][0]} "
                       f"comes after {LAYERS[own][0]})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_cycles():
    known = modules()
    edges = {m: set() for m in known}
    for module, path in known.items():
        for name, line, lazy, commented in imports(module, path, known):
            if name != module and name != "jitdl" and not (lazy and commented):
                edges[module].add(name)
    # Tarjan's strongly connected components
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))
    for v in sorted(edges):
        if v not in index:
            connect(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_checker_sees_an_upward_import(tmp_path):
    """The check itself: a function-level import without a comment is found."""
    src = tmp_path / "x.py"
    src.write_text("def f():\n    from jitdl.api import Function\n")
    found = imports("jitdl.ir.x", str(src), {"jitdl.api": "", "jitdl.ir.x": ""})
    assert found == [("jitdl.api", 2, True, False)]


@pytest.mark.parametrize("module", ["jitdl.pipeline", "jitdl.target.cpu", "jitdl.cache.keys",
                                    "jitdl.schedule.schedule"])
def test_module_has_a_layer(module):
    assert module in modules()
    layer_of(module)


def test_the_op_library_is_imported_at_its_first_use():
    """import jitdl leaves out jd.numpy and jd.nn (15 ms of it) until they are used: as
    attributes, inside a definition, by `from jitdl import *` or `import jitdl.numpy`;
    dir(jd) names them before (a notebook's completion of `jd.nu`)."""
    code = (
        "import sys, numpy as np, jitdl as jd\n"
        "print(sorted(m for m in sys.modules if m.startswith(('jitdl.numpy', 'jitdl.nn',"
        " 'jitdl.eager', 'jitdl.ops.nn'))))\n"
        "print({'numpy', 'nn', 'compute'} <= set(dir(jd)), 'jitdl.numpy' in sys.modules)\n"
        "x = np.random.default_rng().standard_normal((3, 4))\n"
        "@jd.compute\n"
        "def f(X):\n"
        "    return jd.numpy.exp(X) + jd.nn.relu(X)\n"
        "print(np.allclose(f(x), np.exp(x) + np.maximum(x, 0)))\n"
        "from jitdl import *\n"
        "print(numpy is jd.numpy and nn is jd.nn, 'jitdl.numpy' in sys.modules)\n"
        "try:\n"
        "    jd.nonesuch\n"
        "except AttributeError as e:\n"
        "    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "[]", "True False", "True", "True True", "module 'jitdl' has no attribute 'nonesuch'"], p.stdout
