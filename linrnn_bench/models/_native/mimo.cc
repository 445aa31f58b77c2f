// A MIMO layer's recurrence fused with its input and output maps (models/_native/mimo.py).
//
//     b_t = B_in u_t,   h_t = lam * h_{t-1} + b_t,   y_t = C_out h_t          (reverse = false)
//
// in the planar form of models/_scan.py: h_t is a row of 2P reals (real parts, then imaginary
// parts), B_in = [Re B; Im B] is (2P, H), C_out = s [Re C, -Im C] is (H, 2P). reverse = true
// runs h_t = lam * h_{t+1} + b_t from the end. Shapes: u, y, dy, du (..., L, H); h (..., L, 2P)
// (stored as (..., L, 2, P)); B_in, C_out and lam either unbatched or with leading dimensions
// of u's rank, each 1 or u's (what nested `jax.vmap`s with "expand_dims" make: under a vmap
// over seeds around one over the batch, parameters of shape (seeds, 1, ...) for u of shape
// (seeds, batch, ...): sequence (s, b) reads seed s's parameters); the parameter cotangents
// always have u's leading dimensions (one per sequence; mimo.py's custom VJP sums them).
// float32 and float64.
//
// Why: unfused, XLA writes b = u B_in^T for the whole sequence, the scan reads it and writes h,
// the readout reads h: passes over (L, 2P) buffers far larger than the cache; and its backward
// pass makes two more such buffers (the cotangents of h and of b) beside the saved h. Here each
// task walks a sequence in chunks of kChunk steps: the chunk's b is one small GEMM into a buffer
// that stays in cache (or into the saved h itself, when training), the scan runs over it in
// place, and the readout is one GEMM from it. The backward pass likewise keeps the cotangents
// of one chunk only: with the saved h, nothing of length L is made but y (forward) and du
// (backward). The GEMMs are OpenBLAS's (the scipy-openblas32 wheel, single-threaded: the
// threads here are over sequences, or over blocks of states when there are fewer sequences
// than threads; then the blocks add their shares of y and du in turn, chunk by chunk).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "cblas.h"
#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Steps per chunk: b and the cotangents of one chunk, kChunk x 2P numbers, stay in cache.
constexpr int64_t kChunk = 256;
// Below this many state updates a call runs on the calling thread alone.
constexpr int64_t kMinParallelWork = 1 << 16;
// States per block when a sequence is split among threads: a multiple of a 64-byte line.
constexpr int64_t kBlockAlign = 16;

// C (m x n, row-major, leading dimension ldc) = op(A) op(B) + beta C.
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  scipy_cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

// The threads are ours: OpenBLAS's own would multiply them (set once; this library's private
// copy of OpenBLAS, not numpy's).
void SingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { scipy_openblas_set_num_threads(1); });
}

// Where sequence n's copy of a parameter starts: u's leading dimensions are walked from the
// last (fastest) to the first, and each contributes its index times the parameter's stride
// along it (0 where the parameter's dimension is 1, or for an unbatched parameter).
struct Broadcast {
  std::vector<int64_t> dims, strides;  // u's leading dimensions; the parameter's strides
  int64_t Offset(int64_t n) const {
    int64_t offset = 0;
    for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
      offset += (n % dims[i]) * strides[i];
      n /= dims[i];
    }
    return offset;
  }
};

struct Sizes {
  int64_t sequences, length, channels, states;  // N, L, H, P
  Broadcast b, c, lam;                          // B_in's, C_out's and lam's layout over u's
};

// How the work is split: `blocks` blocks of states per sequence (1 when there are at least as
// many sequences as threads), `block` states each.
struct Split {
  int64_t blocks, block, threads;
};

Split MakeSplit(ffi::ThreadPool& pool, const Sizes& s) {
  const int64_t threads = pool.num_threads() + 1;
  const bool parallel = s.sequences * s.length * s.states >= kMinParallelWork;
  Split split{1, s.states, parallel ? threads : 1};
  if (parallel && s.sequences < threads) {
    const int64_t parts = (threads + s.sequences - 1) / s.sequences;
    int64_t block = (s.states + parts - 1) / parts;
    block = std::max(kBlockAlign, (block + kBlockAlign - 1) / kBlockAlign * kBlockAlign);
    split.block = std::min(block, s.states);
    split.blocks = (s.states + split.block - 1) / split.block;
  }
  return split;
}

