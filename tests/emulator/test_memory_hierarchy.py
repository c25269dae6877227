"""The memory hierarchy (emulator/memory.py, docs/hardware.md "Memory"): the cache description,
aliased operands read once, strided walks charged per sector, gathers per sector, GEMM traffic
from the tiling that fits the scratchpad and the cache."""
import pytest

from cost_helpers import BF16, F32, contiguous_strides, device, matmul, system
from emulator import config as C
from emulator import memory
from emulator.errors import ConfigError
from emulator.kernels import dtypes
from emulator.kernels.library import KERNELS, Operand
from test_cost_model import Rig

I64 = dtypes.INT64
BASE = 1 << 40   # operands with distinct, non-overlapping addresses


def at(slot, dtype, *shape, strides=None):
    if strides is None:
        strides = contiguous_strides(shape)
    return Operand(BASE + slot * (1 << 36), dtype, tuple(shape), tuple(strides))


def stream_ns(dev, nbytes):
    return nbytes / dev.hbm.bytes_per_ns


# -- the description ---------------------------------------------------------------------------

def test_presets_describe_their_cache():
    h200 = C.load_preset("h200").device.cache
    assert (h200.capacity_bytes, h200.line_bytes, h200.sector_bytes) == (50 << 20, 128, 32)
    for name in ("default", "tiny"):
        cache = C.load_preset(name).device.cache
        assert cache.capacity_bytes > 0 and cache.line_bytes % cache.sector_bytes == 0


@pytest.mark.parametrize("table, field", [
    ({"capacity_bytes": -1}, "device.cache.capacity_bytes"),
    ({"bandwidth_bytes_per_cycle": 0}, "device.cache.bandwidth_bytes_per_cycle"),
    ({"line_bytes": 100}, "device.cache.line_bytes"),          # not a multiple of the 32 B sector
    ({"sector_bytes": 1.5}, "device.cache.sector_bytes"),
    ({"ways": 8}, "device.cache.ways"),
])
def test_bad_cache_fields_name_the_dotted_field(table, field):
    with pytest.raises(ConfigError) as info:
        C.from_dict({"device": {"cache": table}})
    assert info.value.field == field


# -- aliasing ----------------------------------------------------------------------------------

def test_x_plus_x_reads_x_once_and_moves_less_than_x_plus_y():
    dev = device("default")
    n = 1 << 22
    out, x, y = at(0, F32, n), at(1, F32, n), at(2, F32, n)
    xx = KERNELS["binary"].cost(dev, "add", out, x, x, F32, 1.0)
    xy = KERNELS["binary"].cost(dev, "add", out, x, y, F32, 1.0)
    assert xy.nbytes == 3 * 4 * n and xx.nbytes == 2 * 4 * n
    assert xx.ns < xy.ns
    # In place (out is x): x is still read and written back, two transfers, not one.
    assert KERNELS["binary"].cost(dev, "add", x, x, y, F32, 1.0).nbytes == 3 * 4 * n


def test_overlapping_inputs_move_their_union():
    dev = device("default")
    n = 1 << 20
    x = at(1, F32, n + 1)
    lo = Operand(x.addr, F32, (n,), (1,))          # x[:-1]
    hi = Operand(x.addr + 4, F32, (n,), (1,))      # x[1:]
    cost = KERNELS["binary"].cost(dev, "add", at(0, F32, n), lo, hi, F32, 1.0)
    assert cost.nbytes == 4 * n + 4 * (n + 1)


def test_the_cost_cache_keys_on_aliasing():
    # Same kernel, shapes and strides: x + x and x + y must not share a cached cost.
    n = 1 << 20
    r = Rig(system("tiny"))
    r.run(0, r.launch("binary", "add", r.dev(0, (n,)), r.dev(8 << 20, (n,)), r.dev(8 << 20, (n,)), F32, 1.0),
          sem=1)
    r.wait(0, 1)
    r.run(0, r.launch("binary", "add", r.dev(0, (n,)), r.dev(8 << 20, (n,)), r.dev(16 << 20, (n,)), F32, 1.0),
          sem=2)
    r.wait(0, 2)
    first, second = r.trace()
    assert (first.nbytes, second.nbytes) == (2 * 4 * n, 3 * 4 * n)
    assert memory.alias_key([Operand(8, F32, (4,), (1,)), Operand(8, F32, (4,), (1,))]) == ((0, 1, 0),)
    assert memory.alias_key([Operand(8, F32, (4,), (1,)), Operand(24, F32, (4,), (1,))]) == ()
    assert memory.alias_key([Operand(0, F32, (4,), (1,)), Operand(12, F32, (4,), (1,))]) == ((0, 1, 12),)


