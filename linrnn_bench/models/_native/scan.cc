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
// A fresh h larger than the last-level cache is written with non-temporal (streaming) stores:
// an ordinary store first reads the line it writes (write-allocate), so a fresh output costs
// three passes over memory (read b, read h, write h) where two are needed; streaming stores
// skip the read, and the output could not have stayed in cache for its consumer anyway.
// Threads: the sequences (and, when there are fewer sequences than threads, blocks of states)
// are shared among XLA's intra-op thread pool and the calling thread (parallel.h).

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Below this many state updates a call runs on the calling thread alone: scheduling costs more.
constexpr int64_t kMinParallelWork = 1 << 16;
// States per block when one sequence is split among threads: a multiple of a 64-byte line.
constexpr int64_t kBlockAlign = 16;
// How many rows ahead the scan prefetches its input (ScanStates).
constexpr int64_t kPrefetchRows = 8;

// Outputs at least this large are streamed (see the top): LINRNN_STREAMING_BYTES if set (the
// tests set 0 to exercise the streaming path on small arrays), else the last-level cache this
// CPU sees, from sysfs (in a VM, sysconf's _SC_LEVEL3_CACHE_SIZE can report the host's: 256 MiB
// where this CPU has 32 MiB), else sysconf's, else 32 MiB.
int64_t StreamingBytes() {
  if (const char* set = std::getenv("LINRNN_STREAMING_BYTES"); set != nullptr && *set != 0) {
    return std::strtoll(set, nullptr, 10);
  }
  static const int64_t cache = [] {
    if (FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
      long size = 0;
      char unit = 0;
      const int read = std::fscanf(f, "%ld%c", &size, &unit);
      std::fclose(f);
      if (read >= 1 && size > 0) {
        const int64_t scale = unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : 1;
        return int64_t{size} * scale;
      }
    }
    const long bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return bytes > 0 ? int64_t{bytes} : int64_t{32} << 20;
  }();
  return cache;
}

// One vector of src stored to dst (aligned to kStreamAlign) without reading dst's line first.
#if defined(__AVX__)
constexpr int64_t kStreamAlign = 32;
inline void StreamVector(float* dst, const float* src) {
  _mm256_stream_ps(dst, _mm256_loadu_ps(src));
}
inline void StreamVector(double* dst, const double* src) {
  _mm256_stream_pd(dst, _mm256_loadu_pd(src));
}
#elif defined(__SSE2__)
constexpr int64_t kStreamAlign = 16;
inline void StreamVector(float* dst, const float* src) { _mm_stream_ps(dst, _mm_loadu_ps(src)); }
inline void StreamVector(double* dst, const double* src) { _mm_stream_pd(dst, _mm_loadu_pd(src)); }
#endif

// dst[0:n] = src[0:n] with non-temporal stores where dst is aligned for them (plain stores
// elsewhere); the caller fences once after the last row (StreamFence).
template <typename T>
inline void StreamRow(T* dst, const T* src, int64_t n) {
  int64_t k = 0;
#if defined(__SSE2__)
  constexpr int64_t lanes = kStreamAlign / int64_t{sizeof(T)};
  if (reinterpret_cast<uintptr_t>(dst) % kStreamAlign == 0) {
    for (; k + lanes <= n; k += lanes) StreamVector(dst + k, src + k);
  }
#endif
  for (; k < n; ++k) dst[k] = src[k];
}

inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// `stream`: write h with non-temporal stores (h must not be b then).
template <typename T>
void ScanStates(const T* lam_re, const T* lam_im, const T* b, T* h, int64_t length,
                int64_t states, int64_t p0, int64_t p1, bool reverse, bool stream) {
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
    // Software prefetch of b's row kPrefetchRows steps ahead: with it the scan alone at
    // L = 16384 ran 25-30% faster here (medians of 7 processes, in place and fresh).
    if (const int64_t ahead = reverse ? t - kPrefetchRows : t + kPrefetchRows;
        ahead >= 0 && ahead < length) {
      const char* next_re = reinterpret_cast<const char*>(b + ahead * row + p0);
      const char* next_im = next_re + states * int64_t{sizeof(T)};
      for (int64_t k = 0; k < n * int64_t{sizeof(T)}; k += 64) {
        __builtin_prefetch(next_re + k);
        __builtin_prefetch(next_im + k);
      }
    }
    if (stream) {
      for (int64_t k = 0; k < n; ++k) {
        const T r = lr[k] * re[k] - li[k] * im[k] + b_re[k];
        const T i = lr[k] * im[k] + li[k] * re[k] + b_im[k];
        re[k] = r;
        im[k] = i;
      }
      StreamRow(h_re, re.data(), n);
      StreamRow(h_im, im.data(), n);
      continue;
    }
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
  if (stream) StreamFence();
}

