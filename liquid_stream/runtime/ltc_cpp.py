"""The fused LTC scan in C++: its source and its build (compiled at first use, cached).

Per channel (b, h) and mode m, exactly the recurrence of :mod:`liquid_stream.nn.ltc`:

    a_t = Ā + B̃ g_t,  g_t = tanh(u_t),   x_t = a_t x_{t−1} + B̄ u_t,   y_t = s·Re Σ_m C_m x_t

Two libraries are built from :data:`SOURCE`: the training kernel
(:mod:`liquid_stream.nn.ltc_kernel`, forward and backward through ctypes) and onnxruntime's
custom op ``ai.liquid_stream::LtcScan`` (:mod:`liquid_stream.runtime.ltc_ort`, the forward). This
module imports no torch, so an exported graph runs without it.

**Forward.** The state x (M complex numbers per channel) stays in registers or L1 while the
loop runs over time: the kernel reads u and g and writes y, where the blocked torch scan
writes and reads every state (M× the memory traffic). Channels are processed in groups of
``W`` lanes (consecutive b·H + h, the SIMD width of the loops over lanes, which g++
vectorises); time is cut into segments of ``K`` steps, and within a segment the loop runs
over the segment's steps for two modes at a time (their coefficients and states stay in
registers, two independent recurrences hide each other's latency; y of the segment
accumulates in a small buffer). The state entering every segment is kept
(``(n_seg, B, H, M)``, 1/K of the states) for the backward pass.

**Backward.** Segments in reverse, per mode: recompute the segment's states from its
checkpoint into a buffer of K states, then run the adjoint backwards in time,

    λ_t = s·ȳ_t conj(C) + conj(a_{t+1}) λ_{t+1}   (λ of the last step: + ∂ℓ/∂x_{L−1})

and accumulate exactly the gradients of ``_LTCScan.backward`` (PyTorch's convention for
complex gradients): with ga_t = λ_t conj(x_{t−1}),

    ∂ℓ/∂Ā = Σ ga_t,  ∂ℓ/∂B̃ = Σ ga_t g_t,  ∂ℓ/∂B̄ = Σ λ_t u_t,  ∂ℓ/∂C = s Σ ȳ_t conj(x_t),
    ∂ℓ/∂u_t = (1 − g_t²) Re Σ_m ga_t conj(B̃) + Re Σ_m λ_t conj(B̄),  ∂ℓ/∂x_{−1} = conj(a_0) λ_0,

summed over time per channel in the kernel and over the batch by torch. Numerically the same
products and sums of numbers of modulus < 1 as the torch path: nothing new can overflow.

**Build.** :func:`build` compiles a source with the system C++ compiler (``$CXX``, default
``g++``) into a plain shared library (no torch headers: ~1 s). On x86-64 Linux the hot
functions are compiled for x86-64-v4 (AVX-512), v3 (AVX2 + FMA) and the baseline, the loader
picks one per CPU (``target_clones``), so the built file is portable; elsewhere plain
``-O3``. A library is cached by a hash of its source, the flags and the compiler's version:
in ``.cache/ltc_kernel`` of a source checkout (compiled once per clone), otherwise in
``$LIQUID_STREAM_CACHE/ltc_kernel`` (default ``~/.cache/liquid-stream``). A cached library is
used only when it has the size and SHA-256 recorded next to it at its build
(``<name>.so.sha256``, :func:`cached_ok`); otherwise (truncated, emptied, no record) it is
rebuilt: a truncated library crashes the process that loads it with SIGBUS, no message.
What a failed build means is the caller's: the training kernel falls back to the torch scan
with a warning (:func:`liquid_stream.nn.ltc_kernel.library`), the custom op says why it is
unavailable.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

SEGMENT = 128  # K: steps per checkpointed segment (backward buffers: a few K·W states)
SERIAL_BELOW = 1 << 16  # mode-steps (B·H·M·L) under which one thread runs the kernel

SOURCE = r"""
// Fused LTC scan (liquid_stream/nn/ltc_kernel.py). Layouts (row-major, contiguous):
//   u, g, y, gy, gu: (L, C) real, C = B*H channels, c = b*H + h
//   A, Bl, Bb, Cc:   (H, M, 2) real (re, im) pairs
//   x0, xlast, gxlast, gx0: (C, M, 2);  ckpt: (nseg, C, M, 2), state entering segment k
//   gcoef: (C, 4, M, 2): per channel gA, gBl, gBb, gC (summed over time, not over b)
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define LTC_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LTC_CLONES
#endif
#define LTC_INLINE __attribute__((always_inline)) inline

