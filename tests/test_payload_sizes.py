"""The byte size of a payload column (``batch.payload_nbytes``): the C loop and the Python sum agree.

Metrics size every stage's output with it; the C loop (``wirepipe._sizes``) is built at install
and the Python sum is the fallback where no compiler was there, so both must give one answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wirepipe._sizes import payload_nbytes as c_nbytes  # the test command's install builds it
from wirepipe.core import batch

payloads = st.one_of(st.binary(max_size=600), st.binary(max_size=600).map(bytearray),
                     st.binary(max_size=600).map(memoryview))


@given(st.lists(payloads, max_size=50))
def test_the_c_loop_and_the_python_sum_agree(values: list[Any]) -> None:
    expected = sum(memoryview(v).nbytes for v in values) if values else None
    assert c_nbytes(values) == expected
    assert batch._python_nbytes(values) == expected
    assert batch.payload_nbytes(values) == expected


@pytest.mark.parametrize("values", [
    [{"x": 1}],                  # objects (before serialize, after deserialize)
    [b"abc", "text"],            # a column that is not all payloads
    [b"a" * 300, None],          # ... past the Python sum's join threshold
    [],
])
def test_a_column_that_is_not_payloads_has_no_size(values: list[Any]) -> None:
    assert c_nbytes(values) is None
    assert batch._python_nbytes(values) is None
    assert batch.payload_nbytes(values) is None


def test_a_memoryview_counts_its_bytes_not_its_items() -> None:
    view = memoryview(bytes(12)).cast("I")  # three 4-byte items
    assert c_nbytes([view]) == batch._python_nbytes([view]) == 12


def test_payload_nbytes_runs_the_c_loop_when_it_was_built() -> None:
    assert batch._sizes is c_nbytes
    assert batch.payload_nbytes((b"ab", b"c")) == 3  # not a list: the Python sum


def test_the_c_loop_refuses_what_is_not_a_list() -> None:
    with pytest.raises(TypeError, match="takes a list"):
        c_nbytes((b"a",))  # type: ignore[arg-type]
