"""Boolean query parameters of the connect subresources (exec, attach, log) as
kube-apiserver converts them (apimachinery's ``Convert_Slice_string_To_bool``), and
the PodExecOptions defaults (stdout and stderr on)."""

from __future__ import annotations

import pytest

from control.apiserver.http.connect import flag, stream_flags


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("0", False),
        ("false", False),
        ("FALSE", False),
        ("False", False),
        ("1", True),
        ("true", True),
        ("", True),
        ("yes", True),
        ("maybe", True),
    ],
)
def test_a_present_value_is_true_unless_it_is_0_or_false(value: str, want: bool) -> None:
    assert flag({"x": [value]}, "x") is want
    assert flag({"x": [value]}, "x", True) is want


def test_an_absent_value_is_the_default() -> None:
    assert flag({}, "x") is False
    assert flag({}, "x", True) is True


def test_exec_streams_default_to_stdout_and_stderr() -> None:
    assert stream_flags({}) == (False, True, True, False)
    assert stream_flags({"stdout": ["false"], "stderr": ["0"], "tty": [""]}) == (
        False,
        False,
        False,
        True,
    )
