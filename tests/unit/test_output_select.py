"""validate.select: a GPU run compared with the CPU reference on the lines a regular
expression selects (its tokens), while the lines it leaves out (a float checksum, timings)
may differ."""

from __future__ import annotations

from orchestrator.model.verdict.outputs import Captured, compare_captured, compare_outputs

CPU = "backend: cpu\ntoken 17 the\ntoken 42 cat\nchecksum 0.123456789\nelapsed 1.20 s\n"
GPU = "backend: cuda\ntoken 17 the\ntoken 42 cat\nchecksum 0.123456801\nelapsed 0.05 s\n"


def test_only_the_selected_lines_are_compared() -> None:
    assert len(compare_outputs(CPU, GPU)) == 3
    assert compare_outputs(CPU, GPU, select=r"^token ") == []


def test_a_selected_line_that_differs_is_named_with_its_line_number() -> None:
    wrong = GPU.replace("token 42 cat", "token 43 dog")
    (difference,) = compare_outputs(CPU, wrong, select=r"^token ")
    assert (difference.line, difference.expected, difference.got) == (
        3,
        "token 42 cat",
        "token 43 dog",
    )


def test_a_selected_line_missing_on_one_side_is_a_difference() -> None:
    short = GPU.replace("token 42 cat\n", "")
    (difference,) = compare_outputs(CPU, short, select=r"^token ")
    assert difference.expected == "token 42 cat" and difference.got == ""


def test_select_and_tolerance_together() -> None:
    select = r"^(token|checksum) "
    assert len(compare_outputs(CPU, GPU, select=select)) == 1
    assert compare_outputs(CPU, GPU, tolerance=1e-6, select=select) == []


def test_captured_outputs_compare_through_the_selection() -> None:
    cpu, gpu = Captured(CPU.encode(), b""), Captured(GPU.encode(), b"")
    assert compare_captured(cpu, gpu, select=r"^token ") == ""
    wrong = Captured(GPU.replace("token 17", "token 18").encode(), b"")
    assert compare_captured(cpu, wrong, select=r"^token ") == (
        "stdout: 1 line(s) of the selected lines differ"
    )
    # Without a selection the bytes decide, as before.
    assert "bytes differ" in compare_captured(cpu, gpu)
