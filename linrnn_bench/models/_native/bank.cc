// A bank of single-input single-output diagonal systems (S4D), fused: recurrence and readout in
// one pass that never stores the states, and its adjoint with chunk checkpoints. XLA FFI, CPU.
//
// Per sequence u (L, H) and channel h (n = 0..N-1 its complex states), forward in time:
//
//     h_t[h, n] = lam[h, n] h_{t-1}[h, n] + B[h, n] u_t[h],      h_{-1} = 0
//     y_t[h]    = Re( sum_n C[h, n] h_t[h, n] )
//
// or, with reverse = true, h_t = lam h_{t+1} + B u_t from h_L = 0 (the same with time
// mirrored). The output scale of a conjugate-symmetric system (2 Re) is folded into C by the
// caller, and D u is added by the caller. Complex numbers are planar: the parameters arrive as
// one array params (..., 6, H, N) holding [Re lam, Im lam, Re B, Im B, Re C, Im C].
//
// What is computed. The input of channel h is a real scalar, so h_t = B x_t with
//
//     x_t = lam x_{t-1} + u_t,      y_t = Re( sum_n W x_t ),      W = C B
//
// which costs 4 real operations per state update rather than 6 (u_t enters the real part only),
// and 2 for the readout. Forward (LinrnnBankForward): y (..., L, H) and checkpoints
// (..., K, 2, N, H), K = ceil(L / T) for the chunk length T (attribute `chunk`): checkpoint k
// is x entering the k-th chunk in the order the recurrence visits them ([k, 0] real parts,
// [k, 1] imaginary parts; chunk 0's is zero): L / T * 2 H N numbers, small next to the states.
//
// Backward (LinrnnBankBackward), given params, u, the checkpoints and dy (..., L, H). The
// cotangent of x_t (planar, see models/_scan.py) is conj(W) z_t with the scalar-driven adjoint
//
//     z_t = dy_t + conj(lam) z_{t+1}        (against the direction of the recurrence)
//
// so, walking the chunks backwards and recomputing each chunk's x from its checkpoint:
//
//     d W   = sum_t dy_t conj(x_t)                 as planar (dy Re x, -dy Im x)
//     d lam = conj(W) sum_t z_t conj(x_{t-1})      as planar (Re, Im) of the complex number
//     du_t  = sum_n Re(conj(W) z_t)
//     d C   = d W conj(B),   d B = d W conj(C)     (W = C B; JAX's cotangent of a product)
//
// returning dparams (..., 6, H, N) (per sequence, summed over time) and du (..., L, H). A
// "cotangent of a complex z used as its real pair" here is (dL/dRe z, dL/dIm z), the real
// cotangents of the planar parameter arrays.
//
// Batching: the Python side uses vmap_method="broadcast_all", so under jax.vmap every array has
// the same leading dimensions; params may also come without them (one system for every
// sequence), as scan.cc's lam. float32 and float64 (all arrays one dtype).
//
// Why this shape of loop. The states of one sequence are (L, H N) complex numbers (a GB for a
// batch of 8 at H = 128, N = 32, L = 4096); nothing here stores them. A task owns one sequence
// and a block of W channels (W = one vector register: 8 floats with AVX2; the channels of u_t
// and y_t are contiguous), and walks time chunk by chunk. Inside a chunk the loop runs over
// states outside and time inside: a few states' vectors (independent dependency chains, see
// kForwardChains) and their parameters stay in registers for the T steps, and only u_t (read)
// and the partial sum of y_t (read, add, write) go through a T x W buffer in L1. With time
// outside and states inside instead, every step loads and stores the whole block of states and
// parameters, which bounds the loop by loads and stores rather than by its arithmetic.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Below this many state updates a call runs on the calling thread alone: scheduling costs more.
constexpr int64_t kMinParallelWork = 1 << 16;
constexpr int kParts = 6;  // Re lam, Im lam, Re B, Im B, Re C, Im C
// Per state, what the loops use: Re lam, Im lam, Re W, Im W (W = C B).
constexpr int kLoopParts = 4;