// The chunks in the order the primal scan visits them, and a chunk's rows in that order.
struct Chunks {
  int64_t length;
  bool reverse;
  int64_t count() const { return (length + kChunk - 1) / kChunk; }
  // The k-th chunk visited by the primal scan: [start, start + size).
  void Get(int64_t k, int64_t* start, int64_t* size) const {
    const int64_t c = reverse ? count() - 1 - k : k;
    *start = c * kChunk;
    *size = std::min(kChunk, length - *start);
  }
};

// How a block adds its share of an (L, H) output that is a sum over states (y, or du): the
// blocks of one sequence take turns chunk by chunk. Block 0 writes its share of a chunk (GEMM
// with beta = 0); block j > 0 adds its own (beta = 1) once block j - 1 has passed that chunk.
// So no (L, H) scratch per block is made and no pass sums them afterwards.
//
// No deadlock: block j waits only for block j - 1 of its sequence, a lower task index, and
// ParallelFor hands out tasks in increasing order, so a waited-for block has been taken by a
// running thread (or has finished).
class Turn {
 public:
  Turn(std::atomic<int64_t>* passed, bool first) : passed_(passed), first_(first) {}

  // Calls write(add) for the v-th chunk this block visits: add is false for block 0 (write)
  // and true for the others (add to what the previous blocks wrote).
  template <typename F>
  void Take(int64_t v, const F& write) const {
    if (!first_) {
      while (passed_[-1].load(std::memory_order_acquire) <= v) std::this_thread::yield();
    }
    write(!first_);
    passed_[0].store(v + 1, std::memory_order_release);
  }

 private:
  std::atomic<int64_t>* passed_;  // chunks this block has passed; passed_[-1]: the previous's
  bool first_;
};

// Runs body(n, p0, nb, turn) in parallel for every sequence n and block of its states
// [p0, p0 + nb) (MakeSplit); `turn` orders the blocks' shares of the (L, H) output (Turn).
template <typename F>
void ForEachBlock(ffi::ThreadPool& pool, const Sizes& s, const F& body) {
  const Split split = MakeSplit(pool, s);
  const int64_t tasks = s.sequences * split.blocks;
  std::unique_ptr<std::atomic<int64_t>[]> passed(new std::atomic<int64_t>[tasks]);
  for (int64_t i = 0; i < tasks; ++i) passed[i].store(0, std::memory_order_relaxed);
  linrnn::ParallelFor(pool, tasks, split.threads, [&](int64_t task, int64_t) {
    const int64_t n = task / split.blocks, j = task % split.blocks;
    const int64_t p0 = j * split.block, nb = std::min(s.states, p0 + split.block) - p0;
    body(n, p0, nb, Turn(&passed[task], j == 0));
  });
}

