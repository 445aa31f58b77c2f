// What the native kernels share: ParallelFor, their one scheduler, and ForFloatType, the dtype
// dispatch of every FFI handler.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace linrnn {

// Runs task(k, worker) for k = 0..count-1 on up to `threads` workers: the calling thread
// (worker 0) and threads - 1 jobs scheduled on XLA's intra-op pool (workers 1..threads-1, so a
// task can use per-worker scratch). Returns when every task is done.
//
// The caller never waits for a scheduled job to *start*: the pool's threads may all be busy, or
// the caller may itself be one of them, and waiting for them could deadlock. It claims tasks
// until none is left and then waits only for tasks that other workers claimed. A job that starts
// late finds nothing to claim and touches only the shared counters, which it co-owns; `task` is
// used only for claimed tasks, which the caller is still waiting for, so it is alive.
template <typename F>
void ParallelFor(xla::ffi::ThreadPool& pool, int64_t count, int64_t threads, const F& task) {
  threads = std::max<int64_t>(1, std::min(threads, count));
  if (threads <= 1) {
    for (int64_t k = 0; k < count; ++k) task(k, int64_t{0});
    return;
  }
  struct Shared {
    std::atomic<int64_t> next{0};
    int64_t done = 0;
    std::mutex mutex;
    std::condition_variable all_done;
  };
  auto shared = std::make_shared<Shared>();
  auto work = [shared, count, &task](int64_t worker) {
    for (int64_t k; (k = shared->next.fetch_add(1)) < count;) {
      task(k, worker);
      std::lock_guard<std::mutex> lock(shared->mutex);
      if (++shared->done == count) shared->all_done.notify_one();
    }
  };
  for (int64_t w = 1; w < threads; ++w) pool.Schedule([work, w] { work(w); });
  work(0);
  std::unique_lock<std::mutex> lock(shared->mutex);
  shared->all_done.wait(lock, [&] { return shared->done == count; });
}

// Calls body(T{}) with T = float or double, the element type of a float32 or float64 buffer, so
// that a handler writes its typed call once; any other dtype is an error naming the handler.
template <typename Body>
xla::ffi::Error ForFloatType(xla::ffi::DataType dtype, const std::string& handler, Body&& body) {
  switch (dtype) {
    case xla::ffi::DataType::F32:
      body(float{});
      return xla::ffi::Error::Success();
    case xla::ffi::DataType::F64:
      body(double{});
      return xla::ffi::Error::Success();
    default:
      return xla::ffi::Error::InvalidArgument(
          handler + ": unsupported dtype; accepted: float32, float64.");
  }
}

}  // namespace linrnn