namespace {

template <typename T>
struct Args {
  const T *u, *g, *gy, *A, *Bl, *Bb, *Cc, *x0, *gxlast, *ckpt_in;
  T *y, *xlast, *ckpt, *gu, *gx0, *gcoef;
  int64_t L, C, H, M, K;
  T scale;
};

// Lane vectors of a group's coefficients, (M, W) each: A, Bl, Bb, C (re, im).
template <typename T, int W>
struct Coefs {
  std::vector<T> ar, ai, lr, li, br, bi, cr, ci;
  Coefs(const Args<T>& p, int64_t c0) {
    const int64_t M = p.M, n = M * W;
    for (auto* v : {&ar, &ai, &lr, &li, &br, &bi, &cr, &ci}) v->assign(n, T(0));
    for (int j = 0; j < W && c0 + j < p.C; ++j) {
      const int64_t h = (c0 + j) % p.H;
      for (int64_t m = 0; m < M; ++m) {
        const int64_t s = (h * M + m) * 2, d = m * W + j;
        ar[d] = p.A[s]; ai[d] = p.A[s + 1];
        lr[d] = p.Bl[s]; li[d] = p.Bl[s + 1];
        br[d] = p.Bb[s]; bi[d] = p.Bb[s + 1];
        cr[d] = p.Cc[s]; ci[d] = p.Cc[s + 1];
      }
    }
  }
};

// (C, M, 2) complex rows of the group's channels <-> (M, W) lane arrays.
template <typename T, int W>
LTC_INLINE void gather_state(const T* src, int64_t c0, int64_t C, int64_t M, T* re, T* im) {
  for (int j = 0; j < W; ++j)
    for (int64_t m = 0; m < M; ++m) {
      const bool ok = c0 + j < C;
      re[m * W + j] = ok ? src[((c0 + j) * M + m) * 2] : T(0);
      im[m * W + j] = ok ? src[((c0 + j) * M + m) * 2 + 1] : T(0);
    }
}

template <typename T, int W>
LTC_INLINE void scatter_state(T* dst, int64_t c0, int64_t C, int64_t M, const T* re, const T* im) {
  for (int j = 0; j < W && c0 + j < C; ++j)
    for (int64_t m = 0; m < M; ++m) {
      dst[((c0 + j) * M + m) * 2] = re[m * W + j];
      dst[((c0 + j) * M + m) * 2 + 1] = im[m * W + j];
    }
}

// (L, C) columns c0 .. c0+W of steps t0 .. t0+n -> (n, W), zero outside the channels.
template <typename T, int W>
LTC_INLINE void gather_steps(const T* src, int64_t t0, int64_t n, int64_t c0, int64_t C, T* dst) {
  const int nv = int(std::min<int64_t>(W, C - c0));
  for (int64_t t = 0; t < n; ++t) {
    const T* s = src + (t0 + t) * C + c0;
    T* d = dst + t * W;
    if (nv == W) {
      for (int j = 0; j < W; ++j) d[j] = s[j];
    } else {
      for (int j = 0; j < W; ++j) d[j] = j < nv ? s[j] : T(0);
    }
  }
}

// (n, W) -> (L, C) columns c0 .. c0+W of steps t0 .. t0+n (the channels that exist).
template <typename T, int W>
LTC_INLINE void scatter_steps(const T* src, int64_t t0, int64_t n, int64_t c0, int64_t C, T* dst) {
  const int nv = int(std::min<int64_t>(W, C - c0));
  for (int64_t t = 0; t < n; ++t) {
    const T* s = src + t * W;
    T* d = dst + (t0 + t) * C + c0;
    if (nv == W) {
      for (int j = 0; j < W; ++j) d[j] = s[j];
    } else {
      for (int j = 0; j < nv; ++j) d[j] = s[j];
    }
  }
}

// One mode over n steps from x (xr, xi), x_t = (a + l g_t) x_{t-1} + b u_t, every x_t stored
// (xs_r, xs_i (n, W)); x is left at the last step.
template <typename T, int W>
LTC_INLINE void mode_states(const T* __restrict us, const T* __restrict gs, int64_t n,
                            const T* ar, const T* ai, const T* lr, const T* li, const T* br,
                            const T* bi, T* __restrict xr, T* __restrict xi,
                            T* __restrict xs_r, T* __restrict xs_i) {
  T Ar[W], Ai[W], Lr[W], Li[W], Br[W], Bi[W], Xr[W], Xi[W];
  for (int j = 0; j < W; ++j) {
    Ar[j] = ar[j]; Ai[j] = ai[j]; Lr[j] = lr[j]; Li[j] = li[j];
    Br[j] = br[j]; Bi[j] = bi[j]; Xr[j] = xr[j]; Xi[j] = xi[j];
  }
  for (int64_t t = 0; t < n; ++t) {
    const T* ut = us + t * W;
    const T* gt = gs + t * W;
    for (int j = 0; j < W; ++j) {
      const T a_r = Ar[j] + Lr[j] * gt[j], a_i = Ai[j] + Li[j] * gt[j];
      const T nr = a_r * Xr[j] - a_i * Xi[j] + Br[j] * ut[j];
      const T ni = a_r * Xi[j] + a_i * Xr[j] + Bi[j] * ut[j];
      Xr[j] = nr;
      Xi[j] = ni;
      xs_r[t * W + j] = nr;
      xs_i[t * W + j] = ni;
    }
  }
  for (int j = 0; j < W; ++j) {
    xr[j] = Xr[j];
    xi[j] = Xi[j];
  }
}

// P modes (o, o + W, … in the lane arrays) over n steps, y_t += Σ Re(c x_t): P independent
// recurrences in flight hide the latency of one (two dependent FMAs a step).
template <typename T, int W, int P>
LTC_INLINE void modes_y(const T* __restrict us, const T* __restrict gs, int64_t n,
                        const Coefs<T, W>& k, int64_t o, T* __restrict xr, T* __restrict xi,
                        T* __restrict ys) {
  T Ar[P][W], Ai[P][W], Lr[P][W], Li[P][W], Br[P][W], Bi[P][W], Cr[P][W], Ci[P][W];
  T Xr[P][W], Xi[P][W];
  for (int q = 0; q < P; ++q)
    for (int j = 0; j < W; ++j) {
      const int64_t i = o + q * W + j;
      Ar[q][j] = k.ar[i]; Ai[q][j] = k.ai[i]; Lr[q][j] = k.lr[i]; Li[q][j] = k.li[i];
      Br[q][j] = k.br[i]; Bi[q][j] = k.bi[i]; Cr[q][j] = k.cr[i]; Ci[q][j] = k.ci[i];
      Xr[q][j] = xr[i]; Xi[q][j] = xi[i];
    }
  for (int64_t t = 0; t < n; ++t) {
    const T* ut = us + t * W;
    const T* gt = gs + t * W;
    for (int j = 0; j < W; ++j) {
      T yt = T(0);
#pragma GCC unroll 4
      for (int q = 0; q < P; ++q) {
        const T a_r = Ar[q][j] + Lr[q][j] * gt[j], a_i = Ai[q][j] + Li[q][j] * gt[j];
        const T nr = a_r * Xr[q][j] - a_i * Xi[q][j] + Br[q][j] * ut[j];
        const T ni = a_r * Xi[q][j] + a_i * Xr[q][j] + Bi[q][j] * ut[j];
        Xr[q][j] = nr;
        Xi[q][j] = ni;
        yt += Cr[q][j] * nr - Ci[q][j] * ni;
      }
      ys[t * W + j] += yt;
    }
  }
  for (int q = 0; q < P; ++q)
    for (int j = 0; j < W; ++j) {
      xr[o + q * W + j] = Xr[q][j];
      xi[o + q * W + j] = Xi[q][j];
    }
}

template <typename T, int W>
LTC_INLINE void forward_group(const Args<T>& p, int64_t c0) {
  const int64_t M = p.M, K = p.K, C = p.C;
  Coefs<T, W> k(p, c0);
  std::vector<T> xr(M * W), xi(M * W), us(K * W), gs(K * W), ys(K * W);
  gather_state<T, W>(p.x0, c0, C, M, xr.data(), xi.data());
  for (int64_t s = 0, t0 = 0; t0 < p.L; ++s, t0 += K) {
    const int64_t n = std::min(K, p.L - t0);
    if (p.ckpt) scatter_state<T, W>(p.ckpt + s * C * M * 2, c0, C, M, xr.data(), xi.data());
    gather_steps<T, W>(p.u, t0, n, c0, C, us.data());
    gather_steps<T, W>(p.g, t0, n, c0, C, gs.data());
    std::fill(ys.begin(), ys.begin() + n * W, T(0));
    const T *u_s = us.data(), *g_s = gs.data();
    int64_t m = 0;
    for (; m + 2 <= M; m += 2)
      modes_y<T, W, 2>(u_s, g_s, n, k, m * W, xr.data(), xi.data(), ys.data());
    if (m < M) modes_y<T, W, 1>(u_s, g_s, n, k, m * W, xr.data(), xi.data(), ys.data());
    for (int64_t i = 0; i < n * W; ++i) ys[i] *= p.scale;
    scatter_steps<T, W>(ys.data(), t0, n, c0, C, p.y);
  }
  scatter_state<T, W>(p.xlast, c0, C, M, xr.data(), xi.data());
}

template <typename T, int W>
LTC_INLINE void backward_group(const Args<T>& p, int64_t c0) {
  const int64_t M = p.M, K = p.K, C = p.C;
  const int64_t nseg = (p.L + K - 1) / K;
  const int nv = int(std::min<int64_t>(W, C - c0));
  Coefs<T, W> k(p, c0);
  // carry: ∂ℓ/∂x at the end of the segment being processed (λ's contribution from later steps)
  std::vector<T> kr(M * W), ki(M * W), x_in_r(M * W), x_in_i(M * W);
  std::vector<T> acc(8 * M * W, T(0));  // gA, gBl, gBb, s*Σ ȳ x: (re, im) × (M, W) each
  std::vector<T> us(K * W), gs(K * W), sy(K * W), s1(K * W), s2(K * W);
  std::vector<T> xs_r((K + 1) * W), xs_i((K + 1) * W);  // x_{t0-1} .. x_{t0+n-1}
  gather_state<T, W>(p.gxlast, c0, C, M, kr.data(), ki.data());
  for (int64_t s = nseg - 1; s >= 0; --s) {
    const int64_t t0 = s * K, n = std::min(K, p.L - t0);
    gather_state<T, W>(p.ckpt_in + s * C * M * 2, c0, C, M, x_in_r.data(), x_in_i.data());
    gather_steps<T, W>(p.u, t0, n, c0, C, us.data());
    gather_steps<T, W>(p.g, t0, n, c0, C, gs.data());
    gather_steps<T, W>(p.gy, t0, n, c0, C, sy.data());
    for (int64_t i = 0; i < n * W; ++i) sy[i] *= p.scale;
    std::fill(s1.begin(), s1.begin() + n * W, T(0));
    std::fill(s2.begin(), s2.begin() + n * W, T(0));
    for (int64_t m = 0; m < M; ++m) {
      const int64_t o = m * W;
      const T *ar = &k.ar[o], *ai = &k.ai[o], *lr = &k.lr[o], *li = &k.li[o];
      const T *br = &k.br[o], *bi = &k.bi[o], *cr = &k.cr[o], *ci = &k.ci[o];
      for (int j = 0; j < W; ++j) {
        xs_r[j] = x_in_r[o + j];
        xs_i[j] = x_in_i[o + j];
      }
      T xr[W], xi[W];
      for (int j = 0; j < W; ++j) {
        xr[j] = xs_r[j];
        xi[j] = xs_i[j];
      }
      mode_states<T, W>(us.data(), gs.data(), n, ar, ai, lr, li, br, bi, xr, xi,
                        xs_r.data() + W, xs_i.data() + W);
      T Ar[W], Ai[W], Lr[W], Li[W], Br[W], Bi[W], Cr[W], Ci[W], Kr[W], Ki[W];
      T gAr[W], gAi[W], gLr[W], gLi[W], gBr[W], gBi[W], gCr[W], gCi[W];
      T* a = &acc[0];
      for (int j = 0; j < W; ++j) {
        Ar[j] = ar[j]; Ai[j] = ai[j]; Lr[j] = lr[j]; Li[j] = li[j];
        Br[j] = br[j]; Bi[j] = bi[j]; Cr[j] = cr[j]; Ci[j] = ci[j];
        Kr[j] = kr[o + j]; Ki[j] = ki[o + j];
        gAr[j] = a[0 * M * W + o + j]; gAi[j] = a[1 * M * W + o + j];
        gLr[j] = a[2 * M * W + o + j]; gLi[j] = a[3 * M * W + o + j];
        gBr[j] = a[4 * M * W + o + j]; gBi[j] = a[5 * M * W + o + j];
        gCr[j] = a[6 * M * W + o + j]; gCi[j] = a[7 * M * W + o + j];
      }
      for (int64_t t = n - 1; t >= 0; --t) {
        const T* __restrict xt_r = xs_r.data() + (t + 1) * W;  // x_t
        const T* __restrict xt_i = xs_i.data() + (t + 1) * W;
        const T* __restrict xp_r = xs_r.data() + t * W;  // x_{t-1}
        const T* __restrict xp_i = xs_i.data() + t * W;
        const T* __restrict ut = us.data() + t * W;
        const T* __restrict gt = gs.data() + t * W;
        const T* __restrict yt = sy.data() + t * W;
        T* __restrict s1t = s1.data() + t * W;
        T* __restrict s2t = s2.data() + t * W;
        for (int j = 0; j < W; ++j) {
          const T ybar = yt[j], gj = gt[j], uj = ut[j];
          const T lam_r = ybar * Cr[j] + Kr[j], lam_i = Ki[j] - ybar * Ci[j];
          const T ga_r = lam_r * xp_r[j] + lam_i * xp_i[j];
          const T ga_i = lam_i * xp_r[j] - lam_r * xp_i[j];
          gAr[j] += ga_r; gAi[j] += ga_i;
          gLr[j] += ga_r * gj; gLi[j] += ga_i * gj;
          gBr[j] += lam_r * uj; gBi[j] += lam_i * uj;
          gCr[j] += ybar * xt_r[j]; gCi[j] += ybar * xt_i[j];
          s1t[j] += ga_r * Lr[j] + ga_i * Li[j];
          s2t[j] += lam_r * Br[j] + lam_i * Bi[j];
          const T a_r = Ar[j] + Lr[j] * gj, a_i = Ai[j] + Li[j] * gj;
          Kr[j] = a_r * lam_r + a_i * lam_i;  // conj(a_t) λ_t
          Ki[j] = a_r * lam_i - a_i * lam_r;
        }
      }
      for (int j = 0; j < W; ++j) {
        kr[o + j] = Kr[j]; ki[o + j] = Ki[j];
        a[0 * M * W + o + j] = gAr[j]; a[1 * M * W + o + j] = gAi[j];
        a[2 * M * W + o + j] = gLr[j]; a[3 * M * W + o + j] = gLi[j];
        a[4 * M * W + o + j] = gBr[j]; a[5 * M * W + o + j] = gBi[j];
        a[6 * M * W + o + j] = gCr[j]; a[7 * M * W + o + j] = gCi[j];
      }
    }
    for (int64_t i = 0; i < n * W; ++i) s1[i] = (T(1) - gs[i] * gs[i]) * s1[i] + s2[i];
    scatter_steps<T, W>(s1.data(), t0, n, c0, C, p.gu);
  }
  scatter_state<T, W>(p.gx0, c0, C, M, kr.data(), ki.data());
  for (int j = 0; j < nv; ++j)
    for (int64_t q = 0; q < 4; ++q)
      for (int64_t m = 0; m < M; ++m) {
        const T re = acc[(2 * q) * M * W + m * W + j], im = acc[(2 * q + 1) * M * W + m * W + j];
        T* d = p.gcoef + (((c0 + j) * 4 + q) * M + m) * 2;
        d[0] = re;
        d[1] = q == 3 ? -im : im;  // ∂ℓ/∂C = conj(s Σ ȳ x)
      }
}

// Groups first, first + step, ... (one thread's share).
LTC_CLONES void groups_f32(const Args<float>* p, int64_t first, int64_t step, int backward) {
  for (int64_t c0 = first * 16; c0 < p->C; c0 += step * 16)
    backward ? backward_group<float, 16>(*p, c0) : forward_group<float, 16>(*p, c0);
}

LTC_CLONES void groups_f64(const Args<double>* p, int64_t first, int64_t step, int backward) {
  for (int64_t c0 = first * 8; c0 < p->C; c0 += step * 8)
    backward ? backward_group<double, 8>(*p, c0) : forward_group<double, 8>(*p, c0);
}

template <typename T>
void groups(const Args<T>* p, int64_t first, int64_t step, int backward);
template <>
void groups<float>(const Args<float>* p, int64_t first, int64_t step, int backward) {
  groups_f32(p, first, step, backward);
}
template <>
void groups<double>(const Args<double>* p, int64_t first, int64_t step, int backward) {
  groups_f64(p, first, step, backward);
}

template <typename T>
void run(const Args<T>& p, int W, int threads, int backward) {
  const int64_t n_groups = (p.C + W - 1) / W;
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(threads, n_groups));
  std::vector<std::thread> pool;
  for (int64_t r = 1; r < nt; ++r) pool.emplace_back(groups<T>, &p, r, nt, backward);
  groups<T>(&p, 0, nt, backward);
  for (auto& th : pool) th.join();
}

