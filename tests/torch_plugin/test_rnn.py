"""The fused RNN cells (torch_plugin/ops/rnn.py, emulator/kernels/rnn.pyx) and the modules that
reach them: nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell, forward and backward on emu vs CPU.

The ``_thnn_fused_*`` ops have no CPU kernel (and no OpInfo), so the ops themselves are checked
against the cell math written with CPU torch ops in float64 (and its CPU autograd); the modules are
checked against CPU's own (unfused) nn.LSTM / nn.GRU. Host fallback is forbidden throughout.

Tolerances (rtol = atol): float32 1e-5, float64 1e-10; for the ops alone, float16 2e-3 and
bfloat16 1.6e-2 (one rounding of each stored value, plus the rounded workspace the backward reads).
"""
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from plugin_testing import make
from precision import map_tensors

aten = torch.ops.aten
TOL = {torch.float32: 1e-5, torch.float64: 1e-10, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def forbid_fallback(stats):
    with torch.emu.host_fallback("forbid"):
        yield
    stats.no_fallback()


def close(actual, expected, dtype):
    tol = TOL[dtype]
    torch.testing.assert_close(actual.cpu().double(), expected.double(), rtol=tol, atol=tol)


def emu(t):
    return None if t is None else t.to("emu")


# -- reference cell math (CPU, float64) ----------------------------------------------------------

def lstm_ref(ig, hg, cx, b1, b2):
    gates = ig + hg + (0 if b1 is None else b1 + b2)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def gru_ref(ig, hg, hx, b1, b2):
    if b1 is not None:
        ig, hg = ig + b1, hg + b2
    ir, ii, in_ = ig.chunk(3, 1)
    hr, hi, hn = hg.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1)


def cell_inputs(dtype, B, H, factor, bias, seed=0):
    ig, hg = (make(dtype, (B, factor * H), seed + k) / 4 for k in (0, 1))
    prev = make(dtype, (B, H), seed + 2) / 4
    b1, b2 = ((make(dtype, (factor * H,), seed + k) / 4 for k in (3, 4)) if bias else (None, None))
    return ig, hg, prev, b1, b2


def as_double(*ts):
    return [None if t is None else t.double() for t in ts]


# -- the ops --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_lstm_cell_forward(dtype, bias, stats):
    ig, hg, cx, b1, b2 = cell_inputs(dtype, 3, 5, 4, bias)
    hy, cy, ws = aten._thnn_fused_lstm_cell(*map(emu, (ig, hg, cx, b1, b2)))
    rhy, rcy, rws = lstm_ref(*as_double(ig, hg, cx, b1, b2))
    assert hy.dtype == cy.dtype == ws.dtype == dtype and ws.shape == (3, 20) and hy.is_contiguous()
    close(hy, rhy, dtype)
    close(cy, rcy, dtype)
    close(ws, rws, dtype)  # ATen's layout: sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
    assert stats.native("aten::_thnn_fused_lstm_cell") == 1


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_gru_cell_forward(dtype, bias, stats):
    ig, hg, hx, b1, b2 = cell_inputs(dtype, 3, 5, 3, bias)
    hy, ws = aten._thnn_fused_gru_cell(*map(emu, (ig, hg, hx, b1, b2)))
    rhy, rws = gru_ref(*as_double(ig, hg, hx, b1, b2))
    assert hy.dtype == ws.dtype == dtype and ws.shape == (3, 25)
    close(hy, rhy, dtype)
    close(ws, rws, dtype)  # ATen's layout: r, z, n, hx, hn + b_hn
    assert stats.native("aten::_thnn_fused_gru_cell") == 1