// Forward: y, and the states h when `h` is not null (training).
template <typename T>
void Forward(ffi::ThreadPool& pool, const Sizes& s, const T* u, const T* b_in, const T* c_out,
             const T* lam_re, const T* lam_im, T* y, T* h, bool reverse) {
  const int64_t L = s.length, H = s.channels, P = s.states, row = 2 * P;
  const Chunks chunks{L, reverse};
  ForEachBlock(pool, s, [&](int64_t n, int64_t p0, int64_t nb, const Turn& turn) {
    const T* un = u + n * L * H;
    T* yn = y + n * L * H;
    const T* bn = b_in + s.b.Offset(n);
    const T* cn = c_out + s.c.Offset(n);
    const T* lr = lam_re + s.lam.Offset(n) + p0;
    const T* li = lam_im + s.lam.Offset(n) + p0;
    // The chunk's states: in h itself (row stride 2P) when training, else in a local buffer.
    std::vector<T> local(h == nullptr ? kChunk * 2 * nb : 0);
    const int64_t ld = h == nullptr ? 2 * nb : row;
    const int64_t re_col = h == nullptr ? 0 : p0, im_col = h == nullptr ? nb : P + p0;
    // A block of all the states has its real and imaginary columns side by side (and so have
    // B_in's rows and C_out's columns): one GEMM of twice the width instead of two.
    const bool whole = nb == P;
    std::vector<T> re(nb, T(0)), im(nb, T(0));
    for (int64_t k = 0; k < chunks.count(); ++k) {
      int64_t start, size;
      chunks.Get(k, &start, &size);
      T* sc = h == nullptr ? local.data() : h + n * L * row + start * row;
      const T* uc = un + start * H;
      // b = u B_in^T for this block's rows of B_in (real parts, then imaginary parts).
      if (whole) {
        Gemm(false, true, size, row, H, uc, H, bn, H, T(0), sc, ld);
      } else {
        Gemm(false, true, size, nb, H, uc, H, bn + p0 * H, H, T(0), sc + re_col, ld);
        Gemm(false, true, size, nb, H, uc, H, bn + (P + p0) * H, H, T(0), sc + im_col, ld);
      }
      for (int64_t i = 0; i < size; ++i) {
        const int64_t t = reverse ? size - 1 - i : i;
        T* r = sc + t * ld + re_col;
        T* m = sc + t * ld + im_col;
#pragma GCC ivdep
        for (int64_t q = 0; q < nb; ++q) {
          const T a = lr[q] * re[q] - li[q] * im[q] + r[q];
          const T b = lr[q] * im[q] + li[q] * re[q] + m[q];
          re[q] = a;
          im[q] = b;
          r[q] = a;
          m[q] = b;
        }
      }
      // y = h C_out^T over this block's columns of C_out (this block's share of y).
      T* yc = yn + start * H;
      turn.Take(k, [&](bool add) {
        const T beta = add ? T(1) : T(0);
        if (whole) {
          Gemm(false, true, size, H, row, sc, ld, cn, row, beta, yc, H);
        } else {
          Gemm(false, true, size, H, nb, sc + re_col, ld, cn + p0, row, beta, yc, H);
          Gemm(false, true, size, H, nb, sc + im_col, ld, cn + P + p0, row, T(1), yc, H);
        }
      });
    }
  });
}

