"""The one dtype table (kernel_advisor/dtypes.py): names checked against what torch.profiler
records, sizes against torch's itemsize, and the other packages reading it."""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from kernel_advisor import dtypes
from kernel_advisor.analyze.costs import dtypes as cost_dtypes
from kernel_advisor.distributed import comms
from kernel_advisor.dtypes import PROFILER_TYPES, profiler_dtype_name
from kernel_advisor.recommend.shapes import tensor_args

# The dtypes the table names (profiler names, ScalarType names and enum codes all lead to these).
NAMED = sorted(set(dtypes.PROFILER_NAMES.values()) | set(dtypes.SCALAR_TYPE_NAMES.values())
               | set(dtypes.SCALAR_TYPE_CODES.values()))


def torch_itemsize(name: str) -> int:
    return torch.empty((), dtype=getattr(torch, name)).element_size()


@pytest.fixture(scope="module")
def recorded_types() -> dict[str, str]:
    """torch dtype name -> the "Input type" torch.profiler records for a tensor of it."""
    tensors = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex32 is "experimental"
        for name in NAMED:
            tensors[name] = torch.empty((2,), dtype=getattr(torch, name))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for x in tensors.values():
            torch.ops.aten.alias(x)
    events = [e for e in prof.events() if e.name == "aten::alias"]
    assert len(events) == len(tensors)
    return {name: e.input_dtypes[0] for name, e in zip(tensors, events)}


def test_every_named_dtype_is_a_torch_dtype():
    assert all(isinstance(getattr(torch, n, None), torch.dtype) for n in NAMED)


def test_profiler_names_are_what_the_profiler_records(recorded_types):
    # Each dtype the table knows is recorded under a name the table maps back to it.
    wrong = {n: t for n, t in recorded_types.items() if dtypes.dtype_name(t) != n}
    assert not wrong
    assert set(recorded_types.values()) <= set(dtypes.PROFILER_NAMES)


def test_every_name_the_profiler_gives_has_torchs_itemsize(recorded_types):
    for name, recorded in recorded_types.items():
        size = torch_itemsize(name)
        assert size == getattr(torch, name).itemsize
        assert dtypes.itemsize_bytes(recorded) == size, recorded
        assert dtypes.itemsize_bytes(name) == size and dtypes.ITEMSIZE_BYTES[name] == size
        assert cost_dtypes.checked_itemsize_bytes(cost_dtypes.normalize_dtype(recorded)) == size
        assert comms.itemsize_bytes_or_nan(recorded) == size


@pytest.mark.parametrize("scalar_type,torch_name", sorted(dtypes.SCALAR_TYPE_NAMES.items()))
def test_scalar_type_names_match_torch(scalar_type, torch_name):
    # A tensor's legacy type name is torch.<c10::ScalarType name>Tensor (torch.FloatTensor).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        legacy = torch.empty(1, dtype=getattr(torch, torch_name)).type()
    assert legacy == f"torch.{scalar_type}Tensor"
    assert dtypes.dtype_name(scalar_type) == torch_name
    assert comms.itemsize_bytes_or_nan(scalar_type) == torch_itemsize(torch_name)


def test_scalar_type_codes_are_what_the_profiler_records():
    # A dtype= argument is recorded as its c10::ScalarType value in "Concrete Inputs".
    with warnings.catch_warnings(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        warnings.simplefilter("ignore")
        for name in dtypes.SCALAR_TYPE_CODES.values():
            torch.ops.aten.empty.memory_format([1], dtype=getattr(torch, name))
    recorded = [int(e.concrete_inputs[1]) for e in prof.events() if e.name == "aten::empty"]
    assert recorded == list(dtypes.SCALAR_TYPE_CODES)
    assert all(dtypes.dtype_from_code(c) == n for c, n in dtypes.SCALAR_TYPE_CODES.items())


def test_sizes_cover_every_torch_dtype():
    every = {str(getattr(torch, n)).removeprefix("torch.") for n in dir(torch)
             if isinstance(getattr(torch, n), torch.dtype)}
    assert set(dtypes.ITEMSIZE_BYTES) == every
    assert all(dtypes.ITEMSIZE_BYTES[n] == getattr(torch, n).itemsize for n in every)


def test_unknown_names_have_no_size():
    for name in ("scalar", "", "Scalar", "TensorList", "Tensor", "no_such_dtype", "__class__"):
        assert dtypes.itemsize_bytes(name) is None, name
        assert math.isnan(comms.itemsize_bytes_or_nan(name))
    assert dtypes.itemsize_bytes(None) is None and not dtypes.is_floating(None)


def test_attribution_names_come_from_the_one_table():
    assert all(PROFILER_TYPES[k] == v for k, v in dtypes.PROFILER_NAMES.items())
    assert (profiler_dtype_name("Scalar"), profiler_dtype_name(""), profiler_dtype_name("c10::Float8_e4m3fnuz")) == \
        ("scalar", "", "float8_e4m3fnuz")


def test_recommend_sizes_tensors_with_the_table():
    args = tensor_args([[2, 3], [4], []], ["bfloat16", "c10::Half", "scalar"])
    assert [(a.shape, a.nbytes) for a in args] == [((2, 3), 12), ((4,), 8)]
    assert tensor_args([[8]], ["float8_e5m2fnuz"])[0].nbytes == 8
