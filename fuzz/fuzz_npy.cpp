// libFuzzer target: tileattn::npy::read (tools/npy.cpp) on arbitrary file contents.
//
// The input bytes become the contents of a memory file (memfd) read through its /proc/self/fd
// path, so the reader runs exactly as on a disk file. NpyError is the expected outcome of a
// malformed file; any other exception, a crash or a sanitizer report is a finding. A file that
// reads successfully must also survive a round trip: written back with npy::write and read
// again, it gives the same type, shape and bytes.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "npy.hpp"

namespace {

// One memfd per process, rewritten for each input: creating files per input would dominate.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(memfd_create(name, 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  void assign(const std::uint8_t* data, std::size_t size) const {
    if (ftruncate(fd_, 0) != 0) std::abort();
    std::size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const MemFile input("fuzz_npy_input");
  static const MemFile round_trip("fuzz_npy_round_trip");
  input.assign(data, size);

  tileattn::npy::Array array;
  try {
    array = tileattn::npy::read(input.path());
  } catch (const tileattn::npy::NpyError&) {
    return 0;  // a malformed file, rejected as it should be
  }

  // The reader's own invariants on success.
  const auto count = array.element_count();
  if (count < 0 || array.bytes.size() !=
                       static_cast<std::size_t>(count) * tileattn::npy::element_size(array.type))
    __builtin_trap();

  tileattn::npy::write(round_trip.path(), array.type, array.shape, array.bytes.data());
  const tileattn::npy::Array again = tileattn::npy::read(round_trip.path());
  if (again.type != array.type || again.shape != array.shape || again.bytes != array.bytes)
    __builtin_trap();
  return 0;
}
