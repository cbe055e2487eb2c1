"""Every row of the op registry is exercised by a test: an ONNX node test that passes in strict
mode (tests/conformance/expected_strict.txt) has a node the row covers (same domain and op, its
schema version inside the row's opset range), or the family's op tests (tests/test_ops_<family>.py)
name the op type. Op tests count per op type, not per row: their models are built in code, so
their opsets are not known without running them. Rows no test reaches are listed in UNTESTED
with the reason."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import onnx
import onnx.defs
import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "build" / "ep_mlx_oplist"
NODE_TESTS = ROOT / "third_party/root/usr/share/libonnx-testdata/data/node"
EXPECTED_STRICT = ROOT / "tests/conformance/expected_strict.txt"

# (domain, op) -> why no test exercises it. Keep empty unless a row truly cannot be tested here.
UNTESTED: dict[tuple[str, str], str] = {}


def registry_rows():
    out = subprocess.run([str(TOOL)], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        family, domain, op, lo, hi = line.split("\t")[:5]
        rows.append((family, domain, op, int(lo), int(hi)))
    return rows


def ops_named_in(family: str) -> set[str]:
    """Every string literal of the family's op tests that looks like an op type."""
    path = ROOT / "tests" / f"test_ops_{family}.py"
    return set(re.findall(r"""["']([A-Z][A-Za-z0-9]*)["']""", path.read_text())) if path.exists() else set()


def nodes_of(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for body in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from nodes_of(body)


def node_test_versions() -> set[tuple[str, str, int]]:
    """(domain, op, schema since_version) of every node of the strict-passing node tests."""
    seen = set()
    for name in EXPECTED_STRICT.read_text().split():
        if name.startswith("#") or not name.startswith("test_"):
            continue
        model = onnx.load(str(NODE_TESTS / name / "model.onnx"), load_external_data=False)
        opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in model.opset_import}
        for node in nodes_of(model.graph):
            domain = node.domain if node.domain != "ai.onnx" else ""
            try:
                schema = onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
            except onnx.defs.SchemaError:
                continue
            seen.add((domain or "ai.onnx", node.op_type, schema.since_version))
    return seen


@pytest.mark.skipif(not TOOL.exists() or not NODE_TESTS.exists(), reason="needs the build and the node tests")
def test_every_row_is_exercised():
    versions = node_test_versions()
    missing = []
    for family, domain, op, lo, hi in registry_rows():
        if op in ops_named_in(family) or (domain, op) in UNTESTED:
            continue
        if any(d == domain and o == op and lo <= v <= hi for d, o, v in versions):
            continue
        missing.append(f"{family}: {domain} {op} {lo}-{hi}")
    assert not missing, "rows no test exercises (add a test, or an UNTESTED entry with the reason):\n" + "\n".join(
        missing)


def test_untested_entries_are_rows():
    """An UNTESTED entry outlives its row unnoticed otherwise."""
    if not TOOL.exists():
        pytest.skip("needs the build")
    known = {(domain, op) for _, domain, op, _, _ in registry_rows()}
    assert set(UNTESTED) <= known, set(UNTESTED) - known