// One vector register: W = kVectorBytes / sizeof(T) channels. It must be the target's native
// width: GCC lowers a wider generic vector (e.g. 64 bytes on AVX2) through the stack with
// shuffles, which made the loop seven times slower.
#if defined(__AVX512F__)
constexpr int64_t kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int64_t kVectorBytes = 32;
#else
constexpr int64_t kVectorBytes = 16;
#endif

template <typename T>
struct VectorOf {
  using type [[gnu::vector_size(kVectorBytes)]] = T;
};
template <typename T>
using Vec = typename VectorOf<T>::type;
template <typename T>
constexpr int64_t kLanes = kVectorBytes / sizeof(T);

// States walked together through a chunk: independent dependency chains. One step of one state
// is two chained FMAs (8 cycles of latency on Zen 3) for 6 (forward) or about 12 (backward)
// vector operations, so several chains are needed to fill the two FMA units; more spill
// registers. The values are the best of a sweep (1..4 each; see the report).
#ifndef LINRNN_FORWARD_CHAINS
#define LINRNN_FORWARD_CHAINS 4
#endif
#ifndef LINRNN_BACKWARD_CHAINS
#define LINRNN_BACKWARD_CHAINS 2
#endif
constexpr int kForwardChains = LINRNN_FORWARD_CHAINS;
constexpr int kBackwardChains = LINRNN_BACKWARD_CHAINS;

// The first `count` channels from p (the rest zero): the last block of a width that is not a
// multiple of W is padded with zero channels, whose states stay zero and are never written.
template <typename T>
inline Vec<T> Load(const T* p, int64_t count) {
  Vec<T> v = {};
  if (count == kLanes<T>) {
    std::memcpy(&v, p, sizeof(v));
  } else {
    for (int64_t k = 0; k < count; ++k) v[k] = p[k];
  }
  return v;
}

template <typename T>
inline void Store(T* p, const Vec<T>& v, int64_t count) {
  if (count == kLanes<T>) {
    std::memcpy(p, &v, sizeof(v));
  } else {
    for (int64_t k = 0; k < count; ++k) p[k] = v[k];
  }
}

// Where one task works: sequence n's arrays, channels [h0, h0 + width).
struct Shape {
  int64_t length, channels, states, chunk;
  bool reverse;
  int64_t chunks() const { return (length + chunk - 1) / chunk; }
  // The time index of the step visited s-th.
  int64_t time(int64_t s) const { return reverse ? length - 1 - s : s; }
};

// p[q * N + n] = the W channels' [Re lam, Im lam, Re W, Im W][q] of state n, from params (6, H, N).
template <typename T>
void GatherParams(const T* params, const Shape& d, int64_t h0, int64_t width, Vec<T>* p) {
  const int64_t H = d.channels, N = d.states;
  auto at = [&](int q, int64_t k, int64_t n) { return params[(q * H + h0 + k) * N + n]; };
  for (int64_t n = 0; n < N; ++n) {
    Vec<T> lr = {}, li = {}, wr = {}, wi = {};
    for (int64_t k = 0; k < width; ++k) {
      const T br = at(2, k, n), bi = at(3, k, n), cr = at(4, k, n), ci = at(5, k, n);
      lr[k] = at(0, k, n);
      li[k] = at(1, k, n);
      wr[k] = cr * br - ci * bi;
      wi[k] = cr * bi + ci * br;
    }
    p[n] = lr, p[N + n] = li, p[2 * N + n] = wr, p[3 * N + n] = wi;
  }
}

// One chunk of u (or dy) for the block, in the order of the visit: buffer[j] = x[time(s0 + j)].
template <typename T>
void GatherChunk(const T* x, const Shape& d, int64_t s0, int64_t size, int64_t h0,
                 int64_t width, Vec<T>* buffer) {
  for (int64_t j = 0; j < size; ++j) buffer[j] = Load(x + d.time(s0 + j) * d.channels + h0, width);
}