// Backward, given the saved states h and the cotangent dy of y (module comment of mimo.py):
//     g = dy C_out,  a_t = g_t + conj(lam) a_{t+1},  d lam = sum_t a_t h_{t-1} (planar pairing)
//     du = a B_in,   d B_in = a^T u,   d C_out = dy^T h
template <typename T>
void Backward(ffi::ThreadPool& pool, const Sizes& s, const T* u, const T* dy, const T* h,
              const T* b_in, const T* c_out, const T* lam_re, const T* lam_im, T* du, T* d_b,
              T* d_c, T* d_re, T* d_im, bool reverse) {
  const int64_t L = s.length, H = s.channels, P = s.states, row = 2 * P;
  const Chunks chunks{L, reverse};
  ForEachBlock(pool, s, [&](int64_t n, int64_t p0, int64_t nb, const Turn& turn) {
    const T* un = u + n * L * H;
    T* dun = du + n * L * H;
    const T* dyn = dy + n * L * H;
    const T* hn = h + n * L * row;
    const T* bn = b_in + s.b.Offset(n);
    const T* cn = c_out + s.c.Offset(n);
    const T* lr = lam_re + s.lam.Offset(n) + p0;
    const T* li = lam_im + s.lam.Offset(n) + p0;
    T* dbn = d_b + n * row * H;
    T* dcn = d_c + n * H * row;
    // This block's rows of d B_in and columns of d C_out: accumulated with beta = 1 below.
    std::fill(dbn + p0 * H, dbn + (p0 + nb) * H, T(0));
    std::fill(dbn + (P + p0) * H, dbn + (P + p0 + nb) * H, T(0));
    for (int64_t c = 0; c < H; ++c) {
      std::fill(dcn + c * row + p0, dcn + c * row + p0 + nb, T(0));
      std::fill(dcn + c * row + P + p0, dcn + c * row + P + p0 + nb, T(0));
    }
    std::vector<T> g(kChunk * 2 * nb);
    const int64_t ld = 2 * nb;
    const bool whole = nb == P;  // one GEMM of twice the width for both planes (as Forward)
    std::vector<T> re(nb, T(0)), im(nb, T(0)), sum_re(nb, T(0)), sum_im(nb, T(0));
    // The adjoint runs against the primal: chunks and rows in the reverse of its order.
    for (int64_t k = chunks.count() - 1; k >= 0; --k) {
      int64_t start, size;
      chunks.Get(k, &start, &size);
      const T* uc = un + start * H;
      const T* dyc = dyn + start * H;
      // g = dy C_out over this block's columns.
      if (whole) {
        Gemm(false, false, size, row, H, dyc, H, cn, row, T(0), g.data(), ld);
      } else {
        Gemm(false, false, size, nb, H, dyc, H, cn + p0, row, T(0), g.data(), ld);
        Gemm(false, false, size, nb, H, dyc, H, cn + P + p0, row, T(0), g.data() + nb, ld);
      }
      for (int64_t i = 0; i < size; ++i) {
        const int64_t t = reverse ? i : size - 1 - i;  // row within the chunk
        const int64_t global = start + t;
        const int64_t previous = reverse ? global + 1 : global - 1;  // the state that fed h_t
        const bool has_previous = previous >= 0 && previous < L;
        const T keep = has_previous ? T(1) : T(0);
        const T* q_re = hn + (has_previous ? previous : global) * row + p0;
        const T* q_im = q_re + P;
        T* a_re = g.data() + t * ld;
        T* a_im = a_re + nb;
#pragma GCC ivdep
        for (int64_t q = 0; q < nb; ++q) {
          const T a = lr[q] * re[q] + li[q] * im[q] + a_re[q];
          const T b = lr[q] * im[q] - li[q] * re[q] + a_im[q];
          re[q] = a;
          im[q] = b;
          a_re[q] = a;
          a_im[q] = b;
          sum_re[q] += keep * (a * q_re[q] + b * q_im[q]);
          sum_im[q] += keep * (b * q_re[q] - a * q_im[q]);
        }
      }
      const T* hc = hn + start * row;
      T* duc = dun + start * H;
      // du = a B_in over this block's rows of B_in (this block's share of du), in turn.
      turn.Take(chunks.count() - 1 - k, [&](bool add) {
        const T beta = add ? T(1) : T(0);
        if (whole) {
          Gemm(false, false, size, H, row, g.data(), ld, bn, H, beta, duc, H);
        } else {
          Gemm(false, false, size, H, nb, g.data(), ld, bn + p0 * H, H, beta, duc, H);
          Gemm(false, false, size, H, nb, g.data() + nb, ld, bn + (P + p0) * H, H, T(1), duc, H);
        }
      });
      // d C_out += dy^T h over this block's columns, d B_in += a^T u over its rows.
      if (whole) {
        Gemm(true, false, H, row, size, dyc, H, hc, row, T(1), dcn, row);
        Gemm(true, false, row, H, size, g.data(), ld, uc, H, T(1), dbn, H);
      } else {
        Gemm(true, false, H, nb, size, dyc, H, hc + p0, row, T(1), dcn + p0, row);
        Gemm(true, false, H, nb, size, dyc, H, hc + P + p0, row, T(1), dcn + P + p0, row);
        // d B_in += a^T u over this block's rows.
        Gemm(true, false, nb, H, size, g.data(), ld, uc, H, T(1), dbn + p0 * H, H);
        Gemm(true, false, nb, H, size, g.data() + nb, ld, uc, H, T(1), dbn + (P + p0) * H, H);
      }
    }
    for (int64_t q = 0; q < nb; ++q) {
      d_re[n * P + p0 + q] = sum_re[q];
      d_im[n * P + p0 + q] = sum_im[q];
    }
  });
}