def test_fused_cells_non_contiguous_operands():
    """Transposed, strided and expanded operands, made as views on the device."""
    B, H = 4, 3
    gates_t = make(torch.float32, (4 * H, 2 * B), 1) / 4
    wide = make(torch.float32, (B, 8 * H), 2) / 4
    cx_t = make(torch.float32, (H, B), 3) / 4
    bias_wide = make(torch.float32, (8 * H,), 4) / 4
    views = lambda t, w, c, b: (t[:, ::2].t(), w[:, 1::2], c.t(), b[::2], b[:1].expand(4 * H))
    ig, hg, cx, b1, b2 = views(gates_t, wide, cx_t, bias_wide)
    ige, hge, cxe, b1e, b2e = views(*map(emu, (gates_t, wide, cx_t, bias_wide)))
    assert not any(t.is_contiguous() for t in (ige, hge, cxe, b1e, b2e))
    hy, cy, ws = aten._thnn_fused_lstm_cell(ige, hge, cxe, b1e, b2e)
    rhy, rcy, rws = lstm_ref(*as_double(ig, hg, cx, b1, b2))
    close(hy, rhy, torch.float32)
    close(cy, rcy, torch.float32)
    close(ws, rws, torch.float32)
    hy, ws = aten._thnn_fused_gru_cell(ige[:, :3 * H], hge[:, :3 * H], cxe, b1e[:3 * H], b2e[:3 * H])
    rhy, rws = gru_ref(*as_double(ig[:, :3 * H], hg[:, :3 * H], cx, b1[:3 * H], b2[:3 * H]))
    close(hy, rhy, torch.float32)
    close(ws, rws, torch.float32)
    # the backward ops read strided gradients too
    ghy = emu(make(torch.float32, (H, B), 5)).t()
    gi, gh, ghx, gbi, gbh = aten._thnn_fused_gru_cell_backward(ghy, ws, True)
    gi2, gh2, ghx2, _, _ = aten._thnn_fused_gru_cell_backward(ghy.contiguous(), ws, True)
    for a, b in ((gi, gi2), (gh, gh2), (ghx, ghx2)):
        assert torch.equal(a.cpu(), b.cpu())


def test_fused_cells_empty_batch():
    ig, hg, cx, b1, b2 = cell_inputs(torch.float32, 0, 4, 4, True)
    hy, cy, ws = aten._thnn_fused_lstm_cell(*map(emu, (ig, hg, cx, b1, b2)))
    assert hy.shape == cy.shape == (0, 4) and ws.shape == (0, 16)
    gg, gcx, gb = aten._thnn_fused_lstm_cell_backward_impl(emu(cx), None, emu(cx), cy, ws, True)
    assert gg.shape == (0, 16) and gcx.shape == (0, 4)
    assert torch.equal(gb.cpu(), torch.zeros(16))
    hy, ws = aten._thnn_fused_gru_cell(emu(ig[:, :12]), emu(hg[:, :12]), emu(cx))
    assert hy.shape == (0, 4) and ws.shape == (0, 20)


