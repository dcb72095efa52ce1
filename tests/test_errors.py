"""The shared argument checks of pagedkv_lib.validation."""
import numpy as np
import pytest

from pagedkv_lib.validation import check_ints, check_new_id, unhashable_id_error
from pagedkv_lib.errors import DuplicateRequestError


def test_check_ints_returns_python_ints_and_names_the_bad_item():
    out = check_ints("lengths", (np.int64(3), 4), minimum=0)
    assert out == [3, 4] and all(type(v) is int for v in out)
    with pytest.raises(ValueError, match=r"^lengths\[1\] must be an integer >= 0, got -2$"):
        check_ints("lengths", [3, -2], minimum=0)
    with pytest.raises(TypeError, match=r"^each token of p must be an integer in \[0, 9\], got 1.5"):
        check_ints("p", [1.5], minimum=0, maximum=9, each="each token of p")
    for bad in ("abc", b"ab", 7):
        with pytest.raises(TypeError, match=r"^lengths must be a sequence of token counts, got"):
            check_ints("lengths", bad, what="token counts")


def test_request_id_checks():
    check_new_id("request_id", "b", {"a": 1})
    with pytest.raises(TypeError, match="request_id must be a non-empty string"):
        check_new_id("request_id", "", {})
    with pytest.raises(DuplicateRequestError, match="'a' is already admitted; ids must be unique"):
        check_new_id("request_id", "a", {"a": 1}, "admitted")
    assert "(list, unhashable)" in str(unhashable_id_error("request_id", ["a"]))
