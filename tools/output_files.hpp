// The output files of `tileattn run`: checked before anything is read or computed, written only
// after the computation succeeded, each through a temporary file in its own directory that is
// flushed to disk before it is renamed into place. A failed run leaves no new file and leaves
// every existing one as it was: the temporary files are removed on every failure path, and when
// the second of two renames fails, the first is undone.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tileattn::tools {

struct NamedPath {
  std::string flag;  // "--out", "--q", ...
  std::string path;  // empty: not given
};

class OutputFiles {
 public:
  // Refuses (ToolError naming the flag), before anything is created:
  // - an output that is the same file as an input or as another output, by file identity
  //   (device and inode, through symbolic and hard links) for files that exist, and by path
  //   (the directory resolved, symbolic links included) for outputs that do not exist yet;
  // - an existing output that is not a regular file: a symbolic link (even to a regular file:
  //   replacing it would silently cut the link), a directory, a FIFO, a device or a socket;
  // - an output whose directory does not exist or does not let us create files.
  OutputFiles(std::vector<NamedPath> outputs, const std::vector<NamedPath>& inputs);
  ~OutputFiles();  // removes every temporary file that was not renamed into place
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;

  // Writes output i (`head`, then `size` bytes of `data`) to a new temporary file beside it,
  // created exclusively with mode 0666 & ~umask, and flushes it to disk (fsync).
  void stage(std::size_t i, std::string_view head, const void* data, std::size_t size);
  // Renames every staged file over its output. Every output must have been staged.
  void commit();

 private:
  std::vector<NamedPath> outputs_;
  std::vector<std::string> temps_;  // per output: its temporary file, empty when none exists
};

}  // namespace tileattn::tools
