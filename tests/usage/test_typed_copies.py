"""``ParsedEvent`` and ``CallRow`` are NamedTuples made at run time from the usage
contract; the type checker reads a copy of each written under ``TYPE_CHECKING``.
A field added to the contract but not to the copy would go unchecked: the copies
must name the same fields, in the same order, as the classes the code runs."""

from __future__ import annotations

import ast
import inspect

import pytest

import usage.events
import usage.ingest.rows
from usage.events import ParsedEvent
from usage.ingest.rows import CallRow


def _type_checking_fields(module, class_name: str) -> list[str]:
    tree = ast.parse(inspect.getsource(module))
    for node in ast.walk(tree):
        is_guard = (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        )
        if not is_guard:
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == class_name:
                return [
                    s.target.id
                    for s in stmt.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                ]
    raise AssertionError(f"no {class_name} under TYPE_CHECKING in {module.__name__}")


@pytest.mark.parametrize(
    ("module", "runtime"), [(usage.events, ParsedEvent), (usage.ingest.rows, CallRow)]
)
def test_the_type_checkers_copy_names_the_fields_the_code_runs_with(module, runtime):
    assert _type_checking_fields(module, runtime.__name__) == list(runtime._fields)
