// Host tensor staging for the tileattn tool: .npy files <-> owned host buffers <-> the
// tileattn::Tensor views that AttentionArgs takes. This is the one place where buffers become
// views, so a device backend (--backend cuda) slots in by copying AttentionBuffers to device
// memory and binding device views instead of host ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "npy.hpp"
#include "tileattn/tileattn.hpp"

namespace tileattn::tools {

// An error in the tool's input (files, options); reported as one line like tileattn::Error.
class ToolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Memory order of q, k, v and out: bshd = [B, L, H, D] (the library's logical order), bhsd =
// [B, H, L, D] (seen through tileattn::bhsd_as_bshd, no copy).
enum class Layout : std::uint8_t { bshd, bhsd };

// An owned, C-ordered host array with a tileattn dtype. Empty (no data) stands for "absent".
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<std::int64_t> shape);  // zero-filled
  // Uninitialised, for a buffer that is written in full before it is read (kernel outputs).
  struct Uninitialized {};
  HostTensor(DType dtype, std::vector<std::int64_t> shape, Uninitialized /*tag*/);
  HostTensor(DType dtype, std::vector<std::int64_t> shape, npy::Buffer bytes);

  bool empty() const noexcept { return bytes_.empty() && shape_.empty(); }
  DType dtype() const noexcept { return dtype_; }
  const std::vector<std::int64_t>& shape() const noexcept { return shape_; }
  std::int64_t numel() const noexcept;
  std::size_t size_bytes() const noexcept { return bytes_.size(); }
  void* data() noexcept { return bytes_.data(); }
  const void* data() const noexcept { return bytes_.data(); }
  template <typename T>
  T* data_as() noexcept {
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <typename T>
  const T* data_as() const noexcept {
    return reinterpret_cast<const T*>(bytes_.data());
  }

  // A contiguous view; an absent Tensor when empty. `name` is used in the error for ranks > 4.
  Tensor view(const char* name) const;

 private:
  DType dtype_ = DType::f32;
  std::vector<std::int64_t> shape_;
  npy::Buffer bytes_;
};

// Reads a .npy file; `name` (e.g. "--q") prefixes every error. The dtype is the file's.
HostTensor load_npy(const std::filesystem::path& path, const char* name);
// Writes an f32/f16/boolean/i32/i64 tensor as .npy (bf16 has no .npy type: convert first).
void save_npy(const std::filesystem::path& path, const HostTensor& t);
// The bytes of a .npy file that precede t's data (npy::preamble for its dtype and shape).
std::string npy_preamble(const HostTensor& t);

bool is_float_storage(DType dtype) noexcept;  // f32, f16, bf16
// A copy of a float tensor in another float storage type (the tensor itself when equal).
HostTensor convert(HostTensor t, DType to);
// Element i of a float tensor as f32.
float load_f32(const HostTensor& t, std::int64_t i) noexcept;

// The buffers of one attention call. q, k, v, out are in `layout` (rank 3 [total, H, D] for a
// varlen batch); lse is [B, Hq, Lq] f32 ([Hq, total_q] for varlen). Optional ones are empty
// when absent.
struct AttentionBuffers {
  Layout layout = Layout::bshd;
  HostTensor q, k, v, out, lse;
  HostTensor mask, key_lengths, alibi_slopes;
  HostTensor cu_seqlens_q, cu_seqlens_k;

  // Points the tensor fields of `args` at these buffers (zero-copy views).
  void bind(AttentionArgs& args) const;
};

// The shape out must have for q, v in `layout` (q's leading dims, v's head dim; rank 3 for a
// varlen batch), or a dummy [1, 1, 1, 1] when q or v is neither so that the library reports
// the real problem.
std::vector<std::int64_t> out_shape(const HostTensor& q, const HostTensor& v);
// [B, Hq, Lq] for q in `layout`, [Hq, total_q] for a rank-3 (varlen) q (dummy [1, 1, 1] else).
std::vector<std::int64_t> lse_shape(const HostTensor& q, Layout layout);
// The largest sequence length in cu_seqlens offsets (i32 [B + 1]); 0 when there are none.
// Offsets that decrease count as 0 here: the library reports them.
std::int64_t max_sequence_length(const HostTensor& cu_seqlens);

}  // namespace tileattn::tools