// Checks u (..., L, H) against B_in (2P, H), C_out (H, 2P) and lam (P,), each unbatched, one
// per sequence, or with leading dimensions each 1 or u's; fills the sizes.
ffi::Error CheckLayout(const char* name, ffi::AnyBuffer u, ffi::AnyBuffer b_in,
                       ffi::AnyBuffer c_out, ffi::AnyBuffer lam_re, ffi::AnyBuffer lam_im,
                       Sizes* s) {
  const auto dims = u.dimensions();
  const auto b_dims = b_in.dimensions();
  if (dims.size() < 2 || b_dims.size() < 2) {
    return ffi::Error::InvalidArgument(std::string(name) + ": u must be (..., L, H) and B_in "
                                       "(..., 2P, H).");
  }
  s->length = dims[dims.size() - 2];
  s->channels = dims[dims.size() - 1];
  const int64_t rows = b_dims[b_dims.size() - 2];
  s->states = rows / 2;
  if (rows % 2 != 0 || b_dims[b_dims.size() - 1] != s->channels) {
    return ffi::Error::InvalidArgument(std::string(name) + ": B_in must be (..., 2P, H) with "
                                       "u's H.");
  }
  const int64_t per_sequence = s->length * s->channels;
  s->sequences = per_sequence == 0 ? 0 : u.element_count() / per_sequence;
  if (s->sequences == 0 || s->states == 0) return ffi::Error::Success();
  // u's leading dimensions; a parameter's are none (unbatched: one copy for every sequence) or
  // as many, each 1 (shared along it) or u's.
  const std::vector<int64_t> lead(dims.begin(), dims.end() - 2);
  auto layout = [&](ffi::AnyBuffer x, int64_t trailing, int64_t size, Broadcast* out) {
    const auto x_dims = x.dimensions();
    out->dims = lead;
    out->strides.assign(lead.size(), 0);
    if (x.element_type() != u.element_type()) return false;
    if (x.element_count() == size) return true;  // unbatched (or size-1 leading dimensions)
    if (x.element_count() == size * s->sequences) {  // one per sequence, in u's order
      out->dims = {s->sequences};
      out->strides = {size};
      return true;
    }
    if (static_cast<int64_t>(x_dims.size()) != static_cast<int64_t>(lead.size()) + trailing) {
      return false;
    }
    int64_t stride = size;
    for (int64_t i = static_cast<int64_t>(lead.size()) - 1; i >= 0; --i) {
      if (x_dims[i] == lead[i]) {
        out->strides[i] = stride;
      } else if (x_dims[i] != 1) {
        return false;
      }
      stride *= x_dims[i];
    }
    return true;
  };
  const int64_t bc = 2 * s->states * s->channels;
  if (!layout(b_in, 2, bc, &s->b) || !layout(c_out, 2, bc, &s->c) ||
      !layout(lam_re, 1, s->states, &s->lam) || lam_im.element_count() !=
      lam_re.element_count() || lam_im.element_type() != u.element_type()) {
    return ffi::Error::InvalidArgument(
        std::string(name) + ": B_in (2P, H), C_out (H, 2P), lam_re and lam_im (P,) must be "
        "unbatched or have leading dimensions of u's rank, each 1 or u's, all in u's dtype.");
  }
  return ffi::Error::Success();
}

ffi::Error MimoForward(ffi::ThreadPool pool, ffi::AnyBuffer u, ffi::AnyBuffer b_in,
                       ffi::AnyBuffer c_out, ffi::AnyBuffer lam_re, ffi::AnyBuffer lam_im,
                       ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> h,
                       bool reverse, bool save_states) {
  Sizes s;
  ffi::Error error = CheckLayout("linrnn_mimo_forward", u, b_in, c_out, lam_re, lam_im, &s);
  if (error.failure() || s.sequences == 0) return error;
  if (s.states == 0) {  // no states: y = 0
    std::memset(y->untyped_data(), 0, y->size_bytes());
    return ffi::Error::Success();
  }
  SingleThreadedBlas();
  return linrnn::ForFloatType(u.element_type(), "linrnn_mimo_forward", [&](auto zero) {
    using T = decltype(zero);
    Forward(pool, s, u.typed_data<T>(), b_in.typed_data<T>(), c_out.typed_data<T>(),
            lam_re.typed_data<T>(), lam_im.typed_data<T>(), y->typed_data<T>(),
            save_states ? h->typed_data<T>() : nullptr, reverse);
  });
}