template <typename T>
void forward(const T* u, const T* g, const T* A, const T* Bl, const T* Bb, const T* Cc,
             const T* x0, T* y, T* xlast, T* ckpt, int64_t L, int64_t C, int64_t H, int64_t M,
             int64_t K, T scale, int W, int threads) {
  Args<T> p{u, g, nullptr, A, Bl, Bb, Cc, x0, nullptr, nullptr, y, xlast, ckpt,
            nullptr, nullptr, nullptr, L, C, H, M, K, scale};
  run(p, W, threads, 0);
}

template <typename T>
void backward(const T* u, const T* g, const T* gy, const T* A, const T* Bl, const T* Bb,
              const T* Cc, const T* gxlast, const T* ckpt, T* gu, T* gx0, T* gcoef, int64_t L,
              int64_t C, int64_t H, int64_t M, int64_t K, T scale, int W, int threads) {
  Args<T> p{u, g, gy, A, Bl, Bb, Cc, nullptr, gxlast, ckpt, nullptr, nullptr, nullptr,
            gu, gx0, gcoef, L, C, H, M, K, scale};
  run(p, W, threads, 1);
}

}  // namespace

extern "C" {
int ltc_lanes_f32() { return 16; }
int ltc_lanes_f64() { return 8; }
void ltc_forward_f32(const float* u, const float* g, const float* A, const float* Bl,
                     const float* Bb, const float* Cc, const float* x0, float* y, float* xlast,
                     float* ckpt, int64_t L, int64_t C, int64_t H, int64_t M, int64_t K,
                     double scale, int threads) {
  forward<float>(u, g, A, Bl, Bb, Cc, x0, y, xlast, ckpt, L, C, H, M, K, float(scale), 16,
                 threads);
}
void ltc_forward_f64(const double* u, const double* g, const double* A, const double* Bl,
                     const double* Bb, const double* Cc, const double* x0, double* y,
                     double* xlast, double* ckpt, int64_t L, int64_t C, int64_t H, int64_t M,
                     int64_t K, double scale, int threads) {
  forward<double>(u, g, A, Bl, Bb, Cc, x0, y, xlast, ckpt, L, C, H, M, K, scale, 8, threads);
}
void ltc_backward_f32(const float* u, const float* g, const float* gy, const float* A,
                      const float* Bl, const float* Bb, const float* Cc, const float* gxlast,
                      const float* ckpt, float* gu, float* gx0, float* gcoef, int64_t L,
                      int64_t C, int64_t H, int64_t M, int64_t K, double scale, int threads) {
  backward<float>(u, g, gy, A, Bl, Bb, Cc, gxlast, ckpt, gu, gx0, gcoef, L, C, H, M, K,
                  float(scale), 16, threads);
}
void ltc_backward_f64(const double* u, const double* g, const double* gy, const double* A,
                      const double* Bl, const double* Bb, const double* Cc,
                      const double* gxlast, const double* ckpt, double* gu, double* gx0,
                      double* gcoef, int64_t L, int64_t C, int64_t H, int64_t M, int64_t K,
                      double scale, int threads) {
  backward<double>(u, g, gy, A, Bl, Bb, Cc, gxlast, ckpt, gu, gx0, gcoef, L, C, H, M, K, scale,
                   8, threads);
}
}
"""

CFLAGS = ["-O3", "-std=c++17", "-shared", "-fPIC", "-pthread"]


def cache_dir() -> Path:
    """Where the built library is kept: ``.cache/ltc_kernel`` of a source checkout, else
    ``$LIQUID_STREAM_CACHE/ltc_kernel`` (default ``~/.cache/liquid-stream``)."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and os.access(root, os.W_OK):
        return root / ".cache" / "ltc_kernel"
    cache = os.environ.get("LIQUID_STREAM_CACHE") or os.path.join("~", ".cache", "liquid-stream")
    return Path(cache).expanduser() / "ltc_kernel"


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX") or "g++")


