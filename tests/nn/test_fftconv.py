"""The causal FFT convolution and its real-FFT backward against the literal sum (float64)."""

import pytest
import torch

from liquid_stream.nn.fftconv import causal_fft_conv


def brute(K: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """y[b, h, t] = Σ_r Σ_{j≤t} K[r, h, j] s[r, b, h, t − j], summed literally."""
    R, B, H, L = s.shape
    out = []
    for t in range(L):
        acc = torch.zeros(B, H, dtype=s.dtype)
        for j in range(t + 1):
            acc = acc + (K[:, None, :, j] * s[..., t - j]).sum(0)
        out.append(acc)
    return torch.stack(out, -1)


@pytest.mark.parametrize("R,B,H,L", [(1, 2, 3, 1), (1, 3, 2, 7), (3, 2, 4, 16), (2, 1, 1, 33)])
def test_forward_and_gradients_equal_the_literal_sum(R, B, H, L):
    g = torch.Generator().manual_seed(L + 10 * R)
    K = torch.randn(R, H, L, dtype=torch.float64, generator=g, requires_grad=True)
    s = torch.randn(R, B, H, L, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(B, H, L, dtype=torch.float64, generator=g)  # upstream gradient
    y = causal_fft_conv(K, s)
    y_ref = brute(K, s)
    assert y.shape == (B, H, L)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
    dK, ds = torch.autograd.grad((y * w).sum(), (K, s))
    dK_ref, ds_ref = torch.autograd.grad((y_ref * w).sum(), (K, s))
    torch.testing.assert_close(dK, dK_ref, rtol=0, atol=1e-11)
    torch.testing.assert_close(ds, ds_ref, rtol=0, atol=1e-11)


def test_gradcheck_and_one_sided_gradients():
    g = torch.Generator().manual_seed(0)
    K = torch.randn(2, 3, 9, dtype=torch.float64, generator=g, requires_grad=True)
    s = torch.randn(2, 2, 3, 9, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(causal_fft_conv, (K, s))
    # only the kernel needs a gradient (the input of the first layer does not)
    (dK,) = torch.autograd.grad(causal_fft_conv(K, s.detach()).sum(), (K,))
    (dK_ref,) = torch.autograd.grad(brute(K, s.detach()).sum(), (K,))
    torch.testing.assert_close(dK, dK_ref, rtol=0, atol=1e-11)


def test_causal_an_input_changes_no_earlier_output():
    g = torch.Generator().manual_seed(1)
    K = torch.randn(1, 2, 20, dtype=torch.float64, generator=g)
    s = torch.randn(1, 1, 2, 20, dtype=torch.float64, generator=g)
    s2 = s.clone()
    s2[..., 12:] += 1.0
    y, y2 = causal_fft_conv(K, s), causal_fft_conv(K, s2)
    assert (y[..., :12] - y2[..., :12]).abs().max() < 1e-12  # FFT rounding only
    assert (y[..., 12:] - y2[..., 12:]).abs().max() > 1e-3


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="K \\(R, H, L\\)"):
        causal_fft_conv(torch.zeros(1, 2, 5), torch.zeros(1, 3, 2, 4))
    with pytest.raises(ValueError, match="K \\(R, H, L\\)"):
        causal_fft_conv(torch.zeros(2, 2, 5), torch.zeros(1, 3, 2, 5))
