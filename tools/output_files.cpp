#include "output_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <system_error>

#include "tensor_io.hpp"

namespace tileattn::tools {
namespace {

namespace fs = std::filesystem;

struct FileId {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const FileId& o) const { return device == o.device && inode == o.inode; }
};

// The file `path` names, through symbolic links; nothing when it does not exist.
std::optional<FileId> identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

// The directory an output is created in ("." for a bare file name).
fs::path directory_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// The absolute path with its directory resolved through symbolic links, so that two spellings of
// a file that does not exist yet compare equal.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(fs::absolute(directory_of(path), ec), ec);
  if (ec) dir = fs::absolute(directory_of(path)).lexically_normal();
  return dir / fs::path(path).filename();
}

const char* kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void refuse(const NamedPath& out, const std::string& why) {
  throw ToolError(out.flag + ": refusing to write " + out.path + ": " + why);
}

[[noreturn]] void io_failure(const NamedPath& out, const std::string& what, int error) {
  throw ToolError(out.flag + ": cannot write " + out.path + ": " + what + ": " +
                  std::strerror(error));
}

// Writes all of [data, data + size) to fd; false (errno set) on failure.
bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, std::min<std::size_t>(size, std::size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Moves `from` to `to`. exchange: `to` exists and trades places with `from` (so that it can be
// put back); otherwise `to` must not exist. Falls back to a plain rename where the file system
// has no renameat2 flags (then a later failure cannot be undone).
int move_into_place(const std::string& from, const std::string& to, bool exchange,
                    bool& reversible) {
  reversible = true;
  const int rc = ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(),
                             exchange ? RENAME_EXCHANGE : RENAME_NOREPLACE);
  if (rc == 0 || (errno != EINVAL && errno != ENOSYS)) return rc;
  reversible = false;
  return ::rename(from.c_str(), to.c_str());
}

}  // namespace

OutputFiles::OutputFiles(std::vector<NamedPath> outputs, const std::vector<NamedPath>& inputs)
    : outputs_(std::move(outputs)), temps_(outputs_.size()) {
  std::vector<std::optional<FileId>> ids;
  std::vector<fs::path> paths;
  for (const NamedPath& out : outputs_) {
    if (out.path.empty()) refuse(out, "the path is empty");
    const fs::path name = fs::path(out.path).filename();
    if (name.empty() || name == "." || name == "..") refuse(out, "the path names a directory");
    struct stat st {};
    if (::lstat(out.path.c_str(), &st) == 0) {
      if (S_ISLNK(st.st_mode))
        refuse(out, "it is a symbolic link (name its target, or remove the link, to replace it)");
      if (!S_ISREG(st.st_mode))
        refuse(out, std::string("it is ") + kind_of(st.st_mode) + ", not a regular file");
    } else if (errno != ENOENT && errno != ENOTDIR) {  // ENOTDIR: the directory check says
      refuse(out, std::strerror(errno));
    }
    const fs::path dir = directory_of(out.path);
    struct stat dir_st {};
    if (::stat(dir.c_str(), &dir_st) != 0 || !S_ISDIR(dir_st.st_mode))
      refuse(out, "no directory " + dir.string());
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      refuse(out, "cannot create files in " + dir.string() + ": " + std::strerror(errno));

    const std::optional<FileId> id = identity(out.path);
    const fs::path path = resolved(out.path);
    for (const NamedPath& in : inputs) {
      if (in.path.empty()) continue;
      const std::optional<FileId> in_id = identity(in.path);
      if ((id && in_id && *id == *in_id) || path == resolved(in.path))
        refuse(out, "it is the same file as the input " + in.flag + " " + in.path);
    }
    for (std::size_t j = 0; j < paths.size(); ++j)
      if ((id && ids[j] && *id == *ids[j]) || path == paths[j])
        refuse(out, "it is the same file as " + outputs_[j].flag + " " + outputs_[j].path);
    ids.push_back(id);
    paths.push_back(path);
  }
}

OutputFiles::~OutputFiles() {
  for (const std::string& t : temps_)
    if (!t.empty()) ::unlink(t.c_str());
}

void OutputFiles::stage(std::size_t i, std::string_view head, const void* data, std::size_t size) {
  const NamedPath& out = outputs_.at(i);
  const fs::path dir = directory_of(out.path);
  // Past a file size limit (ulimit -f), fail the write with EFBIG and clean up rather than be
  // killed by SIGXFSZ with the temporary file left behind.
  std::signal(SIGXFSZ, SIG_IGN);
  // A name of our own rather than one derived from the output's: it cannot run past NAME_MAX.
  static std::atomic<unsigned> counter{0};
  std::random_device random;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    const fs::path tmp =
        dir / (".tileattn-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
               std::to_string(random()) + ".tmp");
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      temps_[i] = tmp.string();
    } else if (errno != EEXIST || attempt == 100) {
      io_failure(out, "cannot create a temporary file in " + dir.string(), errno);
    }
  }
  const bool written = write_all(fd, head.data(), head.size()) &&
                       write_all(fd, static_cast<const char*>(data), size) && ::fsync(fd) == 0;
  const int error = errno;
  if (::close(fd) != 0 && written) io_failure(out, "closing the temporary file", errno);
  if (!written) io_failure(out, "writing the temporary file " + temps_[i], error);
}

void OutputFiles::commit() {
  struct Done {
    std::size_t index;
    bool exchanged;   // the old output now sits at temps_[index]
    bool reversible;  // false after a plain rename
  };
  std::vector<Done> done;
  const auto undo = [&] {
    for (auto it = done.rbegin(); it != done.rend(); ++it) {
      const std::string& target = outputs_[it->index].path;
      if (!it->reversible) continue;
      if (it->exchanged)
        ::renameat2(AT_FDCWD, temps_[it->index].c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE);
      else
        ::unlink(target.c_str());
    }
  };
  for (std::size_t i = 0; i < outputs_.size(); ++i) {
    const NamedPath& out = outputs_[i];
    if (temps_[i].empty()) throw ToolError(out.flag + ": nothing was written for " + out.path);
    struct stat st {};
    const bool exists = ::lstat(out.path.c_str(), &st) == 0;
    bool reversible = true;
    if (move_into_place(temps_[i], out.path, exists, reversible) != 0) {
      const int error = errno;
      undo();
      io_failure(out,
                 error == EEXIST ? "it was created by someone else while the tool ran"
                                 : "renaming the temporary file into place",
                 error);
    }
    done.push_back({i, exists && reversible, reversible});
    if (!(exists && reversible)) temps_[i].clear();  // renamed away: nothing left to remove
  }
  // The old outputs (moved to the temporary names by the exchanges) go with the destructor. The
  // directory entries are flushed too, so that the renames survive a crash; failing that is not
  // an error of the run.
  for (const NamedPath& out : outputs_) {
    const int dir = ::open(directory_of(out.path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }
}

}  // namespace tileattn::tools