def build(
    cxx: str,
    source: str = SOURCE,
    stem: str = "ltc_kernel",
    flags: list[str] | None = None,
    salt: str = "",
) -> Path:
    """Compile ``source`` (default :data:`SOURCE`; or reuse the cached build) with
    :data:`CFLAGS` + ``flags``; returns the library's path. The cache key hashes the source,
    the flags, the compiler's version, the machine and ``salt`` (e.g. a header's hash)."""
    flags = [*CFLAGS, *(flags or [])]
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    key = "\n".join([source, " ".join(flags), version.stdout, platform.machine(), salt])
    out = cache_dir() / f"{stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.so"
    if cached_ok(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src, lib = Path(tmp) / f"{stem}.cpp", Path(tmp) / out.name
        src.write_text(source)
        done = subprocess.run(
            [cxx, *flags, str(src), "-o", str(lib)], capture_output=True, text=True
        )
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or ["(no output)"]
            tail = next((x for x in lines if "error" in x), lines[-1]).strip()
            raise RuntimeError(f"{cxx} failed ({done.returncode}): {tail}")
        record = json.dumps(_digest(lib))
        os.replace(lib, out)  # atomic: a concurrent build of the same key writes the same file
        stamp = Path(tmp) / "stamp"
        stamp.write_text(record)
        os.replace(stamp, _stamp_path(out))  # last: the library is trusted from now on
    return out


def _stamp_path(lib: Path) -> Path:
    return lib.with_name(lib.name + ".sha256")


def _digest(lib: Path) -> dict:
    data = lib.read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def cached_ok(lib: Path) -> bool:
    """Whether the cached library ``lib`` is the file its build recorded: its stamp
    ``<lib>.sha256`` (written after the build) gives its size and SHA-256 and the file has
    them. A truncated or emptied cache (a full disk, a killed copy) would crash the process
    that loads it (SIGBUS) or be reported as something else: :func:`build` rebuilds it."""
    try:
        want = json.loads(_stamp_path(lib).read_text())
        if lib.stat().st_size != want["bytes"]:
            return False
        return _digest(lib) == want
    except (OSError, ValueError, TypeError, KeyError):
        return False
