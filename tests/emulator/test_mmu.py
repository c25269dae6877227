"""MMU (emulator/mmu.py): page tables, translation, page faults."""
import pytest
import simpy
from hypothesis import given, settings, strategies as st

from emulator.config import MmuConfig
from emulator.errors import EmulatorBug, PageFault
from emulator.mmu import MMU

PAGE = 64 * 1024
VA = 1 << 40


@pytest.fixture
def env():
    return simpy.Environment()


@pytest.fixture
def mmu(env):
    m = MMU(env, MmuConfig(page_size_bytes=PAGE), device_index=0)
    m.create_address_space(1)
    return m


def test_map_translate_unmap(mmu):
    mmu.map(1, VA, 3 * PAGE, 2 * PAGE)
    assert mmu.translate(1, VA, 1) == 3 * PAGE
    assert mmu.translate(1, VA + 100, 8) == 3 * PAGE + 100
    assert mmu.translate(1, VA + 2 * PAGE - 4, 4) == 5 * PAGE - 4  # last bytes
    assert mmu.translate(1, VA, 2 * PAGE) == 3 * PAGE              # the whole extent
    mmu.unmap(1, VA)
    with pytest.raises(PageFault):
        mmu.translate(1, VA, 1)


def test_several_mappings_translate_independently(mmu):
    mmu.map(1, VA + 4 * PAGE, 0, PAGE)
    mmu.map(1, VA, 10 * PAGE, PAGE)
    mmu.map(1, VA + 2 * PAGE, 7 * PAGE, 2 * PAGE)
    assert mmu.translate(1, VA + 5, 1) == 10 * PAGE + 5
    assert mmu.translate(1, VA + 3 * PAGE, 16) == 8 * PAGE
    assert mmu.translate(1, VA + 4 * PAGE + 1, 1) == 1
    with pytest.raises(PageFault):
        mmu.translate(1, VA + PAGE, 1)  # the hole between the first two


def test_page_fault_outside_any_mapping(mmu, env):
    mmu.map(1, VA, 0, PAGE)
    env.run(until=42)
    with pytest.raises(PageFault) as info:
        mmu.translate(1, VA + 8 * PAGE, 4, unit="dma1")
    rec = info.value.record
    assert (rec.kind, rec.unit, rec.device, rec.address, rec.sim_time_ns) == ("page_fault", "dma1", 0, VA + 8 * PAGE, 42)
    assert "address space 1" in rec.detail
    assert mmu.page_faults == 1


def test_page_fault_below_the_first_mapping(mmu):
    mmu.map(1, VA, 0, PAGE)
    with pytest.raises(PageFault):
        mmu.translate(1, VA - 1, 1)


def test_page_fault_for_access_straddling_end_of_mapping(mmu):
    mmu.map(1, VA, 0, PAGE)
    mmu.translate(1, VA + PAGE - 8, 8)  # ends exactly at the end: fine
    with pytest.raises(PageFault) as info:
        mmu.translate(1, VA + PAGE - 8, 9)
    assert info.value.record.address == VA + PAGE - 8


def test_straddling_two_adjacent_mappings_faults(mmu):
    # Contiguous in VA but not in PA: one access may not cross them.
    mmu.map(1, VA, 0, PAGE)
    mmu.map(1, VA + PAGE, 5 * PAGE, PAGE)
    with pytest.raises(PageFault):
        mmu.translate(1, VA + PAGE - 4, 8)


def test_address_spaces_are_separate(mmu):
    mmu.create_address_space(2)
    mmu.map(1, VA, 0, PAGE)
    mmu.map(2, VA, 4 * PAGE, PAGE)
    assert mmu.translate(1, VA + 16, 4) == 16
    assert mmu.translate(2, VA + 16, 4) == 4 * PAGE + 16
    mmu.unmap(2, VA)
    with pytest.raises(PageFault):
        mmu.translate(2, VA, 4)
    assert mmu.translate(1, VA, 4) == 0


def test_unknown_or_destroyed_address_space_faults(mmu):
    mmu.map(1, VA, 0, PAGE)
    with pytest.raises(PageFault):
        mmu.translate(7, VA, 1)
    mmu.destroy_address_space(1)
    with pytest.raises(PageFault):
        mmu.translate(1, VA, 1)


def test_creating_an_address_space_twice_is_a_bug(mmu):
    with pytest.raises(EmulatorBug):
        mmu.create_address_space(1)


@pytest.mark.parametrize("va, pa, length", [
    (VA + 4096, 0, PAGE),     # unaligned virtual address
    (VA, 100, PAGE),          # unaligned physical address
    (VA, 0, PAGE + 1),        # length not a page multiple
    (VA, 0, 0),               # empty
])
def test_unaligned_mapping_is_rejected(mmu, va, pa, length):
    with pytest.raises(EmulatorBug):
        mmu.map(1, va, pa, length)
    with pytest.raises(PageFault):  # nothing was mapped
        mmu.translate(1, VA, 1)


@pytest.mark.parametrize("va, length", [
    (VA, PAGE),                   # same start
    (VA + PAGE, PAGE),            # inside
    (VA - PAGE, 2 * PAGE),        # runs into it
    (VA - PAGE, 4 * PAGE),        # covers it
])
def test_overlapping_mapping_is_rejected(mmu, va, length):
    mmu.map(1, VA, 0, 2 * PAGE)
    with pytest.raises(EmulatorBug):
        mmu.map(1, va, 8 * PAGE, length)
    assert mmu.translate(1, VA + PAGE, 1) == PAGE


def test_unmap_must_name_the_start_of_a_mapping(mmu):
    mmu.map(1, VA, 0, 2 * PAGE)
    with pytest.raises(EmulatorBug):
        mmu.unmap(1, VA + PAGE)
    assert mmu.translate(1, VA, 1) == 0


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 15), st.integers(1, 3)), max_size=8),
       st.integers(0, 20 * PAGE), st.integers(1, 3 * PAGE))
def test_translate_matches_a_reference_model(layout, offset, nbytes):
    mmu = MMU(simpy.Environment(), MmuConfig(page_size_bytes=PAGE), 0)
    mmu.create_address_space(1)
    extents = []
    for page, pages in layout:
        va, length = VA + page * PAGE, pages * PAGE
        if any(va < s + n and s < va + length for s, n, _ in extents):
            continue
        pa = (len(extents) + 1) * 8 * PAGE
        mmu.map(1, va, pa, length)
        extents.append((va, length, pa))
    va = VA + offset
    inside = [pa + va - s for s, n, pa in extents if s <= va and va + nbytes <= s + n]
    if inside:
        assert mmu.translate(1, va, nbytes) == inside[0]
    else:
        with pytest.raises(PageFault):
            mmu.translate(1, va, nbytes)
