"""The stored-value layout shared by the LMCache and SGLang adapters (no engine needed)."""

import numpy as np
import pytest

from kvmm.integrations import _framed_value as framed_value


def test_join_then_split_gives_back_header_and_bytes():
    prefix = framed_value.header_prefix(b"KVMMTST1", b'{"a": 1}')
    assert prefix.tobytes() == b"KVMMTST1" + (8).to_bytes(4, "little") + b'{"a": 1}'
    assert not prefix.flags.writeable
    data = np.arange(5, dtype=np.uint8)
    value = framed_value.join(prefix, data)
    assert value.size == 12 + 8 + 5
    header, payload = framed_value.split(value, b"KVMMTST1", "page")
    assert header == b'{"a": 1}' and payload.tolist() == [0, 1, 2, 3, 4]


def test_split_names_a_value_without_the_magic():
    value = framed_value.join(framed_value.header_prefix(b"KVMMTST1", b"{}"), np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="no kvmm chunk header"):
        framed_value.split(value, b"KVMMOTH1", "chunk")