# -- strided walks: lines and sectors ----------------------------------------------------------

def test_transposed_copy_pays_a_sector_per_element_when_its_sweep_misses_the_cache():
    dev = device("tiny")
    cache = dev.config.cache
    n = 16384                                    # a sweep touches n lines: 2 MiB, over the cache per core
    assert n * cache.line_bytes * dev.config.cores > cache.capacity_bytes
    size = 4 * n * n
    dst = at(0, F32, n, n)
    plain = KERNELS["copy"].cost(dev, dst, at(1, F32, n, n))
    transposed = KERNELS["copy"].cost(dev, dst, at(1, F32, n, n, strides=(1, n)))
    assert plain.nbytes == 2 * size
    # The line model's factor: each 4-byte element of the source moves a 32-byte sector.
    assert transposed.nbytes == size + size * cache.sector_bytes // 4
    assert transposed.ns == pytest.approx(plain.ns * (1 + cache.sector_bytes / 4) / 2, rel=0.01)


def test_transposed_copy_whose_sweep_fits_reads_hbm_once_but_loads_the_cache_per_sector():
    dev = device("tiny")
    cache = dev.config.cache
    n = 1024
    assert n * cache.line_bytes * dev.config.cores <= cache.capacity_bytes
    size = 4 * n * n
    dst = at(0, F32, n, n)
    plain = KERNELS["copy"].cost(dev, dst, at(1, F32, n, n))
    transposed = KERNELS["copy"].cost(dev, dst, at(1, F32, n, n, strides=(1, n)))
    assert transposed.nbytes == plain.nbytes == 2 * size
    assert transposed.cache_bytes == size + size * cache.sector_bytes // 4
    cache_ns = transposed.cache_bytes / (cache.bandwidth_bytes_per_cycle * dev.config.clock_ghz)
    assert transposed.ns >= cache_ns and transposed.ns >= plain.ns * 0.999
    # With a cache slower than the sector traffic needs, the transpose is bound by it.
    slow = device("tiny", device={"cache": {"bandwidth_bytes_per_cycle": 256}})
    slow_t = KERNELS["copy"].cost(slow, dst, at(1, F32, n, n, strides=(1, n)))
    assert slow_t.ns == pytest.approx(slow_t.cache_bytes / (256 * dev.config.clock_ghz), rel=0.02)
    assert slow_t.ns > 2 * KERNELS["copy"].cost(slow, dst, at(1, F32, n, n)).ns


