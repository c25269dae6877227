"""The Perfetto/Chrome trace export of the firmware timeline (runtime/report.py)."""
import json

import numpy as np

from runtime import TensorRef
from runtime.report import chrome_trace, write_chrome_trace


def test_trace_has_one_complete_event_per_command(rt, tmp_path):
    data = np.arange(256, dtype=np.float32)
    dev = rt.malloc(0, data.nbytes)
    ref = TensorRef(False, 0, dev, 8, (256,), (1,))
    stream = rt.stream(0)
    rt.memcpy(ref, TensorRef(True, -1, data.ctypes.data, 8, (256,), (1,)), stream)
    rt.launch("binary", ("add", ref, ref, ref, 8, 1), stream)
    rt.stream_synchronize(stream)

    path = tmp_path / "trace.json"
    write_chrome_trace(rt, path)
    trace = json.loads(path.read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in complete] == ["memcpy_h2d", "binary.add"]
    copy, add = complete
    assert copy["dur"] > 0 and add["dur"] > 0
    assert add["ts"] >= copy["ts"] + copy["dur"]          # same stream: in order
    assert copy["args"]["bytes"] == data.nbytes
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert {"emu:0", "dma", "vector_engine"} <= names
    assert chrome_trace(rt) == trace