ffi::Error MimoBackward(ffi::ThreadPool pool, ffi::AnyBuffer u, ffi::AnyBuffer dy,
                        ffi::AnyBuffer h, ffi::AnyBuffer b_in, ffi::AnyBuffer c_out,
                        ffi::AnyBuffer lam_re, ffi::AnyBuffer lam_im,
                        ffi::Result<ffi::AnyBuffer> du, ffi::Result<ffi::AnyBuffer> d_b,
                        ffi::Result<ffi::AnyBuffer> d_c, ffi::Result<ffi::AnyBuffer> d_re,
                        ffi::Result<ffi::AnyBuffer> d_im, bool reverse) {
  Sizes s;
  ffi::Error error = CheckLayout("linrnn_mimo_backward", u, b_in, c_out, lam_re, lam_im, &s);
  if (error.failure() || s.sequences == 0) return error;
  if (dy.element_count() != u.element_count() ||
      h.element_count() != s.sequences * s.length * 2 * s.states ||
      dy.element_type() != u.element_type() || h.element_type() != u.element_type()) {
    return ffi::Error::InvalidArgument(
        "linrnn_mimo_backward: dy must be shaped as u, h as (..., L, 2, P), in u's dtype.");
  }
  if (s.states == 0) {
    for (auto* out : {&du, &d_b, &d_c, &d_re, &d_im}) {
      std::memset((*out)->untyped_data(), 0, (*out)->size_bytes());
    }
    return ffi::Error::Success();
  }
  SingleThreadedBlas();
  return linrnn::ForFloatType(u.element_type(), "linrnn_mimo_backward", [&](auto zero) {
    using T = decltype(zero);
    Backward(pool, s, u.typed_data<T>(), dy.typed_data<T>(), h.typed_data<T>(),
             b_in.typed_data<T>(), c_out.typed_data<T>(), lam_re.typed_data<T>(),
             lam_im.typed_data<T>(), du->typed_data<T>(), d_b->typed_data<T>(),
             d_c->typed_data<T>(), d_re->typed_data<T>(), d_im->typed_data<T>(), reverse);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LinrnnMimoForward, MimoForward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // u (..., L, H)
                                  .Arg<ffi::AnyBuffer>()  // B_in (..., 2P, H)
                                  .Arg<ffi::AnyBuffer>()  // C_out (..., H, 2P)
                                  .Arg<ffi::AnyBuffer>()  // lam_re (..., P)
                                  .Arg<ffi::AnyBuffer>()  // lam_im (..., P)
                                  .Ret<ffi::AnyBuffer>()  // y (..., L, H)
                                  .Ret<ffi::AnyBuffer>()  // h (..., L, 2, P), or (..., 0)
                                  .Attr<bool>("reverse")
                                  .Attr<bool>("save_states"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(LinrnnMimoBackward, MimoBackward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // u (..., L, H)
                                  .Arg<ffi::AnyBuffer>()  // dy (..., L, H)
                                  .Arg<ffi::AnyBuffer>()  // h (..., L, 2, P): saved states
                                  .Arg<ffi::AnyBuffer>()  // B_in (..., 2P, H)
                                  .Arg<ffi::AnyBuffer>()  // C_out (..., H, 2P)
                                  .Arg<ffi::AnyBuffer>()  // lam_re (..., P)
                                  .Arg<ffi::AnyBuffer>()  // lam_im (..., P)
                                  .Ret<ffi::AnyBuffer>()  // du (..., L, H)
                                  .Ret<ffi::AnyBuffer>()  // d B_in (..., 2P, H)
                                  .Ret<ffi::AnyBuffer>()  // d C_out (..., H, 2P)
                                  .Ret<ffi::AnyBuffer>()  // d lam_re (..., P)
                                  .Ret<ffi::AnyBuffer>()  // d lam_im (..., P)
                                  .Attr<bool>("reverse"));  // of the primal scan
