"""Property: over random run tables, no total exceeds the step and no op's time is counted twice."""
from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from kernel_advisor.recommend.engine import union_saving
from kernel_advisor.recommend.gain import HOST_GAPS, GainEstimate, gain_frac_of_step, in_step_time, profiled_to_step_factor, row_bucket

times = st.lists(st.floats(1e-7, 1e-1), min_size=1, max_size=8)


@given(times, st.floats(1e-6, 1e-1), st.data())
@settings(max_examples=200, deadline=None)
def test_total_is_bounded_by_the_step_and_counts_each_op_once(row_times, step_s, data):
    busy = sum(row_times)
    factor = profiled_to_step_factor(step_s, busy)
    gap = max(step_s - busy, 0.0)
    subjects = SimpleNamespace(run=SimpleNamespace(row_time_per_step_s=dict(enumerate(row_times)),
                                                   evidence={"host_gap_per_step_s": gap}))
    recs = []
    for _ in range(data.draw(st.integers(1, 6))):
        rows = {row_bucket(i): t * data.draw(st.floats(0.0, 2.0)) for i, t in enumerate(row_times)
                if data.draw(st.booleans())}
        if data.draw(st.booleans()):
            rows[HOST_GAPS] = gap * data.draw(st.floats(0.0, 1.5))
        est = in_step_time(GainEstimate(sum(rows.values()), rows, ""), factor)
        recs.append(SimpleNamespace(row_saving_per_step_s=est.row_saving_per_step_s))
    union = union_saving(recs, subjects, factor)
    for row, saving in union.items():  # each row once: its largest claim, never above its time
        assert saving <= max(r.row_saving_per_step_s.get(row, 0.0) for r in recs) + 1e-15
        cap = gap if row == HOST_GAPS else row_times[row.row_id] * factor
        assert saving <= cap * (1 + 1e-9)
    assert sum(union.values()) <= step_s * (1 + 1e-9)
    assert gain_frac_of_step(sum(union.values()), step_s) <= 1.0