def test_a_strided_slice_moves_the_sectors_its_elements_lie_in():
    dev = device("default")
    n = 1 << 12
    every_other = at(1, F32, n, n // 2, strides=(n, 2))   # x[:, ::2]: 8 bytes apart, holes between
    cost = KERNELS["copy"].cost(dev, at(0, F32, n, n // 2), every_other)
    assert cost.nbytes == 4 * n * n // 2 + 8 * n * n // 2


# -- gathers: sectors, not elements ------------------------------------------------------------

def _index_select(dev, rows, vocab, width, dtype=F32):
    table = at(1, dtype, vocab, width)
    out = at(0, dtype, rows, width)
    idx = Operand(BASE + 2 * (1 << 36), I64, (rows, width), (1, 0))
    return KERNELS["index_gather"].cost(dev, out, table, False, "", 1, 0, 1, idx, 0)


def test_gathered_rows_are_charged_per_sector():
    dev = device("tiny")
    sector = dev.config.cache.sector_bytes
    rows, vocab = 4096, 1 << 20                 # a table far over the cache: no reuse
    aligned = _index_select(dev, rows, vocab, 64)          # 256 B rows: 8 whole sectors
    assert aligned.nbytes == rows * 256 + rows * 64 * 4 + rows * 8
    ragged = _index_select(dev, rows, vocab, 6)            # 24 B rows, 24 B apart: up to 2 sectors
    assert ragged.nbytes == rows * 2 * sector + rows * 6 * 4 + rows * 8
    assert ragged.nbytes > 2 * rows * 6 * 4 + rows * 8    # what a per-element charge gave


def test_a_gather_of_single_elements_moves_a_sector_each():
    dev = device("tiny")
    sector = dev.config.cache.sector_bytes
    B, L, k = 64, 1 << 16, 128                  # torch.gather(x, 1, idx): x is (B, L), idx (B, k)
    table, out = at(1, F32, B, L), at(0, F32, B, k)
    idx = at(2, I64, B, k)
    cost = KERNELS["index_gather"].cost(dev, out, table, False, "", 1, L, 0, idx, 1)
    assert cost.nbytes == B * k * sector + out.nbytes + idx.nbytes


def test_a_table_that_fits_the_cache_is_read_from_hbm_at_most_once():
    dev = device("tiny")
    rows, vocab, width = 1 << 16, 256, 64        # 64 KiB table gathered 65536 times
    cost = _index_select(dev, rows, vocab, width)
    assert cost.nbytes == vocab * width * 4 + rows * width * 4 + rows * 8
    assert cost.cache_bytes > cost.nbytes       # the cache still delivers every gathered row


# -- GEMM tiling -------------------------------------------------------------------------------

def _once(M, N, K, item=2):
    return (M * K + K * N + M * N) * item


def test_gemm_operands_that_fit_the_cache_are_read_once():
    dev = device("h200")
    M = N = K = 2048                            # 24 MiB of bf16 operands, in a 50 MB cache
    assert matmul(dev, M, N, K).nbytes == _once(M, N, K)


def test_gemm_traffic_grows_when_operands_exceed_the_cache():
    big = device("h200")
    M = N = K = 8192
    cost = matmul(big, M, N, K)
    Tm, Tn = memory.gemm_tile(big, M, N, K, BF16)
    reread = M * K * 2 * -(-N // Tn) + K * N * 2 * -(-M // Tm) + M * N * 2   # no cache at all
    assert _once(M, N, K) < cost.nbytes <= reread
    assert cost.cache_bytes == reread           # the cache delivers A per tile column, B per tile row
    # A larger cache holds longer panels of A and B: fewer re-reads.
    larger = device("h200", device={"cache": {"capacity_bytes": 128 << 20}})
    assert _once(M, N, K) < matmul(larger, M, N, K).nbytes < cost.nbytes
    # Still compute-bound: the projection stays within 2% of the flops on the engines.
    roomy = device("h200", device={"cache": {"capacity_bytes": 1 << 40}})
    assert matmul(roomy, M, N, K).nbytes == _once(M, N, K)
    assert cost.bound == "compute" and cost.ns == pytest.approx(matmul(roomy, M, N, K).ns, rel=0.02)


def test_a_decode_gemv_reads_its_weight_once():
    dev = device("h200")
    cost = matmul(dev, 1, 14336, 4096)          # 117 MB of weight, over the cache
    assert cost.nbytes == _once(1, 14336, 4096)
    assert cost.bound == "memory"


def test_the_scratchpad_tile_fits_the_scratchpad():
    for preset in ("default", "tiny", "h200"):
        dev = device(preset)
        Tm, Tn = memory.gemm_tile(dev, 1 << 14, 1 << 14, 1 << 14, BF16)
        rows = dev.config.matrix_engine.rows
        assert Tm * Tn * 4 + 2 * (Tm + Tn) * rows * 2 <= dev.config.scratchpad.bytes_per_core
        assert Tm % rows == 0 and Tn % dev.config.matrix_engine.cols == 0


def test_resident_operands_move_nothing_and_count_once():
    dev = device("default", device={"scratchpad": {"operands_resident": True}})
    cost = matmul(dev, 4096, 4096, 4096)
    assert cost.nbytes == cost.cache_bytes == _once(4096, 4096, 4096)
    assert "dev0.hbm" not in cost.engines


# -- the roofline still holds with the bytes the model says -------------------------------------

@pytest.mark.parametrize("make", [
    lambda dev: KERNELS["copy"].cost(dev, at(0, F32, 4096, 4096), at(1, F32, 4096, 4096, strides=(1, 4096))),
    lambda dev: _index_select(dev, 4096, 1 << 20, 6),
    lambda dev: matmul(dev, 8192, 8192, 8192),
    lambda dev: matmul(dev, 64, 65536, 8192),
])
@pytest.mark.parametrize("preset", ["tiny", "h200"])
@pytest.mark.parametrize("fidelity", ["kernel", "tile"])
def test_time_is_at_least_each_level_of_the_hierarchy(make, preset, fidelity):
    dev = device(preset, fidelity=fidelity)
    cost = make(dev)
    cfg = dev.config
    assert cost.ns >= stream_ns(dev, cost.nbytes) * 0.999
    assert cost.ns >= cost.cache_bytes / (cfg.cache.bandwidth_bytes_per_cycle * cfg.clock_ghz) * 0.999
