"""The kernel benchmark's sweep verdicts and tables (benchmarks/bench_kernels.py), on rows
built by hand: no GPU needed."""
import math

from benchmarks.bench_kernels import Row, loss_reason, markdown


def _row(triton_us, eager_us, triton_gpu_us=math.nan, eager_gpu_us=math.nan, part="b"):
    return Row(part, "cross_entropy", "fwd", "bfloat16", 64, 1024, 131072.0, triton_us * 1e-6,
               eager_us * 1e-6, 20e-6, 131072.0 / (triton_us * 1e-6), math.nan,
               triton_graph_s=triton_gpu_us * 1e-6, eager_graph_s=eager_gpu_us * 1e-6)


def test_loss_reason_hand_worked():
    # wins (30 us against 40 us): no reason to give
    assert loss_reason(_row(30.0, 40.0, 1.3, 5.0)) == ""
    # loses 34.8 us to 11.5 us, yet its kernel takes 1.3 us on the GPU against eager's 5.0:
    # the host's launch is what costs
    assert loss_reason(_row(34.8, 11.5, 1.3, 5.0)) == "host"
    # loses, and the kernel itself is slower (6.0 us against 5.0): the kernel
    assert loss_reason(_row(34.8, 11.5, 6.0, 5.0)) == "kernel"
    # 4.7 us against 4.4: 4.4 / 4.7 = 0.936 of eager's speed, a loss; 4.6: 0.957, a tie
    assert loss_reason(_row(4.7, 4.4, 1.3, 1.3)) == "kernel"
    assert loss_reason(_row(4.6, 4.4, 1.3, 1.3)) == "tie"
    # no CUDA-graph time (capture failed): no verdict rather than a guess
    assert loss_reason(_row(34.8, 11.5)) == ""


def test_markdown_lists_every_row_with_its_verdict():
    env = {"device": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0", "timing": "do_bench",
           "copy_bytes_per_s": {"bfloat16": 4.1e12}, "copy_bytes_per_s_noflush": {}}
    a = Row("a", "softmax", "fwd", "bfloat16", 16384, 8192, 2**29, 130e-6, 500e-6, math.nan,
            2**29 / 130e-6, 0.99, 120e-6, 1.01)
    text = markdown(env, [a, _row(34.8, 11.5, 1.3, 5.0)])
    assert "| softmax | fwd | bfloat16 | 512 MiB | 130.0 | 4130 | 0.99 | 120.0 | 1.01 |" in text
    assert text.rstrip().endswith("| 1.3 | 5.0 | host |")


def test_render_from_saved_json_round_trips(tmp_path):
    import json

    from benchmarks.bench_kernels import _json_row, load_json, main

    env = {"device": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0", "timing": "do_bench",
           "copy_bytes_per_s": {"bfloat16": 4.1e12}}
    rows = [_row(34.8, 11.5, 1.3, 5.0), _row(30.0, 40.0)]  # the second has NaN graph times
    saved = tmp_path / "bench_kernels.json"
    saved.write_text(json.dumps({"environment": env, "rows": [_json_row(r) for r in rows]}))
    assert load_json(saved)[1][0] == rows[0]
    assert main(["--out", str(tmp_path / "md"), "--render", str(saved)]) == 0
    assert (tmp_path / "md" / "bench_kernels.md").read_text() == markdown(env, rows)
