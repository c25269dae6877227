"""torch.save / torch.load with emu tensors, each scenario in a fresh interpreter.

The emulated system is process-global, and a checkpoint must load in a
process that never saw the saved tensors, so every check runs in its own
subprocess (EMU_PRESET=tiny). One module-scoped subprocess writes the
checkpoints (emu tensors on both devices, views sharing storage, a module's
state_dict and the whole module, a CPU checkpoint) plus CPU reference copies;
each test then loads them with a different ``map_location``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# Shared by the saving and the loading interpreters: the model class (a whole-module
# checkpoint pickles it as __main__.Net) and the comparison helpers.
PRELUDE = textwrap.dedent("""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.bn = nn.BatchNorm1d(3)
            self.register_buffer("steps", torch.arange(5, dtype=torch.int64))

        def forward(self, x):
            return self.bn(self.fc(x))

    def same(a, b, what):
        assert a.dtype == b.dtype, (what, a.dtype, b.dtype)
        assert a.shape == b.shape, (what, a.shape, b.shape)
        a, b = a.cpu(), b.cpu()
        if a.is_complex():  # bit patterns: NaN parts compare equal, -0.0 does not equal 0.0
            a, b = torch.view_as_real(a), torch.view_as_real(b)
        if a.dtype.is_floating_point or a.dtype in (torch.uint16, torch.uint32, torch.uint64):
            bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
            a, b = a.contiguous().view(bits), b.contiguous().view(bits)
        assert torch.equal(a, b), (what, a, b)

    def shares(a, b):
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
""")

SAVE = PRELUDE + textwrap.dedent("""
    torch.manual_seed(0)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6).to("emu:0")
    base.add_(0.5)  # still queued on the device when torch.save runs
    view = base[1:3, ::2]
    # (A dtype view of base cannot go in the same file: torch.save refuses that on CPU too.)
    tensors = {
        "base": base,
        "view": view,                      # a strided view sharing base's storage
        "tv": base.t(),                    # a transposed view
        "list": [view, base[3]],
        "t1": torch.randn(3, 5).to("emu:1"),
        "ints": torch.arange(10, dtype=torch.int64).to("emu:0"),
        "bf16": torch.randn(7).to(torch.bfloat16).to("emu:0"),
        "bool": (torch.arange(6) % 2 == 0).to("emu:1"),
        "scalar": torch.tensor(3.25, device="emu:1"),
        "empty": torch.empty(0, 3, device="emu:0"),
        # the storage dtypes, with their extremes
        "u16": torch.tensor([0, 1, 65535], dtype=torch.uint16).to("emu:0"),
        "u32": torch.tensor([0, 2**31, 2**32 - 1], dtype=torch.uint32).to("emu:1"),
        "u64": torch.tensor([0, 2**63, 2**64 - 1], dtype=torch.uint64).to("emu:0"),
        "c64": torch.tensor([1 + 2j, complex(float("inf"), float("nan")), complex(-0.0, 3)],
                            dtype=torch.complex64).to("emu:0"),
        "c128": torch.randn(2, 3, dtype=torch.complex128).to("emu:1").t(),
    }
    torch.save(tensors, "tensors.pt")

    def to_cpu(x):
        if isinstance(x, list):
            return [to_cpu(v) for v in x]
        return x.cpu().clone()  # independent copies: the reference shares nothing
    torch.save({k: to_cpu(v) for k, v in tensors.items()}, "tensors_ref.pt")

    net = Net()
    net(torch.randn(8, 4))  # non-trivial BatchNorm running stats
    net = net.to("emu:1")
    torch.save(net.state_dict(), "state.pt")
    torch.save(net, "module.pt")
    torch.save({k: v.cpu() for k, v in net.state_dict().items()}, "state_ref.pt")

    cpu_base = torch.arange(10.0)
    torch.save({"w": torch.randn(3, 3), "base": cpu_base, "view": cpu_base[2::3]}, "cpu_tensors.pt")
    torch.save(Net().state_dict(), "cpu_state.pt")

    # Same-process round trip: devices and sharing come back as saved.
    loaded = torch.load("tensors.pt")
    assert loaded["base"].device == torch.device("emu", 0), loaded["base"].device
    assert loaded["t1"].device == torch.device("emu", 1), loaded["t1"].device
    assert shares(loaded["view"], loaded["base"])
    print("SAVED")
