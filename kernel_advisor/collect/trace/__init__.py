"""A chrome trace as column tables, read in one streaming pass; see read.py for how."""
from kernel_advisor.collect.trace.collectives import GLOO_PREFIX, is_comm_op, is_nccl_kernel
from kernel_advisor.collect.trace.read import read_trace
from kernel_advisor.collect.trace.tables import (COLLECTIVE_COLUMNS, TABLE_COLUMNS, TABLE_OF_CATEGORY, TraceData,
                                                 shapes_recorded)

__all__ = ["COLLECTIVE_COLUMNS", "GLOO_PREFIX", "TABLE_COLUMNS", "TABLE_OF_CATEGORY", "TraceData", "is_comm_op", "is_nccl_kernel",
           "read_trace", "shapes_recorded"]
