"""DESIGN.md's one-way rule, checked on the source: a stage imports only stages above it in the list.
The shared vocabulary lives in the first stage, `core`, which every stage may import and which imports none."""

from __future__ import annotations

import ast
from pathlib import Path

import collsynth

STAGES = ("core", "topologies", "collectives", "schedule", "encodings", "synth", "language", "algorithms", "ir",
          "compiler", "emit", "runtime", "sim", "tune", "catalog", "regress", "cli")
HELPERS: tuple[str, ...] = ()
# DESIGN.md's one exception: the face of collsynth.language offers MSCCLang's XML()/Check() drivers
EXCEPTIONS = {Path("language/__init__.py")}
PACKAGE = Path(collsynth.__file__).parent


def imported_modules(root: Path, path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every collsynth import in `path`, function-level imports included."""
    package = ["collsynth", *path.relative_to(root).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            found.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
    return [(line, m) for line, m in found if m == "collsynth" or m.startswith("collsynth.")]


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def violations(root: Path) -> list[str]:
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if len(rel.parts) == 1 or rel in EXCEPTIONS:
            continue
        here = rel.parts[0]
        for line, module in imported_modules(root, path):
            there = stage_of(module)
            if there in STAGES and STAGES.index(there) > STAGES.index(here):
                wrong.append(f"{rel}:{line}: {here} imports the later stage {module}")
    return wrong


def test_every_module_belongs_to_a_stage_or_is_a_shared_helper() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert top - {"__init__", "__main__"} <= set(STAGES) | set(HELPERS), top - set(STAGES) - set(HELPERS)


def test_no_stage_imports_a_later_stage() -> None:
    wrong = violations(PACKAGE)
    assert not wrong, "\n".join(wrong)


def test_the_package_face_and_shared_helpers_import_no_stage() -> None:
    wrong = []
    for name in (*HELPERS, "__init__"):
        wrong += [f"{name}.py:{line}: {m}" for line, m in imported_modules(PACKAGE, PACKAGE / f"{name}.py")
                  if stage_of(m) not in HELPERS]
    assert not wrong, wrong


def test_a_later_import_is_found_absolute_relative_or_inside_a_function(tmp_path: Path) -> None:
    (tmp_path / "synth").mkdir()
    (tmp_path / "synth" / "ok.py").write_text("from collsynth.encodings import x\nfrom ..topologies import y\n")
    (tmp_path / "synth" / "bad.py").write_text("from ..compiler import passes\n\ndef f():\n    import collsynth.cli\n")
    assert violations(tmp_path) == ["synth/bad.py:1: synth imports the later stage collsynth.compiler",
                                    "synth/bad.py:4: synth imports the later stage collsynth.cli"]
