"""Measuring the machine: copy bandwidth, matmul throughput and all-reduce bus bandwidth (`advisor calibrate`)."""
