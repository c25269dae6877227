"""Matrix engine (emulator/matrix_engine.py): systolic cycle counts against SCALE-Sim 3.0.0.

The reference is tests/emulator/data/scalesim_results.jsonl (see the README
beside it): one line per SCALE-Sim run with its "Total Cycles".
"""
import json
from pathlib import Path

import pytest
import simpy

from emulator.config import MatrixEngineConfig
from emulator.matrix_engine import MatrixEngine, systolic_cycles

DATA = Path(__file__).parent / "data" / "scalesim_results.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def test_reference_data_covers_every_dataflow():
    assert len(ROWS) == 30
    assert {r["df"] for r in ROWS} == {"ws", "os", "is"}
    assert {(r["R"], r["C"]) for r in ROWS} == {(32, 32), (128, 128)}
    assert any(r["M"] != r["N"] or r["N"] != r["K"] for r in ROWS)  # not only square GEMMs


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['cfg']}-{r['layer']}-{r['M']}x{r['N']}x{r['K']}" for r in ROWS])
def test_systolic_cycles_equal_scalesim(row):
    got = systolic_cycles(row["M"], row["N"], row["K"], row["R"], row["C"], row["df"])
    assert got == row["compute_cycles"]


def test_dataflow_matters_for_rectangular_gemms():
    # 1000x300x700 on a 32x32 array: SCALE-Sim reports different cycles for ws and os.
    ws = systolic_cycles(1000, 300, 700, 32, 32, "ws")
    os_ = systolic_cycles(1000, 300, 700, 32, 32, "os")
    assert ws != os_
    # ws and is swap the roles of M and N.
    assert systolic_cycles(100, 300, 64, 32, 32, "is") == systolic_cycles(300, 100, 64, 32, 32, "ws")


def test_partial_folds_round_up():
    # One extra row of K needs a whole extra fold in ws.
    one = systolic_cycles(64, 32, 32, 32, 32, "ws")
    assert systolic_cycles(64, 32, 33, 32, 32, "ws") == 2 * (one + 1) - 1


@pytest.mark.parametrize("shape", [(0, 8, 8), (8, 0, 8), (8, 8, 0)])
def test_empty_gemm_takes_no_cycles(shape):
    assert systolic_cycles(*shape, 32, 32, "ws") == 0


def test_unknown_dataflow_is_rejected():
    with pytest.raises(ValueError, match="dataflow"):
        systolic_cycles(8, 8, 8, 4, 4, "rs")


def test_gemm_ns_is_cycles_over_clock():
    engine = MatrixEngine(simpy.Environment(), MatrixEngineConfig(rows=32, cols=32, dataflow="os"), clock_ghz=2.0)
    cycles = systolic_cycles(256, 256, 256, 32, 32, "os")
    assert cycles == 20351
    assert engine.gemm_ns(256, 256, 256) == pytest.approx(cycles / 2.0)
