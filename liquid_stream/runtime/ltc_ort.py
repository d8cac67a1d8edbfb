"""The LTC recurrence as one onnxruntime custom op: ``ai.liquid_stream::LtcScan``.

The portable LTC graph (``export/emit_ltc.py``, ``_Emitter.ltc_layer``) spells the input-
dependent transition in ~250 standard elementwise ops a layer; onnxruntime runs those at a
floor of ~0.3 ns per element plus ~0.5 µs per op (docs/benchmarks.md §2.3), which keeps the
paper-size LTC model at 1.5–2.4× the PB graph's time. This op runs the same recurrence as the
fused CPU kernel of training (:mod:`liquid_stream.runtime.ltc_cpp`, whose C++ source it compiles in:
one implementation of the scan), per channel and mode m:

    a_t = Ā + B̃ g_t,  g_t = tanh(u_t),   x_t = a_t x_{t−1} + B̄ u_t,   y_t = Re Σ_m C'_m x_t

with C' = s·C (the layer's scale folded in). Operands (float32, or float64 for the exactness
tests; one type throughout):

    inputs:  u (B, T, H), g = tanh(u) (B, T, H) (onnxruntime's vectorised Tanh), x (B, 2, M, H)
             (the graph's ``ltc.x`` state: Re, Im), coef (4, H, M, 2) = Ā, B̃, B̄, C' as (re, im)
    outputs: y (B, T, H) (without D·u), x_next (B, 2, M, H)

Channel groups of the kernel's SIMD width are shared over onnxruntime's intra-op threads
(``KernelContext_ParallelFor``); each channel has one owner, so the result does not depend on
the thread count. Numerically: products and sums of numbers of modulus < 1 (as the torch
scan); nothing grows along the stream.

**Build.** The op needs the onnxruntime C API header ``onnxruntime_c_api.h``, which the
PyPI wheel does not ship. It is looked up in ``$LIQUID_STREAM_ORT_INCLUDE``, the virtual
environment's ``include/onnxruntime`` (where ``make install`` unpacks it from Debian's
``libonnxruntime-dev`` package), ``/usr/include/onnxruntime`` and
``/usr/local/include/onnxruntime``. The C API is versioned and append-only, so a header of
an older onnxruntime serves a newer runtime. The library is compiled once and cached next to
the training kernel's (:func:`liquid_stream.runtime.ltc_cpp.cache_dir`). Without a header or a
compiler, :func:`library_path` raises :class:`LtcOpUnavailable` with the reason: export with
``--ltc-op fused`` then fails with that line, and the portable graph (the default) still works.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from . import ltc_cpp

DOMAIN = "ai.liquid_stream"
OP = "LtcScan"
HEADER = "onnxruntime_c_api.h"
INCLUDE_ENV = "LIQUID_STREAM_ORT_INCLUDE"

GLUE = r"""
// onnxruntime custom op ai.liquid_stream::LtcScan (liquid_stream/runtime/ltc_ort.py) on the fused
// forward of liquid_stream/runtime/ltc_cpp.py (compiled above this text in the same unit).
#include <onnxruntime_c_api.h>
#include <climits>
#include <cstring>

namespace {

const OrtApi* g_api = nullptr;

#define LTC_TRY(expr)                    \
  do {                                   \
    OrtStatus* _st = (expr);             \
    if (_st) return _st;                 \
  } while (0)

OrtStatus* shape_of(const OrtValue* v, std::vector<int64_t>& dims) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  LTC_TRY(g_api->GetTensorTypeAndShape(v, &info));
  size_t n = 0;
  OrtStatus* st = g_api->GetDimensionsCount(info, &n);
  if (!st) {
    dims.assign(n, 0);
    st = g_api->GetDimensions(info, dims.data(), n);
  }
  g_api->ReleaseTensorTypeAndShapeInfo(info);
  return st;
}

template <typename T>
OrtStatus* data_of(const OrtValue* v, const T** out) {  // read-only use of an input
  void* p = nullptr;
  LTC_TRY(g_api->GetTensorMutableData(const_cast<OrtValue*>(v), &p));
  *out = static_cast<const T*>(p);
  return nullptr;
}

OrtStatus* bad(const char* msg) { return g_api->CreateStatus(ORT_INVALID_ARGUMENT, msg); }

template <typename T>
struct Job {
  std::vector<Args<T>> args;  // one per batch element
  int64_t n_groups;           // channel groups of the kernel's lane width per element
};

