"""The Triton kernels of :mod:`liquid_stream.nn.ltc_triton` (the math and the design are
documented there). Imported only by it, and only where Triton imports."""

import triton
import triton.language as tl


@triton.jit
def _tile(coef_ptr, c, m, C, H, M, BC: tl.constexpr, BM: tl.constexpr):
    """The (BC, BM) coefficients of channels c (b·H + h) and modes m; masks."""
    cm = c < C
    mask = cm[:, None] & (m < M)[None, :]  # (BC, BM)
    cof = ((c % H)[:, None] * M + m[None, :]) * 2  # into (H, M, 2)
    hm2 = H * M * 2  # coef: (4, H, M, 2) = Ā, B̃, B̄, C
    ar = tl.load(coef_ptr + cof, mask=mask, other=0.0)
    ai = tl.load(coef_ptr + cof + 1, mask=mask, other=0.0)
    lr = tl.load(coef_ptr + hm2 + cof, mask=mask, other=0.0)
    li = tl.load(coef_ptr + hm2 + cof + 1, mask=mask, other=0.0)
    br = tl.load(coef_ptr + 2 * hm2 + cof, mask=mask, other=0.0)
    bi = tl.load(coef_ptr + 2 * hm2 + cof + 1, mask=mask, other=0.0)
    cr = tl.load(coef_ptr + 3 * hm2 + cof, mask=mask, other=0.0)
    ci = tl.load(coef_ptr + 3 * hm2 + cof + 1, mask=mask, other=0.0)
    return cm, mask, ar, ai, lr, li, br, bi, cr, ci