template <typename T>
void ScatterChunk(const Vec<T>* buffer, const Shape& d, int64_t s0, int64_t size, int64_t h0,
                  int64_t width, T* x) {
  for (int64_t j = 0; j < size; ++j) Store(x + d.time(s0 + j) * d.channels + h0, buffer[j], width);
}

// Offset of checkpoint k's real (part = 0) or imaginary (part = 1) row of state n.
inline int64_t CheckpointAt(const Shape& d, int64_t k, int part, int64_t n) {
  return ((k * 2 + part) * d.states + n) * d.channels;
}

// Scratch of one task: reused by the tasks that one thread runs, so allocated once per thread.
template <typename T>
struct Scratch {
  std::vector<Vec<T>> params, x_re, x_im, grads, u, y, dy, du, chunk_re, chunk_im;
  Scratch(const Shape& d, bool backward)
      : params(kLoopParts * d.states), x_re(d.states), x_im(d.states), u(d.chunk), y(d.chunk) {
    if (backward) {
      grads.resize(kLoopParts * d.states);
      dy.resize(d.chunk);
      du.resize(d.chunk);
      // x through one chunk for each chain, the entering state first (stride T + 1).
      chunk_re.resize(kBackwardChains * (d.chunk + 1));
      chunk_im.resize(kBackwardChains * (d.chunk + 1));
    }
  }
};

// K states n0..n0+K-1 of the block through one chunk of `size` steps (forward): x_re/x_im
// advance, and their readout is added to yb.
// One step of x_t = lam x_{t-1} + u_t on a vector of states (re, im updated in place). The
// terms that do not depend on the previous state come first: the chain through it is then two
// FMAs per step.
template <typename V>
inline void Advance(const V u, const V lr, const V li, V& re, V& im) {
  const V next_re = (u - li * im) + lr * re;
  const V next_im = li * re + lr * im;
  re = next_re;
  im = next_im;
}

template <typename T, int K>
inline void ForwardStates(const Vec<T>* p, int64_t N, int64_t n0, Vec<T>* x_re, Vec<T>* x_im,
                          const Vec<T>* ub, Vec<T>* yb, int64_t size) {
  using V = Vec<T>;
  V lr[K], li[K], wr[K], wi[K], re[K], im[K];
#pragma GCC unroll 8
  for (int k = 0; k < K; ++k) {
    lr[k] = p[n0 + k], li[k] = p[N + n0 + k], wr[k] = p[2 * N + n0 + k];
    wi[k] = p[3 * N + n0 + k], re[k] = x_re[n0 + k], im[k] = x_im[n0 + k];
  }
  for (int64_t j = 0; j < size; ++j) {
    const V u = ub[j];
    V y = yb[j];
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) {
      Advance(u, lr[k], li[k], re[k], im[k]);
      y += wr[k] * re[k] - wi[k] * im[k];
    }
    yb[j] = y;
  }
#pragma GCC unroll 8
  for (int k = 0; k < K; ++k) x_re[n0 + k] = re[k], x_im[n0 + k] = im[k];
}

template <typename T>
void ForwardBlock(const T* params, const T* u, T* y, T* checkpoints, const Shape& d, int64_t h0,
                  int64_t width, Scratch<T>& s) {
  using V = Vec<T>;
  const int64_t N = d.states;
  V* p = s.params.data();
  GatherParams(params, d, h0, width, p);
  std::fill(s.x_re.begin(), s.x_re.end(), V{});
  std::fill(s.x_im.begin(), s.x_im.end(), V{});
  V* ub = s.u.data();
  V* yb = s.y.data();
  for (int64_t k = 0, s0 = 0; s0 < d.length; ++k, s0 += d.chunk) {
    const int64_t size = std::min(d.chunk, d.length - s0);
    for (int64_t n = 0; n < N; ++n) {
      Store(checkpoints + CheckpointAt(d, k, 0, n) + h0, s.x_re[n], width);
      Store(checkpoints + CheckpointAt(d, k, 1, n) + h0, s.x_im[n], width);
    }
    GatherChunk(u, d, s0, size, h0, width, ub);
    std::fill(yb, yb + size, V{});
    int64_t n = 0;
    for (; n + kForwardChains <= N; n += kForwardChains) {
      ForwardStates<T, kForwardChains>(p, N, n, s.x_re.data(), s.x_im.data(), ub, yb, size);
    }
    for (; n < N; ++n) ForwardStates<T, 1>(p, N, n, s.x_re.data(), s.x_im.data(), ub, yb, size);
    ScatterChunk(yb, d, s0, size, h0, width, y);
  }
}