def _autograd_pair(fwd_emu, fwd_ref, inputs, dtype, weights):
    """Backward of the fused op on emu (ATen's formula -> our backward op) vs CPU autograd of the
    reference math in float64, for the outputs weighted by ``weights`` (None: output unused)."""
    leaves_e = [None if t is None else t.to("emu").requires_grad_() for t in inputs]
    leaves_r = [None if t is None else t.double().requires_grad_() for t in inputs]
    outs_e, outs_r = fwd_emu(*leaves_e), fwd_ref(*leaves_r)
    loss_e = sum((o * emu(w.to(dtype))).sum() for o, w in zip(outs_e, weights) if w is not None)
    loss_r = sum((o * w.double()).sum() for o, w in zip(outs_r, weights) if w is not None)
    loss_e.backward()
    loss_r.backward()
    for le, lr in zip(leaves_e, leaves_r):
        if le is not None:
            close(le.grad, lr.grad, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("used", ["both", "hy", "cy"])
def test_fused_lstm_cell_backward(dtype, bias, used, stats):
    inputs = cell_inputs(dtype, 3, 5, 4, bias, seed=10)
    w_hy = make(torch.float32, (3, 5), 20) / 4 if used != "cy" else None
    w_cy = make(torch.float32, (3, 5), 21) / 4 if used != "hy" else None
    _autograd_pair(lambda *a: aten._thnn_fused_lstm_cell(*a)[:2], lambda *a: lstm_ref(*a)[:2], inputs, dtype,
                   (w_hy, w_cy))
    assert stats.native("aten::_thnn_fused_lstm_cell_backward_impl") == 1


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_gru_cell_backward(dtype, bias, stats):
    inputs = cell_inputs(dtype, 3, 5, 3, bias, seed=30)
    _autograd_pair(lambda *a: aten._thnn_fused_gru_cell(*a)[:1], lambda *a: gru_ref(*a)[:1], inputs, dtype,
                   (make(torch.float32, (3, 5), 40) / 4,))
    assert stats.native("aten::_thnn_fused_gru_cell_backward") == 1


def test_fused_lstm_cell_backward_direct():
    """The backward op called by hand: outputs, undefined bias grad, and no gradient at all."""
    ig, hg, cx, b1, b2 = cell_inputs(torch.float64, 2, 3, 4, True)
    hy, cy, ws = aten._thnn_fused_lstm_cell(*map(emu, (ig, hg, cx, b1, b2)))
    ghy = make(torch.float64, (2, 3), 7)
    gg, gcx, gb = aten._thnn_fused_lstm_cell_backward_impl(emu(ghy), None, emu(cx), cy, ws, True)
    i, f, g, o = ws.cpu().chunk(4, 1)
    t = cy.cpu().tanh()
    gc = ghy * o * (1 - t * t)
    close(gg, torch.cat([gc * g * (1 - i) * i, gc * cx * (1 - f) * f, gc * i * (1 - g * g),
                         ghy * t * (1 - o) * o], 1), torch.float64)
    close(gcx, gc * f, torch.float64)
    close(gb, gg.cpu().sum(0), torch.float64)
    *_, gb = aten._thnn_fused_lstm_cell_backward_impl(emu(ghy), None, emu(cx), cy, ws, False)
    assert gb is None
    with torch.no_grad():  # the composite asserts it runs outside grad mode (from autograd)
        grads = aten._thnn_fused_lstm_cell_backward(emu(ghy), None, emu(cx), cy, ws, True)
    assert len(grads) == 5 and torch.equal(grads[0].cpu(), grads[1].cpu()) and torch.equal(grads[3].cpu(),
                                                                                          grads[4].cpu())
    empty = aten._thnn_fused_lstm_cell_backward_impl(None, None, emu(cx), cy, ws, True)
    assert all(t is None for t in empty)


def test_fused_gru_cell_backward_no_bias_gives_undefined():
    ig, hg, hx, _, _ = cell_inputs(torch.float32, 2, 3, 3, False)
    _, ws = aten._thnn_fused_gru_cell(*map(emu, (ig, hg, hx)))
    gi, gh, ghx, gbi, gbh = aten._thnn_fused_gru_cell_backward(emu(torch.ones(2, 3)), ws, False)
    assert gi.shape == gh.shape == (2, 9) and ghx.shape == (2, 3) and gbi is None and gbh is None
    rhy_leaf = [t.double().requires_grad_() for t in (ig, hg, hx)]
    gru_ref(*rhy_leaf, None, None)[0].sum().backward()
    for got, leaf in zip((gi, gh, ghx), rhy_leaf):
        close(got, leaf.grad, torch.float32)


# -- bad input ------------------------------------------------------------------------------------

def test_fused_cell_errors_leave_state_unchanged():
    ig, hg, cx, b1, b2 = map(emu, cell_inputs(torch.float32, 3, 5, 4, True))
    keep = [t.cpu().clone() for t in (ig, hg, cx, b1, b2)]
    with pytest.raises(RuntimeError, match="same size as tensor for argument #2 'hidden_gates'"):
        aten._thnn_fused_lstm_cell(ig, hg[:, :8], cx, b1, b2)
    with pytest.raises(RuntimeError, match="Expected 2-dimensional tensor"):
        aten._thnn_fused_lstm_cell(ig[0], hg[0], cx, b1, b2)
    with pytest.raises(RuntimeError, match="'prev_hidden' to have 15 elements"):
        aten._thnn_fused_lstm_cell(ig, hg, cx[:, :4], b1, b2)
    with pytest.raises(RuntimeError, match="'input_bias' to have 20 elements"):
        aten._thnn_fused_lstm_cell(ig, hg, cx, b1[:8], b2[:8])
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        aten._thnn_fused_lstm_cell(ig, hg, cx.double(), b1, b2)
    with pytest.raises(RuntimeError, match="not implemented for 'int64'"):
        aten._thnn_fused_gru_cell(ig[:, :15].long(), hg[:, :15].long(), cx.long())
    with pytest.raises(RuntimeError, match="same device"):
        aten._thnn_fused_gru_cell(ig[:, :15], hg[:, :15], cx.cpu())
    with pytest.raises(RuntimeError, match="'workspace' to have size \\[3, 25\\]"):
        aten._thnn_fused_gru_cell_backward(cx, ig, True)
    with pytest.raises(RuntimeError, match="'workspace' to have 60 elements"):
        aten._thnn_fused_lstm_cell_backward_impl(cx, None, cx, cx, ig[:, :8], True)
    for t, k in zip((ig, hg, cx, b1, b2), keep):
        assert torch.equal(t.cpu(), k)


def test_kernel_rejects_bad_descriptors():
    """The kernel library checks its own arguments (a KernelArgumentError, never a crash)."""
    from emulator.errors import KernelArgumentError
    from emulator.kernels.library import KERNELS, Operand
    from emulator.kernels import dtypes
    buf = torch.zeros(64)
    f32 = lambda shape, strides: Operand(buf.data_ptr(), dtypes.FLOAT32, shape, strides)
    i64 = Operand(buf.data_ptr(), dtypes.INT64, (2, 2), (2, 1))
    state, gates = f32((2, 2), (2, 1)), f32((2, 8), (8, 1))
    with pytest.raises(KernelArgumentError, match="not a floating dtype"):
        KERNELS["lstm_cell"].run(state, state, gates, gates, gates, i64, None, None)
    with pytest.raises(KernelArgumentError, match="expected 1 strides"):
        KERNELS["gru_cell"].run(state, f32((2, 10), (10, 1)), f32((2, 6), (6, 1)), f32((2, 6), (6, 1)), state,
                                f32((2, 6), (6, 1)), f32((2, 6), (6, 1)))
    assert torch.equal(buf, torch.zeros(64))


# -- the modules ----------------------------------------------------------------------------------

def _pair(module_cls, dtype, **kwargs):
    torch.manual_seed(0)
    cpu = module_cls(**kwargs).to(dtype)
    dev = module_cls(**kwargs).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to("emu")


def _check_grads(cpu, dev, dtype):
    for (name, p), pe in zip(cpu.named_parameters(), dev.parameters()):
        assert pe.grad is not None, name
        close(pe.grad, p.grad, dtype)


RNN_CONFIGS = [
    dict(num_layers=1, bidirectional=False, batch_first=False, bias=True),
    dict(num_layers=2, bidirectional=False, batch_first=True, bias=True),
    dict(num_layers=1, bidirectional=True, batch_first=False, bias=False),
    dict(num_layers=2, bidirectional=True, batch_first=True, bias=True),
]


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU], ids=["LSTM", "GRU"])
@pytest.mark.parametrize("config", RNN_CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rnn_module_forward_backward(cls, config, dtype, stats):
    cpu, dev = _pair(cls, dtype, input_size=6, hidden_size=7, **config)
    shape = (3, 5, 6) if config["batch_first"] else (5, 3, 6)
    x = make(dtype, shape, 1) / 4
    xc, xe = x.clone().requires_grad_(), x.to("emu").requires_grad_()
    h0 = make(dtype, (config["num_layers"] * (2 if config["bidirectional"] else 1), 3, 7), 2) / 4
    state = (h0, make(dtype, h0.shape, 3) / 4) if cls is torch.nn.LSTM else h0
    state_e = tuple(map(emu, state)) if cls is torch.nn.LSTM else emu(state)
    y, hn = cpu(xc, state)
    ye, hne = dev(xe, state_e)
    close(ye, y, dtype)
    for a, b in zip(hne if cls is torch.nn.LSTM else (hne,), hn if cls is torch.nn.LSTM else (hn,)):
        close(a, b, dtype)
    w = make(dtype, y.shape, 4)
    last = hn[-1] if cls is torch.nn.LSTM else hn
    last_e = hne[-1] if cls is torch.nn.LSTM else hne
    ((y * w).sum() + last.pow(2).sum()).backward()
    ((ye * emu(w)).sum() + last_e.pow(2).sum()).backward()
    close(xe.grad, xc.grad, dtype)
    _check_grads(cpu, dev, dtype)
    fused = "aten::_thnn_fused_lstm_cell" if cls is torch.nn.LSTM else "aten::_thnn_fused_gru_cell"
    steps = 5 * config["num_layers"] * (2 if config["bidirectional"] else 1)
    assert stats.native(fused) == steps
    assert stats.native(fused + ("_backward_impl" if cls is torch.nn.LSTM else "_backward")) == steps


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")  # CPU's own notice
def test_lstm_proj_size_and_default_state(stats):
    cpu, dev = _pair(torch.nn.LSTM, torch.float32, input_size=6, hidden_size=7, proj_size=3, num_layers=2)
    x = make(torch.float32, (4, 2, 6), 1) / 4
    y, (h, c) = cpu(x)
    ye, (he, ce) = dev(emu(x))
    assert ye.shape == (4, 2, 3) and he.shape == (2, 2, 3) and ce.shape == (2, 2, 7)
    for a, b in ((ye, y), (he, h), (ce, c)):
        close(a, b, torch.float32)
    (y.sum() + c.sum()).backward()
    (ye.sum() + ce.sum()).backward()
    _check_grads(cpu, dev, torch.float32)
    assert stats.native("aten::_thnn_fused_lstm_cell") == 8


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU], ids=["LSTM", "GRU"])
def test_packed_sequence(cls):
    cpu, dev = _pair(cls, torch.float32, input_size=6, hidden_size=5, bidirectional=True)
    x = make(torch.float32, (5, 3, 6), 1) / 4
    lengths = torch.tensor([5, 3, 2])
    y, _ = pad_packed_sequence(cpu(pack_padded_sequence(x, lengths))[0])
    ye, _ = pad_packed_sequence(dev(pack_padded_sequence(emu(x), lengths))[0])
    close(ye, y, torch.float32)
    y.pow(2).sum().backward()
    ye.pow(2).sum().backward()
    _check_grads(cpu, dev, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lstm_cell_and_gru_cell_modules(dtype, stats):
    for cls in (torch.nn.LSTMCell, torch.nn.GRUCell):
        cpu, dev = _pair(cls, dtype, input_size=6, hidden_size=4)
        x = make(dtype, (3, 6), 1) / 4
        out, oute = cpu(x), dev(emu(x))           # default (zero) state
        h = out if cls is torch.nn.GRUCell else out[0]
        he = oute if cls is torch.nn.GRUCell else oute[0]
        close(he, h, dtype)
        out2, out2e = cpu(x, out), dev(emu(x), oute)   # a second step from the first's state
        if cls is torch.nn.LSTMCell:
            (out2[0].sum() + out2[1].pow(2).sum()).backward()
            (out2e[0].sum() + out2e[1].pow(2).sum()).backward()
        else:
            out2.pow(2).sum().backward()
            out2e.pow(2).sum().backward()
        _check_grads(cpu, dev, dtype)
    assert stats.native("aten::_thnn_fused_lstm_cell") == 2 and stats.native("aten::_thnn_fused_gru_cell") == 2


def test_double_backward_goes_through_device_ops():
    """create_graph=True makes ATen use its differentiable composite backward (device ops only)."""
    dtype = torch.float64
    cpu, dev = _pair(torch.nn.LSTM, dtype, input_size=3, hidden_size=4)
    x = make(dtype, (3, 2, 3), 1) / 4
    xc, xe = x.clone().requires_grad_(), x.to("emu").requires_grad_()
    g, = torch.autograd.grad(cpu(xc)[0].sum(), xc, create_graph=True)
    ge, = torch.autograd.grad(dev(xe)[0].sum(), xe, create_graph=True)
    close(ge, g, dtype)
    g.pow(2).sum().backward()
    ge.pow(2).sum().backward()
    _check_grads(cpu, dev, dtype)


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=11, dim=8, hidden=12):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.lstm = torch.nn.LSTM(dim, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, tokens):
        return self.head(self.lstm(self.embed(tokens))[0])