template <typename T>
void run_group(void* data, size_t i) {
  auto* job = static_cast<Job<T>*>(data);
  const int64_t b = int64_t(i) / job->n_groups, k = int64_t(i) % job->n_groups;
  groups<T>(&job->args[b], k, job->n_groups, 0);  // exactly group k of element b
}

template <typename T>
OrtStatus* compute(OrtKernelContext* ctx) {
  const OrtValue *u_v, *g_v, *x_v, *c_v;
  LTC_TRY(g_api->KernelContext_GetInput(ctx, 0, &u_v));
  LTC_TRY(g_api->KernelContext_GetInput(ctx, 1, &g_v));
  LTC_TRY(g_api->KernelContext_GetInput(ctx, 2, &x_v));
  LTC_TRY(g_api->KernelContext_GetInput(ctx, 3, &c_v));
  std::vector<int64_t> du, dg, dx, dc;
  LTC_TRY(shape_of(u_v, du));
  LTC_TRY(shape_of(g_v, dg));
  LTC_TRY(shape_of(x_v, dx));
  LTC_TRY(shape_of(c_v, dc));
  if (du.size() != 3 || dg != du) return bad("LtcScan: u and g must be (B, T, H), equal");
  const int64_t B = du[0], L = du[1], H = du[2];
  if (dc.size() != 4 || dc[0] != 4 || dc[1] != H || dc[3] != 2)
    return bad("LtcScan: coef must be (4, H, M, 2)");
  const int64_t M = dc[2];
  if (dx.size() != 4 || dx[0] != B || dx[1] != 2 || dx[2] != M || dx[3] != H)
    return bad("LtcScan: x must be (B, 2, M, H)");
  const T *u, *g, *x, *c;
  LTC_TRY(data_of(u_v, &u));
  LTC_TRY(data_of(g_v, &g));
  LTC_TRY(data_of(x_v, &x));
  LTC_TRY(data_of(c_v, &c));
  OrtValue *y_v, *xn_v;
  LTC_TRY(g_api->KernelContext_GetOutput(ctx, 0, du.data(), du.size(), &y_v));
  LTC_TRY(g_api->KernelContext_GetOutput(ctx, 1, dx.data(), dx.size(), &xn_v));
  T *y, *xn;
  LTC_TRY(g_api->GetTensorMutableData(y_v, reinterpret_cast<void**>(&y)));
  LTC_TRY(g_api->GetTensorMutableData(xn_v, reinterpret_cast<void**>(&xn)));
  const int64_t HM = H * M;
  // the state (B, 2, M, H) <-> the kernel's (B, H, M, 2)
  std::vector<T> x0(B * HM * 2), xl(B * HM * 2);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t h = 0; h < H; ++h)
          x0[((b * H + h) * M + m) * 2 + r] = x[((b * 2 + r) * M + m) * H + h];
  const int W = sizeof(T) == 4 ? ltc_lanes_f32() : ltc_lanes_f64();  // what groups<T> steps by
  Job<T> job{{}, (H + W - 1) / W};
  const T* cA = c;
  for (int64_t b = 0; b < B; ++b)
    job.args.push_back(Args<T>{u + b * L * H, g + b * L * H, nullptr, cA, cA + HM * 2,
                               cA + 2 * HM * 2, cA + 3 * HM * 2, x0.data() + b * HM * 2, nullptr,
                               nullptr, y + b * L * H, xl.data() + b * HM * 2, nullptr, nullptr,
                               nullptr, nullptr, L, H, H, M, LTC_SEGMENT, T(1)});
  const size_t total = size_t(B * job.n_groups);
  if (total > 1 && B * L * H * M >= LTC_SERIAL_BELOW) {  // the training kernel's threshold
    LTC_TRY(g_api->KernelContext_ParallelFor(ctx, run_group<T>, total, 0, &job));
  } else {
    for (size_t i = 0; i < total; ++i) run_group<T>(&job, i);
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t h = 0; h < H; ++h)
          xn[((b * 2 + r) * M + m) * H + h] = xl[((b * H + h) * M + m) * 2 + r];
  return nullptr;
}