# u, g, y, gy, gu are channel-major (C, L): a program's channel reads consecutive steps
# from one cache line. Each loop loads the next step's operands before it computes this
# step (their addresses do not depend on the state), so memory latency overlaps compute.
@triton.jit
def forward_kernel(
    u_ptr,
    g_ptr,
    coef_ptr,
    x0_ptr,
    y_ptr,
    xlast_ptr,
    ckpt_ptr,
    L,
    C,
    H,
    M,
    scale,
    K: tl.constexpr,
    KEEP: tl.constexpr,
    BC: tl.constexpr,
    BM: tl.constexpr,
):
    c = tl.program_id(0) * BC + tl.arange(0, BC)  # (BC,) channels b·H + h
    m = tl.arange(0, BM)  # (BM,) modes
    cm, mask, ar, ai, lr, li, br, bi, cr, ci = _tile(coef_ptr, c, m, C, H, M, BC, BM)
    row = c * L  # (BC,) offsets of the channels' rows
    sof = (c[:, None] * M + m[None, :]) * 2  # into (C, M, 2)
    xr = tl.load(x0_ptr + sof, mask=mask, other=0.0)
    xi = tl.load(x0_ptr + sof + 1, mask=mask, other=0.0)
    u_n = tl.load(u_ptr + row, mask=cm, other=0.0)
    g_n = tl.load(g_ptr + row, mask=cm, other=0.0)
    for t in range(0, L):
        if KEEP:
            if t % K == 0:  # the state entering segment t / K
                tl.store(ckpt_ptr + (t // K) * C * M * 2 + sof, xr, mask=mask)
                tl.store(ckpt_ptr + (t // K) * C * M * 2 + sof + 1, xi, mask=mask)
        ut = u_n[:, None]
        gt = g_n[:, None]
        nxt = cm & (t + 1 < L)
        u_n = tl.load(u_ptr + row + t + 1, mask=nxt, other=0.0)
        g_n = tl.load(g_ptr + row + t + 1, mask=nxt, other=0.0)
        atr = ar + lr * gt
        ati = ai + li * gt
        xr, xi = atr * xr - ati * xi + br * ut, atr * xi + ati * xr + bi * ut
        yt = tl.sum(cr * xr - ci * xi, axis=1) * scale
        tl.store(y_ptr + row + t, yt, mask=cm)
    tl.store(xlast_ptr + sof, xr, mask=mask)
    tl.store(xlast_ptr + sof + 1, xi, mask=mask)


@triton.jit
def backward_kernel(
    u_ptr,
    g_ptr,
    gy_ptr,
    coef_ptr,
    gxlast_ptr,
    ckpt_ptr,
    scratch_ptr,
    gu_ptr,
    gx0_ptr,
    gcoef_ptr,
    L,
    C,
    H,
    M,
    scale,
    K: tl.constexpr,
    BC: tl.constexpr,
    BM: tl.constexpr,
):
    pid = tl.program_id(0)
    c = pid * BC + tl.arange(0, BC)
    m = tl.arange(0, BM)
    cm, mask, ar, ai, lr, li, br, bi, cr, ci = _tile(coef_ptr, c, m, C, H, M, BC, BM)
    row = c * L
    sof = (c[:, None] * M + m[None, :]) * 2
    # scratch: (n_programs, K, BC, BM, 2), this program's K states of a segment
    scr = scratch_ptr + pid * (K * BC * BM * 2)
    lof = (tl.arange(0, BC)[:, None] * BM + m[None, :]) * 2
    step = BC * BM * 2
    # p = conj(a_{t+1}) λ_{t+1}; for the last step ∂ℓ/∂x_{L−1}
    pr = tl.load(gxlast_ptr + sof, mask=mask, other=0.0)
    pi = tl.load(gxlast_ptr + sof + 1, mask=mask, other=0.0)
    zero = ar * 0.0
    gar_s, gai_s, glr_s, gli_s = zero, zero, zero, zero
    gbr_s, gbi_s, gcr_s, gci_s = zero, zero, zero, zero
    n_seg = tl.cdiv(L, K)
    for kk in range(0, n_seg):
        t0 = (n_seg - 1 - kk) * K
        n = tl.minimum(K, L - t0)
        x_in_r = tl.load(ckpt_ptr + (t0 // K) * C * M * 2 + sof, mask=mask, other=0.0)
        x_in_i = tl.load(ckpt_ptr + (t0 // K) * C * M * 2 + sof + 1, mask=mask, other=0.0)
        xr, xi = x_in_r, x_in_i
        u_n = tl.load(u_ptr + row + t0, mask=cm, other=0.0)
        g_n = tl.load(g_ptr + row + t0, mask=cm, other=0.0)
        for i in range(0, n):  # recompute the segment's states
            ut = u_n[:, None]
            gt = g_n[:, None]
            nxt = cm & (i + 1 < n)
            u_n = tl.load(u_ptr + row + t0 + i + 1, mask=nxt, other=0.0)
            g_n = tl.load(g_ptr + row + t0 + i + 1, mask=nxt, other=0.0)
            atr = ar + lr * gt
            ati = ai + li * gt
            xr, xi = atr * xr - ati * xi + br * ut, atr * xi + ati * xr + bi * ut
            tl.store(scr + i * step + lof, xr)
            tl.store(scr + i * step + lof + 1, xi)
        # the adjoint, backwards in time: x_t is carried, x_{t−1} loaded one step ahead
        last = t0 + n - 1
        u_n = tl.load(u_ptr + row + last, mask=cm, other=0.0)
        g_n = tl.load(g_ptr + row + last, mask=cm, other=0.0)
        y_n = tl.load(gy_ptr + row + last, mask=cm, other=0.0)
        has = n >= 2
        qr_n = tl.where(
            has, tl.load(scr + (n - 2) * step + lof, mask=mask & has, other=0.0), x_in_r
        )
        qi_n = tl.where(
            has, tl.load(scr + (n - 2) * step + lof + 1, mask=mask & has, other=0.0), x_in_i
        )
        for j in range(0, n):
            i = n - 1 - j
            ut = u_n[:, None]
            gt = g_n[:, None]
            sy = y_n[:, None] * scale
            qr, qi = qr_n, qi_n  # x_{t−1}
            nxt = cm & (i >= 1)
            u_n = tl.load(u_ptr + row + t0 + i - 1, mask=nxt, other=0.0)
            g_n = tl.load(g_ptr + row + t0 + i - 1, mask=nxt, other=0.0)
            y_n = tl.load(gy_ptr + row + t0 + i - 1, mask=nxt, other=0.0)
            has = i >= 2  # x_{t−2} is in the scratch, else it is x_in
            qr_n = tl.where(
                has, tl.load(scr + (i - 2) * step + lof, mask=mask & has, other=0.0), x_in_r
            )
            qi_n = tl.where(
                has, tl.load(scr + (i - 2) * step + lof + 1, mask=mask & has, other=0.0), x_in_i
            )
            lam_r = sy * cr + pr  # λ_t = s ȳ_t conj(C) + conj(a_{t+1}) λ_{t+1}
            lam_i = pi - sy * ci
            ga_r = lam_r * qr + lam_i * qi  # λ_t conj(x_{t−1})
            ga_i = lam_i * qr - lam_r * qi
            gar_s += ga_r
            gai_s += ga_i
            glr_s += ga_r * gt
            gli_s += ga_i * gt
            gbr_s += lam_r * ut
            gbi_s += lam_i * ut
            gcr_s += sy * xr  # x_t
            gci_s -= sy * xi
            gu = (1.0 - gt * gt) * (ga_r * lr + ga_i * li) + lam_r * br + lam_i * bi
            tl.store(gu_ptr + row + t0 + i, tl.sum(gu, axis=1), mask=cm)
            atr = ar + lr * gt
            ati = ai + li * gt
            pr, pi = atr * lam_r + ati * lam_i, atr * lam_i - ati * lam_r  # conj(a_t) λ_t
            xr, xi = qr, qi
    tl.store(gx0_ptr + sof, pr, mask=mask)
    tl.store(gx0_ptr + sof + 1, pi, mask=mask)
    gof = (c[:, None] * 4 * M + m[None, :]) * 2  # into (C, 4, M, 2)
    tl.store(gcoef_ptr + gof, gar_s, mask=mask)
    tl.store(gcoef_ptr + gof + 1, gai_s, mask=mask)
    tl.store(gcoef_ptr + gof + 2 * M, glr_s, mask=mask)
    tl.store(gcoef_ptr + gof + 2 * M + 1, gli_s, mask=mask)
    tl.store(gcoef_ptr + gof + 4 * M, gbr_s, mask=mask)
    tl.store(gcoef_ptr + gof + 4 * M + 1, gbi_s, mask=mask)
    tl.store(gcoef_ptr + gof + 6 * M, gcr_s, mask=mask)
    tl.store(gcoef_ptr + gof + 6 * M + 1, gci_s, mask=mask)