def test_tiny_lstm_language_model_trains_like_cpu(stats):
    torch.manual_seed(0)
    cpu = TinyLM()
    dev = TinyLM()
    dev.load_state_dict(cpu.state_dict())
    dev.to("emu")
    tokens = torch.randint(0, 11, (4, 7), generator=torch.Generator().manual_seed(1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    # the single-tensor AdamW (foreach=False): this test is about the LSTM, not the _foreach_ kernels
    opt_c = torch.optim.AdamW(cpu.parameters(), lr=1e-2, foreach=False)
    opt_e = torch.optim.AdamW(dev.parameters(), lr=1e-2, foreach=False)
    losses_c, losses_e = [], []
    for _ in range(4):
        for model, opt, losses, to in ((cpu, opt_c, losses_c, lambda t: t), (dev, opt_e, losses_e, emu)):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(to(inputs)).flatten(0, 1), to(targets).flatten())
            loss.backward()
            opt.step()
            losses.append(loss.item())
    torch.testing.assert_close(torch.tensor(losses_e), torch.tensor(losses_c), rtol=1e-5, atol=1e-5)
    assert losses_c[-1] < losses_c[0]
    for p, pe in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(pe.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5)
    assert stats.native("aten::_thnn_fused_lstm_cell") == 4 * 6


# -- PyTorch's own ModuleInfo samples (there are no OpInfos for these ops) -----------------------

def _module_samples():
    from torch.testing._internal.common_modules import module_db
    classes = (torch.nn.LSTM, torch.nn.GRU, torch.nn.LSTMCell, torch.nn.GRUCell)
    # The samples are drawn at collection time: seeded here, so they do not depend on which test
    # modules were collected before this one.
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(0)
    for info in module_db:
        if info.module_cls in classes:
            inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                             training=False)
            for k, sample in enumerate(inputs):
                yield pytest.param(info.module_cls, sample, id=f"{info.name}-{k}")
    torch.random.set_rng_state(generator_state)


