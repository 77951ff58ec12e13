"""Multi-GPU profiling: torchrun launch, per-rank capture, communication analysis, rank merge.

Flow (docs/distributed.md): `launch` runs `torch.distributed.run` with one `worker` per
rank; each worker profiles its own steps and writes rank<r>/ into the run's temporary
directory; `comms` and `overlap` read the communication kernels of each rank's trace;
`merge` combines the ranks into ranks.json and run.json's "distributed" key.
"""