template <typename T>
struct LtcOp : OrtCustomOp {
  static constexpr ONNXTensorElementDataType kType =
      sizeof(T) == 4 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE;
  LtcOp() {
    std::memset(static_cast<OrtCustomOp*>(this), 0, sizeof(OrtCustomOp));
    version = ORT_API_VERSION;
    GetName = [](const OrtCustomOp*) { return LTC_OP_NAME; };
    GetExecutionProviderType = [](const OrtCustomOp*) -> const char* { return nullptr; };
    GetInputType = [](const OrtCustomOp*, size_t) { return kType; };
    GetInputTypeCount = [](const OrtCustomOp*) -> size_t { return 4; };
    GetOutputType = [](const OrtCustomOp*, size_t) { return kType; };
    GetOutputTypeCount = [](const OrtCustomOp*) -> size_t { return 2; };
    GetInputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
    GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
    CreateKernelV2 = [](const OrtCustomOp*, const OrtApi*, const OrtKernelInfo*,
                        void** kernel) -> OrtStatusPtr {
      *kernel = nullptr;
      return nullptr;
    };
    KernelComputeV2 = [](void*, OrtKernelContext* ctx) -> OrtStatusPtr { return compute<T>(ctx); };
    KernelDestroy = [](void*) {};
    GetStartVersion = [](const OrtCustomOp*) { return 1; };
    GetEndVersion = [](const OrtCustomOp*) { return INT_MAX; };
  }
};

LtcOp<float> g_op_f32;
LtcOp<double> g_op_f64;

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  g_api = api_base->GetApi(ORT_API_VERSION);
  if (!g_api) return nullptr;  // an onnxruntime older than the header: cannot report
  OrtCustomOpDomain* domain = nullptr;
  LTC_TRY(g_api->CreateCustomOpDomain(LTC_OP_DOMAIN, &domain));
  LTC_TRY(g_api->CustomOpDomain_Add(domain, &g_op_f32));
  LTC_TRY(g_api->CustomOpDomain_Add(domain, &g_op_f64));
  return g_api->AddCustomOpDomain(options, domain);
}
"""


class LtcOpUnavailable(RuntimeError):
    """The custom op library cannot be built here (no header or no compiler): the reason."""


def include_dir() -> Path | None:
    """The first folder holding :data:`HEADER` among the places in the module docstring."""
    env = os.environ.get(INCLUDE_ENV)
    places = [Path(env)] if env else []
    places += [
        Path(sys.prefix) / "include" / "onnxruntime",
        Path("/usr/include/onnxruntime"),
        Path("/usr/local/include/onnxruntime"),
    ]
    return next((p for p in places if (p / HEADER).is_file()), None)


def source() -> str:
    """The op library's C++: the training kernel's source, the constants it shares with
    Python (segment, serial threshold, the op's domain and name), then :data:`GLUE`."""
    consts = (
        f"#define LTC_SEGMENT {ltc_cpp.SEGMENT}\n"
        f"#define LTC_SERIAL_BELOW {ltc_cpp.SERIAL_BELOW}\n"
        f'#define LTC_OP_DOMAIN "{DOMAIN}"\n'
        f'#define LTC_OP_NAME "{OP}"\n'
    )
    return ltc_cpp.SOURCE + consts + GLUE


@functools.cache
def library_path() -> Path:
    """The compiled op library (built at the first call, then cached); LtcOpUnavailable
    with the reason when it cannot be built here."""
    inc = include_dir()
    if inc is None:
        raise LtcOpUnavailable(
            f"the fused LTC op needs the onnxruntime C API header {HEADER} (not in the PyPI "
            f"wheel): run `make install` or set {INCLUDE_ENV} to a folder holding it"
        )
    cxx = ltc_cpp.compiler()
    if cxx is None:
        raise LtcOpUnavailable("the fused LTC op needs a C++ compiler ($CXX or g++); none found")
    header = hashlib.sha256((inc / HEADER).read_bytes()).hexdigest()
    try:
        return ltc_cpp.build(cxx, source(), "ltc_ort", [f"-I{inc}"], header)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        raise LtcOpUnavailable(f"the fused LTC op failed to build: {e}") from None


def uses_op(model) -> bool:
    """Whether an ``onnx.ModelProto`` imports the op's domain."""
    return any(o.domain == DOMAIN for o in model.opset_import)


def register(options, path: str | Path | None = None, model=None) -> None:
    """Register the op library with ``onnxruntime.SessionOptions`` ``options``; with
    ``path`` (an .onnx file) or ``model`` (its ``onnx.ModelProto``, already loaded), only
    when that model uses it."""
    if model is None and path is not None:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    if model is not None and not uses_op(model):
        return
    lib = library_path()
    if not ltc_cpp.cached_ok(lib):  # changed since this process built or checked it
        library_path.cache_clear()
        lib = library_path()
    try:
        options.register_custom_ops_library(str(lib))
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own kinds
        raise LtcOpUnavailable(f"the fused LTC op library {lib} does not load ({e})") from None