def _leaves(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _leaves(v)]
    return []


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("cls,sample", list(_module_samples()))
def test_module_info_samples(cls, sample):
    import copy
    torch.manual_seed(0)
    cpu = cls(*sample.constructor_input.args, **sample.constructor_input.kwargs)
    dev = copy.deepcopy(cpu).to("emu")
    args_c = map_tensors(lambda t: t.detach().clone().requires_grad_(), sample.forward_input.args)
    args_e = map_tensors(lambda t: t.detach().to("emu").requires_grad_(), sample.forward_input.args)
    out_c, out_e = cpu(*args_c), dev(*args_e)
    for a, b in zip(_leaves(out_e), _leaves(out_c)):
        close(a, b, torch.float32)
    sum(t.sum() for t in _leaves(out_c)).backward()
    sum(t.sum() for t in _leaves(out_e)).backward()
    for a, b in zip(_leaves(args_e), _leaves(args_c)):
        close(a.grad, b.grad, torch.float32)
    # Weight gradients sum over every time step and batch row, in the device's order, not CPU's:
    # float32 at the 1e-4 of the long sums (conformance.LONG_SUM_TOLERANCE; 1e-5 failed by 1.8e-5
    # on one GRU sample's random inputs).
    for (name, p), pe in zip(cpu.named_parameters(), dev.parameters()):
        assert pe.grad is not None, name
        torch.testing.assert_close(pe.grad.cpu().double(), p.grad.double(), rtol=1e-4, atol=1e-4)