// The backward pass of K states n0.. through one chunk (file comment): recompute the chunk's x
// from the checkpoint (x_in_re/x_in_im), then walk it against the visit order with the adjoint
// z (z_re/z_im: in, carried from the chunk visited next; out, this chunk's first). Adds
// (sum z conj(x_{t-1}), d W) to g and the input cotangents to dub.
template <typename T, int K>
inline void BackwardStates(const Vec<T>* p, int64_t N, int64_t n0, const Vec<T>* x_in_re,
                           const Vec<T>* x_in_im, Vec<T>* z_re_io, Vec<T>* z_im_io, Vec<T>* g,
                           const Vec<T>* ub, const Vec<T>* dyb, Vec<T>* dub, Vec<T>* xr,
                           Vec<T>* xi, int64_t stride, int64_t size) {
  using V = Vec<T>;
  V lr[K], li[K], wr[K], wi[K], re[K], im[K], d_wr[K], d_wi[K], s_re[K], s_im[K];
#pragma GCC unroll 8
  for (int k = 0; k < K; ++k) {
    lr[k] = p[n0 + k], li[k] = p[N + n0 + k], wr[k] = p[2 * N + n0 + k];
    wi[k] = p[3 * N + n0 + k], re[k] = x_in_re[k], im[k] = x_in_im[k];
    // xr[k * stride + j + 1] = x after visit step j of the chunk; xr[k * stride] = x_in.
    xr[k * stride] = re[k], xi[k * stride] = im[k];
    d_wr[k] = d_wi[k] = s_re[k] = s_im[k] = V{};
  }
  for (int64_t j = 0; j < size; ++j) {
    const V u = ub[j], dy = dyb[j];
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) {
      Advance(u, lr[k], li[k], re[k], im[k]);  // the forward pass's step, recomputed
      xr[k * stride + j + 1] = re[k];
      xi[k * stride + j + 1] = im[k];
      d_wr[k] += dy * re[k];
      d_wi[k] -= dy * im[k];
    }
  }
  V z_re[K], z_im[K];
#pragma GCC unroll 8
  for (int k = 0; k < K; ++k) z_re[k] = z_re_io[k], z_im[k] = z_im_io[k];
  for (int64_t j = size - 1; j >= 0; --j) {
    const V dy = dyb[j];
    V du = dub[j];
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) {
      // z_t = dy_t + conj(lam) z_{t+1}; the chain term last, as in the forward pass.
      const V next_re = (dy + li[k] * z_im[k]) + lr[k] * z_re[k];
      const V next_im = lr[k] * z_im[k] - li[k] * z_re[k];
      z_re[k] = next_re;
      z_im[k] = next_im;
      const V p_re = xr[k * stride + j], p_im = xi[k * stride + j];  // x_{t-1}
      s_re[k] += z_re[k] * p_re + z_im[k] * p_im;
      s_im[k] += z_im[k] * p_re - z_re[k] * p_im;
      du += wr[k] * z_re[k] + wi[k] * z_im[k];
    }
    dub[j] = du;
  }
#pragma GCC unroll 8
  for (int k = 0; k < K; ++k) {
    z_re_io[k] = z_re[k], z_im_io[k] = z_im[k];
    g[n0 + k] += s_re[k], g[N + n0 + k] += s_im[k];
    g[2 * N + n0 + k] += d_wr[k], g[3 * N + n0 + k] += d_wi[k];
  }
}

