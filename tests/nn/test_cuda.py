"""Device-agnostic: the same model on CUDA (skipped where there is no GPU)."""

from __future__ import annotations

import pytest
import torch
from reference import liquid_literal, recurrence_s4
from test_layer import make, randomize

from liquid_stream import LiquidS4, LiquidS4Model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("mode", ["dplr", "diag"])
@pytest.mark.parametrize("liquid", ["pb", "kb"])
def test_cuda_matches_cpu_and_recurrence(mode, liquid):
    layer = make(mode, liquid, 3)  # float64, CPU
    u = torch.randn(2, 300, 3, dtype=torch.float64)
    y_cpu = layer(u)
    layer_gpu = layer.to("cuda")
    y_gpu = layer_gpu(u.cuda())
    assert rel(y_gpu.cpu(), y_cpu) < 1e-9
    mats = {k: (v.cpu() if torch.is_tensor(v) else v) for k, v in layer_gpu.ssm_matrices().items()}
    assert rel(y_gpu.cpu(), recurrence_s4(mats, u) + liquid_literal(mats, u)) < 1e-9


@pytest.mark.parametrize("mode", ["dplr", "diag"])
def test_cuda_gradients_match_cpu(mode):
    """float64: the same gradients on both devices; float32: the same forward."""
    torch.manual_seed(0)
    cpu = randomize(LiquidS4(16, d_state=32, mode=mode, liquid="kb")).double()
    gpu = LiquidS4(16, d_state=32, mode=mode, liquid="kb").double().cuda()
    gpu.load_state_dict(cpu.state_dict())
    u = torch.randn(2, 2000, 16, dtype=torch.float64)
    g = torch.randn(2, 2000, 16, dtype=torch.float64)
    (cpu(u) * g).sum().backward()
    (gpu(u.cuda()) * g.cuda()).sum().backward()
    for (name, a), b in zip(cpu.named_parameters(), gpu.parameters(), strict=True):
        assert rel(b.grad.cpu(), a.grad) < 1e-8, name
    y32 = gpu.float()(u.float().cuda()).cpu()
    assert rel(y32, cpu.float()(u.float())) < 1e-4


def test_cuda_streaming_and_export(tmp_path):
    from liquid_stream.export.pipeline import export_model, verify_onnx

    torch.manual_seed(0)
    m = (
        LiquidS4Model(
            1,
            4,
            d_model=16,
            n_layers=2,
            d_state=7,
            liquid="pb",
            decoder="window",
            decoder_window=40,
        )
        .cuda()
        .eval()
        .double()
    )
    x = torch.randn(1, 1000, 1, dtype=torch.float64, device="cuda")
    sm = m.streaming(dtype=torch.float64)
    state, ys = sm.init_state(1), []
    for pos in range(0, 1000, 77):
        y, state = sm(x[:, pos : pos + 77], state)
        ys.append(y)
    assert rel(torch.cat(ys, 1), m.forward_steps(x)) < 1e-9
    export_model(m, tmp_path / "m.onnx", chunk=64)
    report = verify_onnx(m, tmp_path / "m.onnx", length=4000)
    assert report.ok, str(report)


def test_cuda_ltc_matches_cpu_forward_gradients_and_streaming():
    """liquid='ltc' on CUDA (large time segments there): forward, gradients and the step form
    equal the CPU results (float64)."""
    from test_streaming import chunk_sizes, stream

    from liquid_stream.nn.layer import LiquidS4Step

    torch.manual_seed(0)
    cpu = randomize(LiquidS4(16, d_state=32, mode="diag", liquid="ltc")).double()
    gpu = LiquidS4(16, d_state=32, mode="diag", liquid="ltc").double().cuda()
    gpu.load_state_dict(cpu.state_dict())
    u = torch.randn(2, 5000, 16, dtype=torch.float64)
    g = torch.randn(2, 5000, 16, dtype=torch.float64)
    y_cpu, y_gpu = cpu(u), gpu(u.cuda())
    assert rel(y_gpu.detach().cpu(), y_cpu.detach()) < 1e-9
    (y_cpu * g).sum().backward()
    (y_gpu * g.cuda()).sum().backward()
    for (name, a), b in zip(cpu.named_parameters(), gpu.parameters(), strict=True):
        assert rel(b.grad.cpu(), a.grad) < 1e-8, name
    step = LiquidS4Step(gpu, dtype=torch.float64)
    y_step = stream(step, u.cuda(), chunk_sizes("mix", 5000))
    assert rel(y_step.cpu(), y_cpu.detach()) < 1e-9
