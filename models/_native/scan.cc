// The diagonal linear recurrence on the planar real form, as an XLA FFI handler for the CPU.
//
//     h_t = lam * h_{t-1} + b_t,   h_{-1} = 0        (reverse = false)
//     h_t = lam * h_{t+1} + b_t,   h_{L}  = 0        (reverse = true)
//
// Layout (models/_scan.py): b and h are (..., L, 2, P) with the real parts of row t in
// [t, 0, :] and the imaginary parts in [t, 1, :]; lam_re and lam_im are (..., P), with either
// no leading dimensions (one system for every sequence) or the same leading dimensions as b.
// float32 and float64.
//
// Why a handler rather than an XLA loop: XLA:CPU runs a `fori_loop` body as a generic
// dynamic-update-slice fusion and reached 5-7 GB/s on this recurrence (B = 8, P = 128), about a
// fifth of the machine's streaming bandwidth, whatever the loop's layout. Here each task walks
// the rows of one sequence (or of a block of its states) with the states in a small local
// array, so every step is one contiguous read of b_t and one write of h_t.
//
// h may be b's buffer (the Python side can alias them, `in_place`): every element is read
// before it is written, in the same iteration, so in-place and out-of-place runs agree.
// Threads: the sequences (and, when there are fewer sequences than threads, blocks of states)
// are shared among XLA's intra-op thread pool and the calling thread (parallel.h).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Below this many state updates a call runs on the calling thread alone: scheduling costs more.
constexpr int64_t kMinParallelWork = 1 << 16;
// States per block when one sequence is split among threads: a multiple of a 64-byte line.
constexpr int64_t kBlockAlign = 16;

template <typename T>
void ScanStates(const T* lam_re, const T* lam_im, const T* b, T* h, int64_t length,
                int64_t states, int64_t p0, int64_t p1, bool reverse) {
  const int64_t row = 2 * states;
  const int64_t n = p1 - p0;
  std::vector<T> re(n, T(0)), im(n, T(0));
  const T* lr = lam_re + p0;
  const T* li = lam_im + p0;
  for (int64_t s = 0; s < length; ++s) {
    const int64_t t = reverse ? length - 1 - s : s;
    const T* b_re = b + t * row + p0;
    const T* b_im = b_re + states;
    T* h_re = h + t * row + p0;
    T* h_im = h_re + states;
    // No iteration reads what another writes (h may equal b only element for element).
#pragma GCC ivdep
    for (int64_t k = 0; k < n; ++k) {
      const T r = lr[k] * re[k] - li[k] * im[k] + b_re[k];
      const T i = lr[k] * im[k] + li[k] * re[k] + b_im[k];
      re[k] = r;
      im[k] = i;
      h_re[k] = r;
      h_im[k] = i;
    }
  }
}

template <typename T>
void Scan(ffi::ThreadPool& pool, const T* lam_re, const T* lam_im, const T* b, T* h,
          int64_t sequences, bool lam_per_sequence, int64_t length, int64_t states,
          bool reverse) {
  const int64_t threads = pool.num_threads() + 1;
  const bool parallel = sequences * length * states >= kMinParallelWork;
  // Whole sequences per task when there are enough of them; else split the states.
  int64_t block = states;
  if (parallel && sequences < threads) {
    const int64_t parts = (threads + sequences - 1) / sequences;
    block = (states + parts - 1) / parts;
    block = std::max(kBlockAlign, (block + kBlockAlign - 1) / kBlockAlign * kBlockAlign);
  }
  const int64_t blocks = (states + block - 1) / block;
  const int64_t stride = length * 2 * states;
  linrnn::ParallelFor(pool, sequences * blocks, parallel ? threads : 1, [&](int64_t task, int64_t) {
    const int64_t n = task / blocks, p0 = (task % blocks) * block;
    const int64_t m = lam_per_sequence ? n * states : 0;
    ScanStates(lam_re + m, lam_im + m, b + n * stride, h + n * stride, length, states, p0,
               std::min(states, p0 + block), reverse);
  });
}

ffi::Error PlanarScan(ffi::ThreadPool pool, ffi::AnyBuffer lam_re, ffi::AnyBuffer lam_im,
                      ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> h, bool reverse) {
  const auto dims = b.dimensions();
  const int64_t rank = dims.size();
  if (rank < 3 || dims[rank - 2] != 2) {
    return ffi::Error::InvalidArgument("linrnn_planar_scan: b must have shape (..., L, 2, P).");
  }
  const int64_t states = dims[rank - 1], length = dims[rank - 3];
  const int64_t sequences = states * length == 0 ? 0 : b.element_count() / (2 * length * states);
  if (sequences == 0) return ffi::Error::Success();
  const int64_t systems = lam_re.element_count() / states;
  if (lam_re.element_count() != lam_im.element_count() ||
      lam_re.element_count() % states != 0 || (systems != 1 && systems != sequences)) {
    return ffi::Error::InvalidArgument(
        "linrnn_planar_scan: lam_re and lam_im must have shape (P,) or (..., P) with the "
        "leading dimensions of b.");
  }
  const auto dtype = b.element_type();
  if (lam_re.element_type() != dtype || lam_im.element_type() != dtype ||
      h->element_type() != dtype) {
    return ffi::Error::InvalidArgument("linrnn_planar_scan: all arrays need one dtype.");
  }
  const bool per_sequence = systems != 1;
  switch (dtype) {
    case ffi::DataType::F32:
      Scan(pool, lam_re.typed_data<float>(), lam_im.typed_data<float>(), b.typed_data<float>(),
           h->typed_data<float>(), sequences, per_sequence, length, states, reverse);
      return ffi::Error::Success();
    case ffi::DataType::F64:
      Scan(pool, lam_re.typed_data<double>(), lam_im.typed_data<double>(),
           b.typed_data<double>(), h->typed_data<double>(), sequences, per_sequence, length,
           states, reverse);
      return ffi::Error::Success();
    default:
      return ffi::Error::InvalidArgument(
          "linrnn_planar_scan: unsupported dtype; accepted: float32, float64.");
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LinrnnPlanarScan, PlanarScan,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // lam_re (..., P)
                                  .Arg<ffi::AnyBuffer>()  // lam_im (..., P)
                                  .Arg<ffi::AnyBuffer>()  // b (..., L, 2, P)
                                  .Ret<ffi::AnyBuffer>()  // h (..., L, 2, P)
                                  .Attr<bool>("reverse"));
