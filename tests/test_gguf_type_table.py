"""The GGUF tensor types sglc knows (runtime/model/gguf/tensor_types.py's own table, so that reading
a file does not import gguf-py) are gguf-py's: the same ids, names and block sizes."""
from __future__ import annotations

import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from sglc_runtime.model.gguf.tensor_types import GGML_TYPES, SUPPORTED_TYPES, block_shape, type_name


@pytest.mark.parametrize("type_id", sorted(GGML_TYPES))
def test_each_type_is_gguf_pys(type_id: int) -> None:
    name, per, nbytes = GGML_TYPES[type_id]
    theirs = GGMLQuantizationType(type_id)
    assert theirs.name == name
    assert GGML_QUANT_SIZES[theirs] == (per, nbytes) == block_shape(name)
    assert type_name(type_id) == name


def test_every_type_sglc_reads_is_in_the_table_and_unknown_ids_are_refused() -> None:
    names = {name for name, _, _ in GGML_TYPES.values()}
    assert set(SUPPORTED_TYPES) <= names
    with pytest.raises(ValueError, match="ggml type id"):
        type_name(999)