""")

CHECK_TENSORS = textwrap.dedent("""
    def check_tensors(loaded, ref, device_of):
        for key in ["base", "view", "tv", "t1", "ints", "bf16", "bool", "scalar", "empty",
                    "u16", "u32", "u64", "c64", "c128"]:
            want = torch.device(device_of(key))
            assert loaded[key].device == want, (key, loaded[key].device, want)
            same(loaded[key], ref[key], key)
        same(loaded["list"][0], ref["list"][0], "list[0]")
        same(loaded["list"][1], ref["list"][1], "list[1]")
        # Views keep their geometry and their storage sharing.
        assert loaded["view"].stride() == (6, 2) and loaded["view"].storage_offset() == 6
        assert loaded["tv"].stride() == (1, 6)
        assert loaded["c128"].stride() == (1, 3)
        for key in ["view", "tv"]:
            assert shares(loaded[key], loaded["base"]), key
        assert shares(loaded["list"][0], loaded["base"]) and shares(loaded["list"][1], loaded["base"])
        assert loaded["list"][0].data_ptr() == loaded["view"].data_ptr()
        assert not shares(loaded["t1"], loaded["base"])
        # And a write through the loaded base is seen by the loaded views.
        loaded["base"][1, 0] = -42.0
        assert loaded["view"][0, 0].item() == -42.0
        assert loaded["tv"][0, 1].item() == -42.0
        assert loaded["list"][0][0, 0].item() == -42.0