template <typename T>
void BackwardBlock(const T* params, const T* u, const T* checkpoints, const T* dy, T* dparams,
                   T* du, const Shape& d, int64_t h0, int64_t width, Scratch<T>& s) {
  using V = Vec<T>;
  const int64_t N = d.states, H = d.channels, stride = d.chunk + 1;
  V* p = s.params.data();
  V* g = s.grads.data();
  GatherParams(params, d, h0, width, p);
  std::fill(s.grads.begin(), s.grads.end(), V{});
  // x_re/x_im hold the adjoint z carried into each chunk from the chunk visited after it.
  std::fill(s.x_re.begin(), s.x_re.end(), V{});
  std::fill(s.x_im.begin(), s.x_im.end(), V{});
  V* ub = s.u.data();
  V* dyb = s.dy.data();
  V* dub = s.du.data();
  for (int64_t k = d.chunks() - 1; k >= 0; --k) {
    const int64_t s0 = k * d.chunk, size = std::min(d.chunk, d.length - s0);
    GatherChunk(u, d, s0, size, h0, width, ub);
    GatherChunk(dy, d, s0, size, h0, width, dyb);
    std::fill(dub, dub + size, V{});
    V x_in_re[kBackwardChains], x_in_im[kBackwardChains];
    auto run = [&](auto chains, int64_t n) {
      constexpr int K = decltype(chains)::value;
      for (int c = 0; c < K; ++c) {
        x_in_re[c] = Load(checkpoints + CheckpointAt(d, k, 0, n + c) + h0, width);
        x_in_im[c] = Load(checkpoints + CheckpointAt(d, k, 1, n + c) + h0, width);
      }
      BackwardStates<T, K>(p, N, n, x_in_re, x_in_im, s.x_re.data() + n, s.x_im.data() + n, g,
                           ub, dyb, dub, s.chunk_re.data(), s.chunk_im.data(), stride, size);
    };
    int64_t n = 0;
    for (; n + kBackwardChains <= N; n += kBackwardChains) {
      run(std::integral_constant<int, kBackwardChains>{}, n);
    }
    for (; n < N; ++n) run(std::integral_constant<int, 1>{}, n);
    ScatterChunk(dub, d, s0, size, h0, width, du);
  }
  // From (S = sum z conj(x_{t-1}), d W) to the six parameter cotangents (file comment).
  for (int64_t n = 0; n < N; ++n) {
    const V sr = g[n], si = g[N + n], dwr = g[2 * N + n], dwi = g[3 * N + n];
    for (int64_t k = 0; k < width; ++k) {
      auto at = [&](int q) -> T& { return dparams[(q * H + h0 + k) * N + n]; };
      auto param = [&](int q) { return params[(q * H + h0 + k) * N + n]; };
      const T br = param(2), bi = param(3), cr = param(4), ci = param(5);
      const T wr = cr * br - ci * bi, wi = cr * bi + ci * br;
      at(0) = wr * sr[k] + wi * si[k];  // conj(W) S
      at(1) = wr * si[k] - wi * sr[k];
      at(2) = dwr[k] * cr + dwi[k] * ci;  // d W conj(C)
      at(3) = dwi[k] * cr - dwr[k] * ci;
      at(4) = dwr[k] * br + dwi[k] * bi;  // d W conj(B)
      at(5) = dwi[k] * br - dwr[k] * bi;
    }
  }
}

// Calls body(sequence, h0, width, scratch) for every (sequence, block of W channels).
template <typename T, typename F>
void ForEachBlock(ffi::ThreadPool& pool, int64_t sequences, const Shape& d, bool backward,
                  F&& body) {
  const int64_t blocks = (d.channels + kLanes<T> - 1) / kLanes<T>;
  const bool parallel = sequences * d.length * d.channels * d.states >= kMinParallelWork;
  const int64_t threads =
      std::max<int64_t>(1, std::min(parallel ? pool.num_threads() + 1 : 1, sequences * blocks));
  std::vector<Scratch<T>> scratch;
  scratch.reserve(threads);
  for (int64_t w = 0; w < threads; ++w) scratch.emplace_back(d, backward);
  linrnn::ParallelFor(pool, sequences * blocks, threads, [&](int64_t task, int64_t worker) {
    const int64_t n = task / blocks, h0 = (task % blocks) * kLanes<T>;
    body(n, h0, std::min(kLanes<T>, d.channels - h0), scratch[worker]);
  });
}

