"""Path accounting, the host fallback policy, telemetry and decompositions (issue #6).

- One path per op instance: native, composite, decomposition, host_fallback, rejection, each
  counted once; the ops a composite or decomposition runs count as what they are.
- The policy: EMU_HOST_FALLBACK (a subprocess), torch.emu.host_fallback(...) blocks (nesting,
  restoring, winning over set_host_fallback), warn-once and allow. Under forbid an op raises
  torch_plugin.HostFallbackError naming it, before anything is copied or written: an in-place
  op's tensor keeps its value.
- torch.emu.telemetry(): ops with path, dtypes, shapes, kernels; host syncs and copies (count
  and bytes); ops on autograd's worker thread; nothing recorded or hooked outside the block.
- Decompositions: each active row runs with the fallback forbidden, matches CPU per dtype, is
  counted under "decomposition", and calls only the ops its row declares.
- prepare_out follows ATen: a wrong-shaped out is resized with the deprecation warning.

Ops that must fall back are custom operators with only a CPU kernel (seed_paths_test::*), so
the tests do not depend on which aten ops have emu kernels today.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import runtime
import torch_plugin
from plugin_testing import EXACT, make
from torch_plugin.ops import decompositions, fallback, registry

ALL_PATHS = ("native", "composite", "decomposition", "host_fallback", "rejection", "host_fallback_copies")
pytestmark = pytest.mark.filterwarnings("ignore:.*has no emu kernel:UserWarning")
TOL = {torch.float32: dict(rtol=1.3e-6, atol=1e-5), torch.float64: dict(rtol=1e-7, atol=1e-7),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2), torch.float16: dict(rtol=1e-3, atol=1e-3),
       torch.int64: EXACT, torch.int32: EXACT}

# -------------------------------------------------------------------- probe operators
_lib = torch.library.Library("seed_paths_test", "DEF")
_lib.define("host_only(Tensor x) -> Tensor")          # CPU kernel only: the boxed host fallback
_lib.define("host_only_(Tensor(a!) x) -> Tensor(a!)")
_lib.define("twice_plus_host(Tensor x) -> Tensor")    # a composite: x + x, then host_only
_lib.define("picky(Tensor x) -> Tensor")              # native for float32, rejects other dtypes
_lib.define("delegating(Tensor x) -> Tensor")         # native kernel that hands int64 to the host
_lib.impl("host_only", lambda x: x * 3, "CPU")
_lib.impl("host_only_", lambda x: x.mul_(3), "CPU")
_lib.impl("delegating", lambda x: x + 1, "CPU")


def _twice_plus_host(x):
    return torch.ops.seed_paths_test.host_only(x + x)


def _picky(x):
    if x.dtype != torch.float32:
        raise torch_plugin.errors.unsupported_dtype("seed_paths_test::picky", x.dtype, [torch.float32])
    return x + 0


def _delegating(x):
    if x.dtype == torch.int64:
        return fallback.run_on_host(torch.ops.seed_paths_test.delegating.default, x)
    return x + 1


for _name, _fn, _path in (("twice_plus_host", _twice_plus_host, registry.COMPOSITE),
                          ("picky", _picky, registry.NATIVE), ("delegating", _delegating, registry.NATIVE)):
    _lib.impl(_name, registry._wrap(_name, _fn, _path, op=f"seed_paths_test::{_name}"), "PrivateUse1")
ops = torch.ops.seed_paths_test


@pytest.fixture(autouse=True)
def default_policy():
    """Each test starts and ends under the default policy, with fresh counters."""
    registry._policy_stack.clear()
    registry.set_host_fallback(True)
    torch.emu.reset_op_stats()
    yield
    registry._policy_stack.clear()
    registry.set_host_fallback(True)


def emu(t):
    return t.to("emu")


def paths_of(op: str) -> dict:
    """{path: count} of one op across every path (only those that counted it)."""
    return {p: c[op] for p, c in torch.emu.op_stats().items() if op in c}


# ------------------------------------------------------------------ one path per instance
def test_op_stats_has_every_path_and_resets():
    torch.ones(2, device="emu").add_(1)
    assert tuple(torch.emu.op_stats()) == ALL_PATHS
    torch.emu.reset_op_stats()
    assert torch.emu.op_stats() == {p: {} for p in ALL_PATHS}


def test_ops_of_several_threads_are_each_counted_while_stats_are_read():
    """Each thread counts into its own table (no lock on the hot path); op_stats sums them, also
    while the threads still run, and a reset sets the baseline for every thread."""
    import threading
    a, b = torch.ones(4, device="emu"), torch.ones(4, device="emu")
    torch.emu.reset_op_stats()
    start = threading.Barrier(3)

    def work(x):
        start.wait()
        for _ in range(300):
            x.mul_(1.0)

    threads = [threading.Thread(target=work, args=(t,)) for t in (a, b)]
    for t in threads:
        t.start()
    start.wait()
    seen = []
    while any(t.is_alive() for t in threads):
        seen.append(torch.emu.op_stats()["native"].get("aten::mul_.Tensor", 0))
    for t in threads:
        t.join()
    assert seen == sorted(seen)   # never lost, never counted twice on the way
    assert torch.emu.op_stats()["native"]["aten::mul_.Tensor"] == 600
    torch.emu.reset_op_stats()
    assert torch.emu.op_stats()["native"] == {}
    other = threading.Thread(target=lambda: a.mul_(1.0))   # a thread counting for the first time
    other.start()
    a.mul_(1.0)
    other.join()
    assert torch.emu.op_stats()["native"]["aten::mul_.Tensor"] == 2


def test_native_op_is_counted_once():
    a = emu(make(torch.float32, (3, 4), 1))
    torch.emu.reset_op_stats()
    a + a
    assert paths_of("aten::add.Tensor") == {"native": 1}


def test_host_fallback_is_counted_once_with_its_copies():
    x = make(torch.float32, (5,), 2)
    ex = emu(x)
    torch.emu.reset_op_stats()
    with torch.emu.host_fallback("allow"):
        got = ops.host_only(ex)
    stats = torch.emu.op_stats()
    assert paths_of("seed_paths_test::host_only") == {"host_fallback": 1}
    assert stats["host_fallback_copies"] == {"aten::_copy_from": 2}  # the operand down, the result up
    assert stats["native"] == {}
    torch.testing.assert_close(got.cpu(), x * 3, **EXACT)


def test_composite_counts_itself_once_and_its_ops_as_what_they_are():
    x = make(torch.float32, (4,), 3)
    with torch.emu.host_fallback("allow"):
        got = ops.twice_plus_host(emu(x))
    torch.testing.assert_close(got.cpu(), (x + x) * 3, **EXACT)
    assert paths_of("seed_paths_test::twice_plus_host") == {"composite": 1}
    assert paths_of("aten::add.Tensor") == {"native": 1}
    assert paths_of("seed_paths_test::host_only") == {"host_fallback": 1}


def test_rejection_is_counted_once_and_names_op_and_dtypes():
    x = emu(torch.arange(4, dtype=torch.int32))
    with pytest.raises(NotImplementedError, match=r"seed_paths_test::picky: dtype torch.int32 is not "
                                                  r"supported on emu \(supported: torch.float32\)"):
        ops.picky(x)
    assert paths_of("seed_paths_test::picky") == {"rejection": 1}
    ops.picky(x.float())
    assert paths_of("seed_paths_test::picky") == {"rejection": 1, "native": 1}


def test_kernel_handing_its_op_to_the_host_is_counted_as_host_fallback_only():
    x = emu(torch.arange(4))
    torch.emu.reset_op_stats()
    with torch.emu.host_fallback("allow"):
        got = ops.delegating(x)
    assert paths_of("seed_paths_test::delegating") == {"host_fallback": 1}
    assert torch.emu.op_stats()["native"] == {}  # nor its copies
    torch.testing.assert_close(got.cpu(), torch.arange(1, 5), **EXACT)


def test_decomposition_is_counted_once_and_its_ops_native():
    row = _active_row("rsub.Tensor")
    a, b = make(torch.float32, (3,), 4), make(torch.float32, (3,), 5)
    ea, eb = emu(a), emu(b)
    torch.emu.reset_op_stats()
    got = torch.rsub(ea, eb, alpha=2)
    torch.testing.assert_close(got.cpu(), torch.rsub(a, b, alpha=2), **EXACT)
    assert paths_of("aten::rsub.Tensor") == {"decomposition": 1}, row
    assert paths_of("aten::sub.Tensor") == {"native": 1}


# ------------------------------------------------------------------------ the policy
def test_forbid_raises_before_any_state_changes():
    x = make(torch.float32, (2, 3), 6)
    ex, bystander = emu(x), emu(x + 1)
    view = ex[:, 1:]
    version = ex._version
    with torch.emu.host_fallback("forbid"):
        with pytest.raises(torch_plugin.HostFallbackError,
                           match=r"seed_paths_test::host_only_ has no emu kernel and host fallback is "
                                 r"disabled \(operands: float32\[2, 3\]\)") as info:
            ops.host_only_(ex)
    assert info.value.op == "seed_paths_test::host_only_"
    assert isinstance(info.value, RuntimeError) and info.value.__class__ is fallback.HostFallbackDisabled
    torch.testing.assert_close(ex.cpu(), x, **EXACT)          # not written
    torch.testing.assert_close(view.cpu(), x[:, 1:], **EXACT)
    torch.testing.assert_close(bystander.cpu(), x + 1, **EXACT)
    assert ex._version == version
    stats = torch.emu.op_stats()
    assert stats["rejection"] == {"seed_paths_test::host_only_": 1}
    assert stats["host_fallback"] == {} and stats["host_fallback_copies"] == {}  # nothing was copied


def test_forbid_stops_a_kernel_handing_its_op_to_the_host_and_counts_one_rejection():
    x = emu(torch.arange(4))
    with torch.emu.host_fallback("forbid"):
        with pytest.raises(torch_plugin.HostFallbackError, match=r"seed_paths_test::delegating has no emu "
                                                                 r"kernel for these operands .*int64\[4\]"):
            ops.delegating(x)
        torch.testing.assert_close(ops.delegating(x.float()).cpu(), torch.arange(1.0, 5.0), **EXACT)
    assert paths_of("seed_paths_test::delegating") == {"rejection": 1, "native": 1}


def test_forbid_inside_a_composite_counts_both_as_rejected():
    with torch.emu.host_fallback("forbid"), pytest.raises(torch_plugin.HostFallbackError):
        ops.twice_plus_host(torch.ones(2, device="emu"))
    assert paths_of("seed_paths_test::twice_plus_host") == {"rejection": 1}
    assert paths_of("seed_paths_test::host_only") == {"rejection": 1}
    assert paths_of("aten::add.Tensor") == {"native": 1}


def test_host_fallback_blocks_nest_and_restore():
    x = torch.ones(2, device="emu")
    assert torch.emu.host_fallback_policy() == "warn"
    with torch.emu.host_fallback("forbid"):
        with torch.emu.host_fallback("allow"):
            assert torch.emu.host_fallback_policy() == "allow"
            ops.host_only(x)                     # allowed inside the inner block
            with torch.emu.host_fallback("forbid"), pytest.raises(torch_plugin.HostFallbackError):
                ops.host_only(x)
            ops.host_only(x)
        assert torch.emu.host_fallback_policy() == "forbid"
        with pytest.raises(torch_plugin.HostFallbackError):
            ops.host_only(x)
    assert torch.emu.host_fallback_policy() == "warn"
    assert paths_of("seed_paths_test::host_only") == {"host_fallback": 2, "rejection": 2}


def test_host_fallback_block_restores_after_an_error_and_rejects_bad_policies():
    with pytest.raises(ZeroDivisionError), torch.emu.host_fallback("forbid"):
        1 / 0
    assert torch.emu.host_fallback_policy() == "warn"
    with pytest.raises(ValueError, match="'sometimes' is not one of allow, warn, forbid"):
        with torch.emu.host_fallback("sometimes"):
            pass


def test_set_host_fallback_keeps_working_and_blocks_win_over_it():
    x = torch.ones(2, device="emu")
    torch.emu.set_host_fallback(False)
    assert torch.emu.host_fallback_policy() == "forbid"
    with pytest.raises(fallback.HostFallbackDisabled, match="has no emu kernel and host fallback is disabled"):
        ops.host_only(x)
    with torch.emu.host_fallback("allow"):
        ops.host_only(x)
    torch.emu.set_host_fallback(True)
    assert torch.emu.host_fallback_policy() == "warn"
    ops.host_only(x)


def test_warn_once_per_op_and_allow_is_silent():
    x = torch.ones(2, device="emu")
    fallback._warned.discard("seed_paths_test::host_only")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.emu.host_fallback("allow"):
            ops.host_only(x)
        ops.host_only(x)
        ops.host_only(x)
    messages = [str(w.message) for w in caught if "host_only" in str(w.message)]
    assert messages == ["seed_paths_test::host_only has no emu kernel: it ran on the host "
                        "(counted in torch.emu.op_stats())"]


def test_forbid_covers_backward_on_the_autograd_thread():
    class HostOnlyGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, grad):
            return ops.host_only(grad)
    x = torch.ones(3, device="emu", requires_grad=True)
    y = HostOnlyGrad.apply(x).sum()
    with torch.emu.host_fallback("forbid"), pytest.raises(torch_plugin.HostFallbackError):
        y.backward()
    assert x.grad is None


def _run_python(code: str, **env):
    environment = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environment, timeout=120, cwd=os.path.dirname(__file__))


_SUBPROCESS_PROBE = """
    import torch, torch_plugin
    lib = torch.library.Library("seed_paths_env", "DEF")
    lib.define("host_only(Tensor x) -> Tensor")
    lib.impl("host_only", lambda x: x * 3, "CPU")
    x = torch.full((2,), 5.0, device="emu")
    print("policy", torch.emu.host_fallback_policy())
    try:
        torch.ops.seed_paths_env.host_only_(x) if False else torch.ops.seed_paths_env.host_only(x)
        print("ran")
    except torch_plugin.HostFallbackError as err:
        print("raised", err.op, x.cpu().tolist(), torch.emu.op_stats()["rejection"])
    """


def test_environment_variable_forbids_the_fallback():
    done = _run_python(_SUBPROCESS_PROBE, EMU_HOST_FALLBACK="forbid", EMU_PRESET="tiny")
    assert done.returncode == 0, done.stderr
    assert "policy forbid" in done.stdout
    assert "raised seed_paths_env::host_only [5.0, 5.0] {'seed_paths_env::host_only': 1}" in done.stdout


def test_environment_variable_rejects_a_bad_value_by_name():
    done = _run_python(_SUBPROCESS_PROBE, EMU_HOST_FALLBACK="sometimes", EMU_PRESET="tiny")
    assert "EMU_HOST_FALLBACK='sometimes': expected one of allow, warn, forbid" in done.stdout + done.stderr
    assert "ran" not in done.stdout.split()


def test_settings_carry_the_policy():
    assert runtime.Settings.from_environment({"EMU_HOST_FALLBACK": "Allow"}).host_fallback == "allow"
    assert runtime.Settings.from_environment({}).host_fallback == "warn"
    with pytest.raises(runtime.InvalidValueError, match="EMU_HOST_FALLBACK"):
        runtime.Settings.from_environment({"EMU_HOST_FALLBACK": "maybe"})


# --------------------------------------------------------------------------- telemetry
def _row(data, op, path=None):
    rows = [r for r in data["ops"] if r["op"] == op and (path is None or r["path"] == path)]
    assert len(rows) == 1, (op, data["ops"])
    return rows[0]


def test_telemetry_records_ops_paths_dtypes_shapes_kernels_syncs_and_copies():
    x = make(torch.float32, (4, 8), 7)
    rt = runtime.get_runtime()
    with torch.emu.telemetry() as t:
        ex = x.to("emu")                               # one host->device copy, 128 bytes
        y = ex * 2 + ex.to(torch.float64)              # mul, a dtype conversion, add (float32 + float64)
        with torch.emu.host_fallback("allow"):
            z = ops.host_only(y)                       # one copy down, one up (256 bytes each)
        total = z.sum().item()                         # a 0-dim result down: 8 bytes
        assert "launch" in rt.__dict__                 # hooked while the block is open
    assert "launch" not in rt.__dict__ and registry._observers is None
    torch.testing.assert_close(total, ((x * 2 + x.double()) * 3).sum().item())
    data = t.as_dict()
    add = _row(data, "aten::add.Tensor")
    assert add["path"] == "native" and add["count"] == 1
    assert add["dtypes"] == ["float32", "float64"] and add["shapes"] == [[4, 8], [4, 8]]
    assert add["kernels"] == {"binary.add": 1}
    assert _row(data, "aten::mul.Tensor")["kernels"] == {"binary.mul": 1}
    copies = [r for r in data["ops"] if r["op"] == "aten::_copy_from" and r["path"] == "native"]
    assert sorted(r["dtypes"][1] for r in copies) == ["float32", "float64"]  # x.to("emu"), .to(float64)
    host = _row(data, "seed_paths_test::host_only")
    assert host["path"] == "host_fallback" and host["dtypes"] == ["float64"] and host["shapes"] == [[4, 8]]
    assert host["kernels"] == {"memcpy_d2h": 1, "memcpy_h2d": 1}
    assert _row(data, "aten::_copy_from", "host_fallback_copies")["count"] == 2
    assert _row(data, "aten::_local_scalar_dense")["kernels"] == {"memcpy_d2h": 1}
    assert data["paths"]["host_fallback"] == {"seed_paths_test::host_only": 1}
    assert data["paths"]["native"]["aten::add.Tensor"] == 1
    assert data["copies"]["host_to_device"] == {"count": 2, "bytes": 128 + 256}
    assert data["copies"]["device_to_host"] == {"count": 2, "bytes": 256 + 8}
    # Blocking copies: x.to("emu"), the fallback's two copies, item(). One each.
    assert data["syncs"] == 4
    table = t.summary()
    lines = table.splitlines()
    assert lines[0].split() == ["op", "path", "dtypes", "shapes", "count", "kernels"]
    assert any(line.split()[:2] == ["aten::add.Tensor", "native"] and "float32, float64" in line
               and "[4,8] [4,8]" in line and "binary.add x1" in line for line in lines)
    assert any(line.startswith("seed_paths_test::host_only") and "host_fallback" in line for line in lines)
    assert "host synchronisations: 4" in table
    assert "host to device 2 (384 bytes)" in table and "device to host 2 (264 bytes)" in table


def test_telemetry_sees_only_its_block_and_counts_each_sync_once():
    a = torch.ones(3, device="emu")
    a + a                                             # before the block: not recorded
    with torch.emu.telemetry() as t:
        torch.emu.synchronize()                       # one sync, whatever the number of streams
        (a * 3).relu()
        with torch.emu.telemetry() as inner:          # blocks nest: both see what runs inside
            a - a
    a / a                                             # after the block: not recorded
    data = t.as_dict()
    assert sorted(r["op"] for r in data["ops"]) == ["aten::mul.Tensor", "aten::relu", "aten::sub.Tensor"]
    assert [r["op"] for r in inner.as_dict()["ops"]] == ["aten::sub.Tensor"]
    assert data["syncs"] == 1 and data["copies"]["host_to_device"]["count"] == 0


def test_telemetry_records_rejections_decompositions_and_backward():
    _active_row("rsub.Tensor")
    x = emu(make(torch.float32, (2, 3), 8)).requires_grad_()
    with torch.emu.telemetry() as t:
        with pytest.raises(NotImplementedError):
            ops.picky(torch.zeros(2, dtype=torch.int64, device="emu"))
        y = torch.rsub(x, 1.0)
        y.relu().sum().backward()                     # threshold_backward on autograd's worker thread
    data = t.as_dict()
    assert _row(data, "seed_paths_test::picky")["path"] == "rejection"
    rsub = _row(data, "aten::rsub.Scalar")
    assert rsub["path"] == "decomposition" and rsub["kernels"].get("binary.sub") == 1
    assert _row(data, "aten::threshold_backward")["kernels"] == {"threshold_backward": 1}


# ---------------------------------------------------------------------- decompositions
def _active_row(name):
    row = next(r for r in decompositions.DECOMPOSITIONS if name in r.overloads)
    active, inactive = decompositions.resolve(registry.native_kernels())
    if row not in active:
        pytest.skip(f"{name} does not decompose now: {inactive[row]}")
    return row


def test_every_row_registers_and_names_real_overloads():
    assert decompositions.BROKEN == {}
    for row in decompositions.DECOMPOSITIONS:
        for name in row.overloads:
            decompositions.decomposition_of(name)     # raises if torch._decomp has none for it
    table = decompositions.table()
    assert any(r["active"] for r in table)
    for entry in table:
        registered = all(torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{n}", "PrivateUse1")
                         for n in entry["overloads"])
        assert entry["active"] == (registered and not any(n in registry.native_kernels()
                                                          for n in entry["overloads"])), entry
        assert entry["active"] or entry["missing"], entry


def _f(dtype, shape, seed):
    t = make(dtype, shape, seed)
    return t + 3 if dtype.is_floating_point else t  # keep divisors away from zero


# name, call(*tensors), input builders (dtype -> CPU tensors), dtypes
DECOMPOSITION_CASES = {
    "rsub.Tensor": (lambda a, b: torch.rsub(a, b, alpha=2), lambda d: (make(d, (3, 4), 1), make(d, (4,), 2)),
                    [torch.float32, torch.bfloat16, torch.int64]),
    "rsub.Scalar": (lambda a: torch.rsub(a, 2.5), lambda d: (make(d, (5,), 3),), [torch.float32, torch.int64]),
    "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5),
                lambda d: (make(d, (3, 4), 4), make(d, (3, 4), 5).t().contiguous().t(), make(d, (4,), 6)),
                [torch.float32, torch.float16, torch.bfloat16, torch.float64]),
    "addcdiv": (lambda a, b, c: torch.addcdiv(a, b, c, value=2),
                lambda d: (make(d, (2, 3), 7), make(d, (2, 3), 8), _f(d, (2, 3), 9)), [torch.float32, torch.bfloat16]),
    "addcdiv_": (lambda a, b, c: a.addcdiv_(b, c, value=-1),
                 lambda d: (make(d, (2, 3), 7), make(d, (2, 3), 8), _f(d, (2, 3), 9)), [torch.float32]),
    "mv": (torch.mv, lambda d: (make(d, (5, 4), 10), make(d, (4,), 11)), [torch.float32, torch.float64, torch.int64]),
    "addmv": (lambda s, m, v: torch.addmv(s, m, v, beta=0.5, alpha=2),
              lambda d: (make(d, (5,), 12), make(d, (4, 5), 13).t(), make(d, (4,), 14)), [torch.float32]),
    "dot": (torch.dot, lambda d: (make(d, (7,), 15), make(d, (7,), 16)), [torch.float32, torch.int64]),
    "addr": (lambda s, a, b: torch.addr(s, a, b, beta=2, alpha=3),
             lambda d: (make(d, (3, 4), 17), make(d, (3,), 18), make(d, (4,), 19)), [torch.float32, torch.int64]),
    "deg2rad": (torch.deg2rad, lambda d: (make(d, (6,), 20),), [torch.float32, torch.int64]),
    "native_dropout_backward": (lambda g, m: torch.ops.aten.native_dropout_backward(g, m, 2.0),
                                lambda d: (make(d, (4, 5), 24), make(torch.float32, (4, 5), 25) > 0),
                                [torch.float32, torch.bfloat16]),
    "mse_loss_backward": (lambda g, a, b: torch.ops.aten.mse_loss_backward(g, a, b, 1),
                          lambda d: (make(d, (), 21), make(d, (3, 4), 22), make(d, (3, 4), 23)), [torch.float32]),
}


def _cases():
    for name, (call, build, dtypes) in DECOMPOSITION_CASES.items():
        for dtype in dtypes:
            yield pytest.param(name, call, build, dtype, id=f"{name}-{str(dtype).removeprefix('torch.')}")


@pytest.mark.parametrize("name, call, build, dtype", list(_cases()))
def test_decomposed_op_runs_on_the_device_and_matches_cpu(name, call, build, dtype):
    row = _active_row(name)
    inputs = build(dtype)
    expected = call(*[t.clone() for t in inputs])
    device_inputs = [emu(t) for t in inputs]
    torch.emu.reset_op_stats()
    with torch.emu.host_fallback("forbid"):
        got = call(*device_inputs)
    assert got.device.type == "emu" and got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, **TOL.get(dtype, EXACT))
    stats = torch.emu.op_stats()
    assert sum(stats["decomposition"].values()) >= 1 and set(stats["decomposition"]) <= {
        f"aten::{n}" for r in decompositions.DECOMPOSITIONS for n in r.overloads}, stats
    assert stats["host_fallback"] == {} and stats["rejection"] == {}
    # The row says what the decomposition calls: check it against a trace on device tensors.
    overload = next(n for n in row.overloads if f"aten::{n}" in stats["decomposition"])
    traced = decompositions.traced_ops(overload, call, *[emu(t) for t in inputs])
    assert traced and traced <= set(row.produces) | set(decompositions.OUT_OPS), (overload, traced)


def test_decomposed_out_variant_resizes_and_keeps_strides():
    _active_row("rsub.Tensor_out")
    rsub_out = torch.ops.aten.rsub.Tensor_out
    a, b = make(torch.float32, (3, 4), 24), make(torch.float32, (3, 4), 25)
    out = torch.empty(0, device="emu")
    with torch.emu.host_fallback("forbid"):
        assert rsub_out(emu(a), emu(b), out=out) is out
        strided = torch.empty(4, 3, device="emu").t()
        rsub_out(emu(a), emu(b), alpha=2, out=strided)
    torch.testing.assert_close(out.cpu(), b - a, **EXACT)
    torch.testing.assert_close(strided.cpu(), b - 2 * a, **EXACT)
    assert strided.stride() == (1, 3)
    assert paths_of("aten::rsub.Tensor_out") == {"decomposition": 2}
    bad = torch.full((3, 4), 5, dtype=torch.int64, device="emu")
    with pytest.raises(RuntimeError, match="can't be cast"):
        rsub_out(emu(a), emu(b), out=bad)
    assert bad.cpu().unique().tolist() == [5]


def test_decomposed_op_autograd_matches_cpu():
    _active_row("rsub.Tensor")
    a, b = make(torch.float32, (3, 4), 26).requires_grad_(), make(torch.float32, (4,), 27).requires_grad_()
    ea, eb = emu(a.detach()).requires_grad_(), emu(b.detach()).requires_grad_()
    (torch.rsub(a, b, alpha=3) * a).sum().backward()
    with torch.emu.host_fallback("forbid"):
        (torch.rsub(ea, eb, alpha=3) * ea).sum().backward()
    torch.testing.assert_close(ea.grad.cpu(), a.grad)
    torch.testing.assert_close(eb.grad.cpu(), b.grad)


def test_dtype_outside_a_row_goes_to_the_host_fallback_counted():
    _active_row("addr")
    s, v1, v2 = torch.zeros(2, 3, dtype=torch.bool), torch.tensor([True, False]), torch.tensor([True, True, False])
    with torch.emu.host_fallback("allow"):
        got = torch.addr(emu(s), emu(v1), emu(v2))
    torch.testing.assert_close(got.cpu(), torch.addr(s, v1, v2), **EXACT)
    assert paths_of("aten::addr") == {"host_fallback": 1}


def test_a_native_kernel_wins_over_a_row():
    natives = dict(registry.native_kernels())
    natives["rsub.Tensor"] = object()  # as if someone added a native rsub
    active, inactive = decompositions.resolve(natives)
    row = next(r for r in decompositions.DECOMPOSITIONS if "rsub.Tensor" in r.overloads)
    assert row not in active and inactive[row] == ["rsub.Tensor is native"]


# -------------------------------------------------------------------------- prepare_out
def test_wrong_shaped_out_is_resized_with_atens_warning_after_the_dtype_check():
    a = emu(make(torch.float32, (2, 3), 28))
    out = torch.full((5,), 7.0, device="emu")
    with pytest.warns(UserWarning, match="An output with one or more elements was resized since it had shape "
                                         r"\[5\], which does not match the required output shape \[2, 3\]"):
        torch.mul(a, a, out=out)
    torch.testing.assert_close(out.cpu(), a.cpu() * a.cpu(), **EXACT)
    bad = torch.full((5,), 7, dtype=torch.int64, device="emu")
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.mul(a, a, out=bad)
    assert bad.shape == (5,) and bad.cpu().tolist() == [7] * 5   # rejected before any resize
    with pytest.raises(RuntimeError, match=r"output with shape \[1, 3\] doesn't match the broadcast shape \[2, 3\]"):
        a[:1].add_(a)                                             # in place: never resized