""")


def _run(code: str, cwd, timeout: int = 180) -> str:
    env = dict(os.environ, EMU_PRESET="tiny")
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("emu_ckpt")
    out = _run(SAVE, path)
    assert "SAVED" in out
    return path


def _load(ckpt, body: str) -> None:
    code = PRELUDE + CHECK_TENSORS + textwrap.dedent(body) + "\nprint('LOADED')\n"
    assert "LOADED" in _run(code, ckpt)


def test_load_without_map_location_keeps_devices(ckpt):
    _load(ckpt, """
        loaded = torch.load("tensors.pt")
        ref = torch.load("tensors_ref.pt")
        on1 = {"t1", "bool", "scalar", "u32", "c128"}
        check_tensors(loaded, ref, lambda k: "emu:1" if k in on1 else "emu:0")
    """)


@pytest.mark.parametrize("where", ['"emu"', '"emu:1"', '"cpu"', 'torch.device("emu", 0)',
                                   '{"emu:1": "emu:0"}', 'lambda storage, loc: storage'],
                         ids=["emu", "emu1", "cpu", "device_emu0", "dict_1_to_0", "callable_cpu"])
def test_load_tensors_map_location(ckpt, where):
    expected = {'"emu"': "emu:0", '"emu:1"': "emu:1", '"cpu"': "cpu", 'torch.device("emu", 0)': "emu:0",
                '{"emu:1": "emu:0"}': "emu:0", 'lambda storage, loc: storage': "cpu"}[where]
    _load(ckpt, f"""
        loaded = torch.load("tensors.pt", map_location={where})
        ref = torch.load("tensors_ref.pt")
        check_tensors(loaded, ref, lambda k: {expected!r})
    """)


def test_load_map_location_emu_uses_current_device(ckpt):
    """Like "cuda", a bare "emu" means the current device."""
    _load(ckpt, """
        ref = torch.load("tensors_ref.pt")
        with torch.emu.device(1):
            loaded = torch.load("tensors.pt", map_location="emu")
        check_tensors(loaded, ref, lambda k: "emu:1")
    """)


def test_state_dict_and_whole_module(ckpt):
    _load(ckpt, """
        ref = torch.load("state_ref.pt")
        sd = torch.load("state.pt")
        assert set(sd) == set(ref)
        for k in ref:
            assert sd[k].device == torch.device("emu", 1), (k, sd[k].device)
            same(sd[k], ref[k], k)
        assert sd["bn.num_batches_tracked"].dtype == torch.int64

        # Into an emu:0 model and a CPU model.
        net0 = Net().to("emu:0")
        net0.load_state_dict(sd)
        for k, v in net0.state_dict().items():
            assert v.device == torch.device("emu", 0), k
            same(v, ref[k], k)
        net_cpu = Net()
        net_cpu.load_state_dict(torch.load("state.pt", map_location="cpu"))
        for k, v in net_cpu.state_dict().items():
            same(v, ref[k], k)

        # The whole pickled module, remapped to emu:0, runs and matches the CPU one.
        net = torch.load("module.pt", map_location="emu:0", weights_only=False)
        assert isinstance(net, Net)
        assert all(p.device == torch.device("emu", 0) for p in net.parameters())
        for k, v in net.state_dict().items():
            same(v, ref[k], k)
        net.eval(); net_cpu.eval()
        x = torch.randn(5, 4)
        with torch.no_grad():
            torch.testing.assert_close(net(x.to("emu:0")).cpu(), net_cpu(x), rtol=1e-5, atol=1e-5)
        net1 = torch.load("module.pt", weights_only=False)
        assert all(p.device == torch.device("emu", 1) for p in net1.parameters())
    """)


def test_cpu_checkpoint_onto_emu(ckpt):
    _load(ckpt, """
        ref = torch.load("cpu_tensors.pt")
        for where, dev in [("emu", "emu:0"), ("emu:1", "emu:1"), (torch.device("emu", 1), "emu:1")]:
            loaded = torch.load("cpu_tensors.pt", map_location=where)
            for k in ref:
                assert loaded[k].device == torch.device(dev), (where, k, loaded[k].device)
                same(loaded[k], ref[k], k)
            assert shares(loaded["view"], loaded["base"])
            assert loaded["view"].stride() == (3,) and loaded["view"].storage_offset() == 2
        # A CPU-trained state_dict onto an emu model, both ways of doing it.
        sd_cpu = torch.load("cpu_state.pt")
        net = Net().to("emu:1")
        net.load_state_dict(sd_cpu)
        for k, v in net.state_dict().items():
            assert v.device == torch.device("emu", 1)
            same(v, sd_cpu[k], k)
        sd_emu = torch.load("cpu_state.pt", map_location="emu:0")
        assert all(v.device == torch.device("emu", 0) for v in sd_emu.values())
        for k in sd_cpu:
            same(sd_emu[k], sd_cpu[k], k)
    """)


def test_save_load_in_memory_and_resave(tmp_path):
    """Loaded emu tensors can be saved again (emu:1 -> file -> emu:0 -> file -> cpu)."""
    code = PRELUDE + textwrap.dedent("""
        import io
        a = torch.arange(12, dtype=torch.int32).reshape(3, 4).to("emu:1")
        buf = io.BytesIO()
        torch.save({"a": a, "row": a[1]}, buf)
        buf.seek(0)
        b = torch.load(buf, map_location="emu:0")
        assert b["a"].device == torch.device("emu", 0)
        assert shares(b["a"], b["row"])
        torch.save(b, "resaved.pt")
        c = torch.load("resaved.pt", map_location="cpu")
        same(c["a"], torch.arange(12, dtype=torch.int32).reshape(3, 4), "a")
        assert shares(c["a"], c["row"]) and c["row"].storage_offset() == 4
        d = torch.load("resaved.pt")
        assert d["a"].device == torch.device("emu", 0)
        # A bad device index is a clear error, not a crash.
        try:
            torch.load("resaved.pt", map_location="emu:7")
        except RuntimeError as err:
            assert "device" in str(err).lower(), err
        else:
            raise AssertionError("map_location='emu:7' should fail with 2 devices")
        print("LOADED")
    """)
    assert "LOADED" in _run(code, tmp_path)
