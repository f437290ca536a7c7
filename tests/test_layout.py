"""The package's shape: no import cycle between ctxdb modules.

The graph is read from the source with ``ast``, so an import inside a function (a
"lazy" import) counts like one at the top: it only hides a cycle until the function
runs. Imports under ``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "ctxdb"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / PACKAGE


def module_name(path: Path, package_dir: Path) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules(package_dir: Path) -> dict[str, Path]:
    return {module_name(p, package_dir): p for p in sorted(package_dir.rglob("*.py"))}


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST):
    """Every Import/ImportFrom, at any depth, outside ``if TYPE_CHECKING:`` blocks."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if _is_type_checking_block(child):
                pending.extend(child.orelse)  # the else branch does run
            else:
                pending.append(child)


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts))]


def _imported_from(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The module a ``from … import`` in module ``name`` reads, its dots resolved."""
    if not node.level:
        return node.module or ""
    package = name if is_package else name.rpartition(".")[0]
    base_parts = package.split(".")
    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
    return ".".join(base_parts + ([node.module] if node.module else []))


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The ctxdb modules that importing ``name`` runs, directly.

    Importing ``a.b.c`` also runs the packages ``a`` and ``a.b``; those count unless
    the importer is inside them (then they are already being initialised). The root
    package is always already initialised, so it never counts.
    """
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = _imported_from(node, name, is_package)
        targets.add(base)
        # `from pkg import mod` imports the submodule pkg.mod
        targets.update(f"{base}.{alias.name}" for alias in node.names
                       if f"{base}.{alias.name}" in modules)
    own_packages = set(_ancestors(name)) | ({name} if is_package else set())
    runs: set[str] = set()
    for target in targets:
        if target not in modules:
            continue  # the standard library or a third-party package
        for module in _ancestors(target) + [target]:
            if module != PACKAGE and module not in own_packages and module != name:
                runs.add(module)
    return runs


def import_graph(package_dir: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    modules = all_modules(package_dir)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _describe(component: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = sorted(f"{a} -> {b}" for a in component for b in graph[a] if b in component)
    return "{" + ", ".join(sorted(component)) + "}: " + "; ".join(edges)


def test_no_import_cycle_between_ctxdb_modules():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles between ctxdb modules:\n" + "\n".join(
        _describe(c, graph) for c in found)


def test_the_graph_sees_lazy_relative_and_package_imports(tmp_path):
    # The reader of the graph, on a package of its own: a cycle closed only by an
    # import inside a function, through a package __init__, is still found.
    root = tmp_path / PACKAGE
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("from .a import A\n")
    (root / "a.py").write_text("from .sub.leaf import LEAF\nA = 1\n")
    (root / "sub" / "__init__.py").write_text("from . import heavy\n")
    (root / "sub" / "leaf.py").write_text("LEAF = 1\n")
    (root / "sub" / "heavy.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..b import B\n"
        "def later():\n    from .. import a\n    return a\n")
    (root / "b.py").write_text("B = 1\n")
    graph = import_graph(root)
    assert graph[f"{PACKAGE}.a"] == {f"{PACKAGE}.sub", f"{PACKAGE}.sub.leaf"}
    assert graph[f"{PACKAGE}.sub"] == {f"{PACKAGE}.sub.heavy"}
    assert graph[f"{PACKAGE}.sub.heavy"] == {f"{PACKAGE}.a"}  # TYPE_CHECKING left out
    assert cycles(graph) == [frozenset({f"{PACKAGE}.a", f"{PACKAGE}.sub", f"{PACKAGE}.sub.heavy"})]


def test_the_wheel_lists_every_directory_of_the_package_and_its_data():
    """pyproject.toml names its packages one by one (sql/ and migrations/ are mapped into
    the package from the top level): a new directory that is not listed would be left
    out of the wheel."""
    import tomllib

    root = PACKAGE_DIR.parent
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {"": PACKAGE_DIR, **{name.split(".", 1)[1]: root / where
                                  for name, where in config["package-dir"].items()}}
    expected = set()
    for prefix, base in mapped.items():
        for directory in [base, *(p for p in base.rglob("*") if p.is_dir())]:
            if directory.name == "__pycache__" or not any(f.is_file() for f in directory.iterdir()):
                continue
            parts = directory.relative_to(base).parts
            expected.add(".".join([PACKAGE, *filter(None, [prefix]), *parts]))
    assert set(config["packages"]) == expected


def test_the_lazy_exports_are_the_public_names_and_resolve():
    import importlib

    import ctxdb
    import ctxdb.recon

    for module in (ctxdb, ctxdb.recon):
        assert sorted(module.__all__) == sorted(module._EXPORTS)
        for name in module.__all__:
            defined_in = importlib.import_module(f"{module.__name__}.{module._EXPORTS[name]}")
            assert getattr(module, name) is getattr(defined_in, name), name


def test_import_and_help_load_no_database_parser_or_tokenizer():
    """`import ctxdb` and `ctxdb --help` stay fast by loading none of the heavy
    libraries (the start-up figures are in bench/startup.py, not asserted here)."""
    import subprocess
    import sys

    heavy = ["sqlalchemy", "alembic", "tree_sitter", "tiktoken", "openai", "jsonschema"]
    probe = (
        "import sys, contextlib, io\n"
        "import ctxdb\n"
        "after_import = [m for m in HEAVY if m in sys.modules]\n"
        "from ctxdb.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "print(after_import, [m for m in HEAVY if m in sys.modules])\n"
    ).replace("HEAVY", repr(heavy))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=PACKAGE_DIR.parent).stdout.strip()
    assert out == "[] []"


# --- layers: the pipeline is given its variant and never imports the A/B protocol; no
# module reaches for another's private (underscore) name -----------------------------

PIPELINE = f"{PACKAGE}.pipeline"
AB = f"{PACKAGE}.ab"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def pipeline_imports_of_ab(graph: dict[str, set[str]]) -> list[str]:
    """``pipeline module -> ab module`` for each import from the pipeline into ab."""
    return sorted(f"{name} -> {target}" for name, targets in graph.items()
                  if _within(name, PIPELINE) for target in targets if _within(target, AB))


def private_names_used_across_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """``module:line name`` for each private name of one ctxdb module that another
    imports (``from m import _x``, at any depth, TYPE_CHECKING included) or reads off it
    (``m._x``, ``m`` an imported ctxdb module)."""
    modules = all_modules(package_dir)
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        imported_modules: dict[str, str] = {}  # the local name -> the ctxdb module it is
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.asname:
                        imported_modules[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                base = _imported_from(node, name, path.name == "__init__.py")
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        imported_modules[alias.asname or alias.name] = f"{base}.{alias.name}"
                    elif base in modules and base != name and _is_private(alias.name):
                        found.append(f"{name}:{node.lineno} {base}.{alias.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in imported_modules and _is_private(node.attr)
                    and imported_modules[node.value.id] != name):
                found.append(f"{name}:{node.lineno} "
                             f"{imported_modules[node.value.id]}.{node.attr}")
    return sorted(found)


def test_the_pipeline_never_imports_ab():
    """The A/B protocol drives the pipeline (its variants arrive as the pipeline's
    options), never the other way: lazy imports count too."""
    found = pipeline_imports_of_ab(import_graph())
    assert not found, "the pipeline imports ab:\n" + "\n".join(found)


def test_no_module_uses_another_modules_private_name():
    found = private_names_used_across_modules()
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_the_layer_checks_see_what_they_forbid(tmp_path):
    # The two checks, on a package of their own holding one of each thing they forbid
    # and the look-alikes they allow.
    root = tmp_path / PACKAGE
    (root / "pipeline").mkdir(parents=True)
    (root / "ab").mkdir()
    for package in (root, root / "pipeline", root / "ab"):
        (package / "__init__.py").write_text("")
    (root / "ab" / "variants.py").write_text("PROBE = 1\n_SECRET = 2\n")
    (root / "pipeline" / "order.py").write_text(
        "def later():\n    from ..ab.variants import PROBE\n    return PROBE\n")
    (root / "pipeline" / "rank.py").write_text(
        "from ..ab import variants\n_OWN = 1\n"
        "def f():\n    return variants._SECRET, _OWN, variants.__name__\n")
    (root / "reader.py").write_text(
        "from .ab.variants import _SECRET\nimport os\nos._exit\n")
    graph = import_graph(root)
    assert pipeline_imports_of_ab(graph) == [
        f"{PIPELINE}.order -> {AB}", f"{PIPELINE}.order -> {AB}.variants",
        f"{PIPELINE}.rank -> {AB}", f"{PIPELINE}.rank -> {AB}.variants"]
    assert private_names_used_across_modules(root) == [
        f"{PIPELINE}.rank:4 {AB}.variants._SECRET", f"{PACKAGE}.reader:1 {AB}.variants._SECRET"]