// The adjoint of ScanStates (models/_scan.py's docstring), fused with the cotangent of lam:
//
//     a_t = g_t + conj(lam) a_{t+1}                          (against the primal's direction)
//     grad Re lam += Re a_t Re h_{t-1} + Im a_t Im h_{t-1}   (h_{t-1}: the state a_t's
//     grad Im lam += Im a_t Re h_{t-1} - Re a_t Im h_{t-1}    step multiplied, t >= 1)
//
// (time mirrored for a reverse primal). One pass reads g and h and writes a; the sums for the
// sequence's states p0..p1 go to grad_re, grad_im.
template <typename T>
void AdjointStates(const T* lam_re, const T* lam_im, const T* h, const T* g, T* a,
                   T* grad_re, T* grad_im, int64_t length, int64_t states, int64_t p0,
                   int64_t p1, bool reverse) {
  const int64_t row = 2 * states;
  const int64_t n = p1 - p0;
  std::vector<T> re(n, T(0)), im(n, T(0)), sum_re(n, T(0)), sum_im(n, T(0));
  const T* lr = lam_re + p0;
  const T* li = lam_im + p0;
  for (int64_t s = 0; s < length; ++s) {
    // The adjoint runs against the primal: backwards in time for a forward primal.
    const int64_t t = reverse ? s : length - 1 - s;
    const int64_t previous = reverse ? t + 1 : t - 1;  // the state that fed h_t
    const bool has_previous = previous >= 0 && previous < length;
    const T* g_re = g + t * row + p0;
    const T* g_im = g_re + states;
    T* a_re = a + t * row + p0;
    T* a_im = a_re + states;
    const T* q_re = h + (has_previous ? previous : t) * row + p0;
    const T* q_im = q_re + states;
    const T keep = has_previous ? T(1) : T(0);
#pragma GCC ivdep
    for (int64_t k = 0; k < n; ++k) {
      const T r = lr[k] * re[k] + li[k] * im[k] + g_re[k];
      const T i = lr[k] * im[k] - li[k] * re[k] + g_im[k];
      re[k] = r;
      im[k] = i;
      a_re[k] = r;
      a_im[k] = i;
      sum_re[k] += keep * (r * q_re[k] + i * q_im[k]);
      sum_im[k] += keep * (i * q_re[k] - r * q_im[k]);
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    grad_re[p0 + k] = sum_re[k];
    grad_im[p0 + k] = sum_im[k];
  }
}

// Calls body(sequence, p0, p1) for every sequence and block of its states: whole sequences
// per task when there are at least as many as threads, else each split into blocks of states.
template <typename F>
void ForEachBlock(ffi::ThreadPool& pool, int64_t sequences, int64_t length, int64_t states,
                  const F& body) {
  const int64_t threads = pool.num_threads() + 1;
  const bool parallel = sequences * length * states >= kMinParallelWork;
  int64_t block = states;
  if (parallel && sequences < threads) {
    const int64_t parts = (threads + sequences - 1) / sequences;
    block = (states + parts - 1) / parts;
    block = std::max(kBlockAlign, (block + kBlockAlign - 1) / kBlockAlign * kBlockAlign);
  }
  const int64_t blocks = (states + block - 1) / block;
  linrnn::ParallelFor(pool, sequences * blocks, parallel ? threads : 1, [&](int64_t task, int64_t) {
    const int64_t n = task / blocks, p0 = (task % blocks) * block;
    body(n, p0, std::min(states, p0 + block));
  });
}

template <typename T>
void Scan(ffi::ThreadPool& pool, const T* lam_re, const T* lam_im, const T* b, T* h,
          int64_t sequences, bool lam_per_sequence, int64_t length, int64_t states,
          bool reverse) {
  const int64_t stride = length * 2 * states;
  const bool stream = h != b && sequences * stride * int64_t{sizeof(T)} >= StreamingBytes();
  ForEachBlock(pool, sequences, length, states, [&](int64_t n, int64_t p0, int64_t p1) {
    const int64_t m = lam_per_sequence ? n * states : 0;
    ScanStates(lam_re + m, lam_im + m, b + n * stride, h + n * stride, length, states, p0, p1,
               reverse, stream);
  });
}

template <typename T>
void Adjoint(ffi::ThreadPool& pool, const T* lam_re, const T* lam_im, const T* h, const T* g,
             T* a, T* grad_re, T* grad_im, int64_t sequences, bool lam_per_sequence,
             int64_t length, int64_t states, bool reverse) {
  const int64_t stride = length * 2 * states;
  ForEachBlock(pool, sequences, length, states, [&](int64_t n, int64_t p0, int64_t p1) {
    const int64_t m = lam_per_sequence ? n * states : 0;
    AdjointStates(lam_re + m, lam_im + m, h + n * stride, g + n * stride, a + n * stride,
                  grad_re + n * states, grad_im + n * states, length, states, p0, p1, reverse);
  });
}

// The layout of b (or h, g): (..., L, 2, P); lam (P,) or (..., P). Fills the counts.
ffi::Error CheckLayout(const char* name, ffi::AnyBuffer lam_re, ffi::AnyBuffer lam_im,
                       ffi::AnyBuffer b, int64_t* sequences, int64_t* length, int64_t* states,
                       bool* lam_per_sequence) {
  const auto dims = b.dimensions();
  const int64_t rank = dims.size();
  if (rank < 3 || dims[rank - 2] != 2) {
    return ffi::Error::InvalidArgument(std::string(name) + ": the sequence must have shape "
                                       "(..., L, 2, P).");
  }
  *states = dims[rank - 1];
  *length = dims[rank - 3];
  *sequences = *states * *length == 0 ? 0 : b.element_count() / (2 * *length * *states);
  if (*sequences == 0) return ffi::Error::Success();
  const int64_t systems = lam_re.element_count() / *states;
  if (lam_re.element_count() != lam_im.element_count() ||
      lam_re.element_count() % *states != 0 || (systems != 1 && systems != *sequences)) {
    return ffi::Error::InvalidArgument(
        std::string(name) + ": lam_re and lam_im must have shape (P,) or (..., P) with the "
        "leading dimensions of the sequence.");
  }
  if (lam_re.element_type() != b.element_type() || lam_im.element_type() != b.element_type()) {
    return ffi::Error::InvalidArgument(std::string(name) + ": all arrays need one dtype.");
  }
  *lam_per_sequence = systems != 1;
  return ffi::Error::Success();
}

ffi::Error PlanarScan(ffi::ThreadPool pool, ffi::AnyBuffer lam_re, ffi::AnyBuffer lam_im,
                      ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> h, bool reverse) {
  int64_t sequences, length, states;
  bool per_sequence;
  ffi::Error error = CheckLayout("linrnn_planar_scan", lam_re, lam_im, b, &sequences, &length,
                                 &states, &per_sequence);
  if (error.failure() || sequences == 0) return error;
  return linrnn::ForFloatType(b.element_type(), "linrnn_planar_scan", [&](auto zero) {
    using T = decltype(zero);
    Scan(pool, lam_re.typed_data<T>(), lam_im.typed_data<T>(), b.typed_data<T>(),
         h->typed_data<T>(), sequences, per_sequence, length, states, reverse);
  });
}

ffi::Error PlanarAdjoint(ffi::ThreadPool pool, ffi::AnyBuffer lam_re, ffi::AnyBuffer lam_im,
                         ffi::AnyBuffer h, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> a,
                         ffi::Result<ffi::AnyBuffer> grad_re, ffi::Result<ffi::AnyBuffer> grad_im,
                         bool reverse) {
  int64_t sequences, length, states;
  bool per_sequence;
  ffi::Error error = CheckLayout("linrnn_planar_adjoint", lam_re, lam_im, g, &sequences,
                                 &length, &states, &per_sequence);
  if (error.failure() || sequences == 0) return error;
  if (h.element_count() != g.element_count() || h.element_type() != g.element_type()) {
    return ffi::Error::InvalidArgument("linrnn_planar_adjoint: h and g need one shape and dtype.");
  }
  return linrnn::ForFloatType(g.element_type(), "linrnn_planar_adjoint", [&](auto zero) {
    using T = decltype(zero);
    Adjoint(pool, lam_re.typed_data<T>(), lam_im.typed_data<T>(), h.typed_data<T>(),
            g.typed_data<T>(), a->typed_data<T>(), grad_re->typed_data<T>(),
            grad_im->typed_data<T>(), sequences, per_sequence, length, states, reverse);
  });
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

XLA_FFI_DEFINE_HANDLER_SYMBOL(LinrnnPlanarAdjoint, PlanarAdjoint,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // lam_re (..., P)
                                  .Arg<ffi::AnyBuffer>()  // lam_im (..., P)
                                  .Arg<ffi::AnyBuffer>()  // h (..., L, 2, P): primal states
                                  .Arg<ffi::AnyBuffer>()  // g (..., L, 2, P): cotangent of h
                                  .Ret<ffi::AnyBuffer>()  // a (..., L, 2, P): cotangent of b
                                  .Ret<ffi::AnyBuffer>()  // grad_re (..., P)
                                  .Ret<ffi::AnyBuffer>()  // grad_im (..., P)
                                  .Attr<bool>("reverse"));  // of the primal scan