// Shapes shared by both handlers: u is (..., L, H), params (6, H, N) or (..., 6, H, N).
struct Layout {
  Shape shape;
  int64_t sequences = 0;
  bool params_per_sequence = false;
};

ffi::Error Check(ffi::AnyBuffer params, ffi::AnyBuffer u, int64_t chunk, bool reverse,
                 const char* name, Layout* out) {
  const auto u_dims = u.dimensions();
  const auto p_dims = params.dimensions();
  if (u_dims.size() < 2 || p_dims.size() < 3 || p_dims[p_dims.size() - 3] != kParts ||
      p_dims[p_dims.size() - 2] != u_dims[u_dims.size() - 1]) {
    return ffi::Error::InvalidArgument(
        std::string(name) + ": u must have shape (..., L, H) and params (..., 6, H, N).");
  }
  if (chunk < 1) return ffi::Error::InvalidArgument(std::string(name) + ": chunk must be >= 1.");
  Shape& d = out->shape;
  d.length = u_dims[u_dims.size() - 2];
  d.channels = u_dims[u_dims.size() - 1];
  d.states = p_dims[p_dims.size() - 1];
  d.chunk = chunk;
  d.reverse = reverse;
  const int64_t per_sequence = d.length * d.channels;
  out->sequences = per_sequence == 0 ? 0 : u.element_count() / per_sequence;
  const int64_t per_system = kParts * d.channels * d.states;
  const int64_t systems = per_system == 0 ? 0 : params.element_count() / per_system;
  if (per_system != 0 && systems != 1 && systems != out->sequences) {
    return ffi::Error::InvalidArgument(
        std::string(name) + ": params must have shape (6, H, N) or the leading dimensions of u.");
  }
  out->params_per_sequence = systems != 1;
  return ffi::Error::Success();
}

template <typename T>
void Forward(ffi::ThreadPool& pool, const Layout& l, const T* params, const T* u, T* y,
             T* checkpoints) {
  const Shape& d = l.shape;
  const int64_t system = kParts * d.channels * d.states;
  const int64_t sequence = d.length * d.channels;
  const int64_t saved = d.chunks() * 2 * d.states * d.channels;
  ForEachBlock<T>(pool, l.sequences, d, false,
                  [&](int64_t n, int64_t h0, int64_t width, Scratch<T>& s) {
                    ForwardBlock(params + (l.params_per_sequence ? n * system : 0),
                                 u + n * sequence, y + n * sequence, checkpoints + n * saved, d,
                                 h0, width, s);
                  });
}

template <typename T>
void Backward(ffi::ThreadPool& pool, const Layout& l, const T* params, const T* u,
              const T* checkpoints, const T* dy, T* dparams, T* du) {
  const Shape& d = l.shape;
  const int64_t system = kParts * d.channels * d.states;
  const int64_t sequence = d.length * d.channels;
  const int64_t saved = d.chunks() * 2 * d.states * d.channels;
  ForEachBlock<T>(pool, l.sequences, d, true,
                  [&](int64_t n, int64_t h0, int64_t width, Scratch<T>& s) {
                    BackwardBlock(params + (l.params_per_sequence ? n * system : 0),
                                  u + n * sequence, checkpoints + n * saved, dy + n * sequence,
                                  dparams + n * system, du + n * sequence, d, h0, width, s);
                  });
}

ffi::Error BankForward(ffi::ThreadPool pool, ffi::AnyBuffer params, ffi::AnyBuffer u,
                       ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> checkpoints,
                       bool reverse, int64_t chunk) {
  constexpr const char* name = "linrnn_bank_forward";
  Layout l;
  if (ffi::Error e = Check(params, u, chunk, reverse, name, &l); e.failure()) return e;
  const Shape& d = l.shape;
  const int64_t saved = l.sequences * d.chunks() * 2 * d.states * d.channels;
  if (y->element_count() != u.element_count() ||
      static_cast<int64_t>(checkpoints->element_count()) != saved) {
    return ffi::Error::InvalidArgument(
        std::string(name) + ": outputs must be y (..., L, H) and checkpoints (..., K, 2, N, H).");
  }
  const auto dtype = u.element_type();
  if (params.element_type() != dtype || y->element_type() != dtype ||
      checkpoints->element_type() != dtype) {
    return ffi::Error::InvalidArgument(std::string(name) + ": all arrays need one dtype.");
  }
  if (l.sequences == 0) return ffi::Error::Success();
  return linrnn::ForFloatType(dtype, name, [&](auto zero) {
    using T = decltype(zero);
    Forward(pool, l, params.typed_data<T>(), u.typed_data<T>(), y->typed_data<T>(),
            checkpoints->typed_data<T>());
  });
}

ffi::Error BankBackward(ffi::ThreadPool pool, ffi::AnyBuffer params, ffi::AnyBuffer u,
                        ffi::AnyBuffer checkpoints, ffi::AnyBuffer dy,
                        ffi::Result<ffi::AnyBuffer> dparams, ffi::Result<ffi::AnyBuffer> du,
                        bool reverse, int64_t chunk) {
  constexpr const char* name = "linrnn_bank_backward";
  Layout l;
  if (ffi::Error e = Check(params, u, chunk, reverse, name, &l); e.failure()) return e;
  const Shape& d = l.shape;
  if (dy.element_count() != u.element_count() || du->element_count() != u.element_count() ||
      static_cast<int64_t>(checkpoints.element_count()) !=
          l.sequences * d.chunks() * 2 * d.states * d.channels ||
      static_cast<int64_t>(dparams->element_count()) !=
          l.sequences * kParts * d.channels * d.states) {
    return ffi::Error::InvalidArgument(
        std::string(name) + ": expected checkpoints (..., K, 2, N, H), dy and du (..., L, H), "
        "dparams (..., 6, H, N).");
  }
  const auto dtype = u.element_type();
  if (params.element_type() != dtype || checkpoints.element_type() != dtype ||
      dy.element_type() != dtype || dparams->element_type() != dtype ||
      du->element_type() != dtype) {
    return ffi::Error::InvalidArgument(std::string(name) + ": all arrays need one dtype.");
  }
  if (l.sequences == 0) return ffi::Error::Success();
  return linrnn::ForFloatType(dtype, name, [&](auto zero) {
    using T = decltype(zero);
    Backward(pool, l, params.typed_data<T>(), u.typed_data<T>(), checkpoints.typed_data<T>(),
             dy.typed_data<T>(), dparams->typed_data<T>(), du->typed_data<T>());
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(LinrnnBankForward, BankForward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // params (..., 6, H, N)
                                  .Arg<ffi::AnyBuffer>()  // u (..., L, H)
                                  .Ret<ffi::AnyBuffer>()  // y (..., L, H)
                                  .Ret<ffi::AnyBuffer>()  // checkpoints (..., K, 2, N, H)
                                  .Attr<bool>("reverse")
                                  .Attr<int64_t>("chunk"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(LinrnnBankBackward, BankBackward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // params (..., 6, H, N)
                                  .Arg<ffi::AnyBuffer>()  // u (..., L, H)
                                  .Arg<ffi::AnyBuffer>()  // checkpoints (..., K, 2, N, H)
                                  .Arg<ffi::AnyBuffer>()  // dy (..., L, H)
                                  .Ret<ffi::AnyBuffer>()  // dparams (..., 6, H, N)
                                  .Ret<ffi::AnyBuffer>()  // du (..., L, H)
                                  .Attr<bool>("reverse")
                                  .Attr<int64_t>("chunk"));
