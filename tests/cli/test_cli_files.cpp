// The files of `tileattn run` are safe: an output that is an input, the other output, a link, a
// FIFO, a device or a directory is refused before anything is computed; a failed run leaves the
// inputs byte-identical, creates no file and leaves no temporary behind. Also OutputFiles
// (tools/output_files.cpp) on its own, for failures the tool cannot be made to hit on demand.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "cli_test_support.hpp"
#include "output_files.hpp"
#include "tensor_io.hpp"

namespace tileattn::cli_test {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Everything in `dir`, recursively: each entry's type and what identifies its contents (a
// regular file's bytes, a link's target, a device's number).
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> s;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string path = e.path().string();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    std::string what;
    if (S_ISREG(st.st_mode))
      what = "file:" + slurp(path);
    else if (S_ISLNK(st.st_mode))
      what = "link:" + fs::read_symlink(path).string();
    else if (S_ISDIR(st.st_mode))
      what = "dir";
    else if (S_ISFIFO(st.st_mode))
      what = "fifo";
    else
      what = "node:" + std::to_string(st.st_rdev);
    s[fs::relative(e.path(), dir).string()] = what;
  }
  return s;
}

bool any_temporary(const std::map<std::string, std::string>& s) {
  for (const auto& [name, what] : s)
    if (name.find(".tmp") != std::string::npos) return true;
  return false;
}

class CliFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(test_seed());
    write_f32(file("q.npy"), {1, 5, 2, 4}, random_normal(rng, 1 * 5 * 2 * 4));
    write_f32(file("k.npy"), {1, 6, 2, 4}, random_normal(rng, 1 * 6 * 2 * 4));
    write_f32(file("v.npy"), {1, 6, 2, 4}, random_normal(rng, 1 * 6 * 2 * 4));
  }

  std::string file(const std::string& name) const { return dir_.file(name); }

  // run with q, k, v of the fixture (each replaceable) and the given extra arguments.
  std::vector<std::string> args(std::vector<std::string> extra) const {
    std::vector<std::string> a = {"run",         "--q", file("q.npy"), "--k",
                                  file("k.npy"), "--v", file("v.npy")};
    for (std::size_t i = 0; i + 1 < extra.size(); i += 2) {
      const auto it = std::find(a.begin(), a.end(), extra[i]);
      if (it != a.end())
        *(it + 1) = extra[i + 1];
      else
        a.insert(a.end(), {extra[i], extra[i + 1]});
    }
    return a;
  }

  // The refusal contract: non-zero exit, one line naming `flag` and saying `why`, and the
  // directory exactly as it was (inputs byte-identical, nothing new, no temporary file).
  void expect_refused(const std::vector<std::string>& run_args, const std::string& flag,
                      const std::string& why) {
    SCOPED_TRACE(seed_note());
    const auto before = snapshot(dir_.path());
    const CliResult r = run_cli(run_args, scratch_.path());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(r.err_lines(), 1) << r.err;
    EXPECT_NE(r.err.find(flag + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    const auto after = snapshot(dir_.path());
    EXPECT_EQ(after, before) << r.err;
    EXPECT_FALSE(any_temporary(after));
  }

  TempDir dir_, scratch_;
};

TEST_F(CliFiles, ValidRunWritesBothOutputs) {
  const CliResult r =
      run_cli(args({"--out", file("out.npy"), "--lse", file("lse.npy")}), scratch_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::int64_t> shape;
  read_f32(file("out.npy"), &shape);
  EXPECT_EQ(shape, (std::vector<std::int64_t>{1, 5, 2, 4}));
  read_f32(file("lse.npy"), &shape);
  EXPECT_EQ(shape, (std::vector<std::int64_t>{1, 2, 5}));
  EXPECT_FALSE(any_temporary(snapshot(dir_.path())));
  // Created like any new file: 0666 less the umask.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(fs::status(file("out.npy")).permissions(),
            static_cast<fs::perms>(0666 & ~static_cast<unsigned>(mask)));
}

TEST_F(CliFiles, OutputIsAnInput) {
  expect_refused(args({"--out", file("q.npy")}), "--out", "same file as the input --q");
  expect_refused(args({"--out", dir_.path().string() + "/./sub/../v.npy"}), "--out",
                 "no directory");  // sub does not exist: refused either way
  fs::create_directory(dir_.path() / "sub");
  expect_refused(args({"--out", dir_.path().string() + "/./sub/../v.npy"}), "--out",
                 "same file as the input --v");
  expect_refused(args({"--out", file("out.npy"), "--lse", file("k.npy")}), "--lse",
                 "same file as the input --k");
}

TEST_F(CliFiles, OutputIsAnInputThroughAHardLink) {
  ASSERT_EQ(::link(file("k.npy").c_str(), file("k_again.npy").c_str()), 0);
  expect_refused(args({"--out", file("k_again.npy")}), "--out", "same file as the input --k");
  // Optional inputs count too.
  std::vector<std::uint8_t> mask(5 * 6, 1);
  npy::write(file("mask.npy"), npy::ElementType::boolean, {5, 6}, mask.data());
  ASSERT_EQ(::link(file("mask.npy").c_str(), file("mask_again.npy").c_str()), 0);
  expect_refused(
      args({"--mask", file("mask.npy"), "--out", file("out.npy"), "--lse", file("mask_again.npy")}),
      "--lse", "same file as the input --mask");
}

TEST_F(CliFiles, OutputIsAnInputThroughASymbolicLink) {
  // The output is the link: refused as a link (it would be replaced, cutting the link).
  fs::create_symlink("q.npy", file("q_link.npy"));
  expect_refused(args({"--out", file("q_link.npy")}), "--out", "symbolic link");
  // The input is a link to the existing output.
  write_f32(file("out.npy"), {1, 5, 2, 4}, std::vector<float>(40, 1.0f));
  fs::create_symlink("out.npy", file("out_link.npy"));
  expect_refused(args({"--q", file("out_link.npy"), "--out", file("out.npy")}), "--out",
                 "same file as the input --q");
  // A linked directory in the output's path.
  fs::create_directory_symlink(dir_.path(), scratch_.path() / "alias");
  expect_refused(args({"--out", (scratch_.path() / "alias" / "v.npy").string()}), "--out",
                 "same file as the input --v");
}

TEST_F(CliFiles, OutputIsTheOtherOutput) {
  expect_refused(args({"--out", file("o.npy"), "--lse", file("o.npy")}), "--lse",
                 "same file as --out");
  fs::create_directory(dir_.path() / "sub");
  expect_refused(args({"--out", file("o.npy"), "--lse", dir_.path().string() + "/sub/.././/o.npy"}),
                 "--lse", "same file as --out");
  fs::create_directory_symlink("sub", dir_.path() / "alias");
  expect_refused(args({"--out", file("sub/o.npy"), "--lse", file("alias/o.npy")}), "--lse",
                 "same file as --out");
  // Existing outputs that are one file through a hard link.
  write_f32(file("old.npy"), {1}, {7.0f});
  ASSERT_EQ(::link(file("old.npy").c_str(), file("old_again.npy").c_str()), 0);
  expect_refused(args({"--out", file("old.npy"), "--lse", file("old_again.npy")}), "--lse",
                 "same file as --out");
}

TEST_F(CliFiles, OutputThatIsNotARegularFile) {
  write_f32(file("target.npy"), {1}, {7.0f});
  fs::create_symlink("target.npy", file("link.npy"));
  expect_refused(args({"--out", file("link.npy")}), "--out", "it is a symbolic link");
  fs::create_symlink("nowhere.npy", file("dangling.npy"));
  expect_refused(args({"--out", file("out.npy"), "--lse", file("dangling.npy")}), "--lse",
                 "it is a symbolic link");
  ASSERT_EQ(::mkfifo(file("fifo").c_str(), 0600), 0);
  expect_refused(args({"--out", file("fifo")}), "--out", "it is a FIFO, not a regular file");
  fs::create_directory(dir_.path() / "d");
  expect_refused(args({"--out", file("d")}), "--out", "it is a directory");
  expect_refused(args({"--out", file("d") + "/"}), "--out", "the path names a directory");
}

TEST_F(CliFiles, OutputThatIsADevice) {
  // A /dev/null of our own where we may make device nodes (root), else /dev/null itself.
  std::string device = file("null");
  if (::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) device = "/dev/null";
  expect_refused(args({"--out", device}), "--out", "it is a character device");
  struct stat st {};
  ASSERT_EQ(::lstat(device.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(CliFiles, OutputDirectoryMissingOrUnwritable) {
  expect_refused(args({"--out", file("missing/out.npy")}), "--out", "no directory");
  expect_refused(args({"--out", file("out.npy"), "--lse", file("q.npy/lse.npy")}), "--lse",
                 "no directory");
  if (::geteuid() == 0) GTEST_SKIP() << "root may write into a read-only directory";
  fs::create_directory(dir_.path() / "ro");
  fs::permissions(dir_.path() / "ro", fs::perms(0555));
  expect_refused(args({"--out", file("ro/out.npy")}), "--out", "cannot create files in");
  fs::permissions(dir_.path() / "ro", fs::perms(0755));
}

TEST_F(CliFiles, ReplacesAnExistingOutputWithoutWritingThroughIt) {
  write_f32(file("out.npy"), {1}, {7.0f});
  const std::string old = slurp(file("out.npy"));
  ASSERT_EQ(::link(file("out.npy").c_str(), file("keep.npy").c_str()), 0);
  const CliResult r = run_cli(args({"--out", file("out.npy")}), scratch_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::int64_t> shape;
  read_f32(file("out.npy"), &shape);
  EXPECT_EQ(shape, (std::vector<std::int64_t>{1, 5, 2, 4}));
  EXPECT_EQ(slurp(file("keep.npy")), old);  // a new file took the name
  EXPECT_FALSE(any_temporary(snapshot(dir_.path())));
}

TEST_F(CliFiles, FailedWriteLeavesNothing) {
  // A file size limit of one block makes writing the output fail after the attention ran (the
  // tool ignores SIGXFSZ to see EFBIG): the existing output stays as it was, and no temporary
  // file is left.
  write_f32(file("out.npy"), {1}, {7.0f});
  std::mt19937_64 rng(test_seed());
  write_f32(file("q.npy"), {1, 64, 2, 4}, random_normal(rng, 64 * 2 * 4));
  const auto before = snapshot(dir_.path());
  std::string command = "ulimit -f 1; exec '" TILEATTN_CLI_PATH "'";
  for (const std::string& a : args({"--out", file("out.npy"), "--lse", file("lse.npy")}))
    command += " '" + a + "'";
  command += " >/dev/null 2>'" + (scratch_.path() / "err.txt").string() + "'";
  const int status = std::system(command.c_str());
  const std::string err = slurp((scratch_.path() / "err.txt").string());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << err;
  EXPECT_NE(err.find("--out: cannot write"), std::string::npos) << err;
  EXPECT_EQ(snapshot(dir_.path()), before);
}

// OutputFiles directly: failures of the second output after the first was written.
class OutputFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directory(dir_.path() / "a");
    fs::create_directory(dir_.path() / "b");
  }
  std::vector<tools::NamedPath> outputs() const {
    return {{"--out", dir_.file("a/out")}, {"--lse", dir_.file("b/lse")}};
  }
  TempDir dir_;
};

TEST_F(OutputFilesTest, CommitsBothAndLeavesNoTemporary) {
  std::ofstream(dir_.file("a/out")) << "old";
  {
    tools::OutputFiles files(outputs(), {});
    files.stage(0, "new ", "out", 3);
    files.stage(1, "new ", "lse", 3);
    files.commit();
  }
  EXPECT_EQ(slurp(dir_.file("a/out")), "new out");
  EXPECT_EQ(slurp(dir_.file("b/lse")), "new lse");
  EXPECT_EQ(snapshot(dir_.path()).size(), 4u);  // a, a/out, b, b/lse
}

TEST_F(OutputFilesTest, SecondStageFails) {
  std::ofstream(dir_.file("a/out")) << "old";
  const auto before_a = snapshot(dir_.path() / "a");
  {
    tools::OutputFiles files(outputs(), {});
    files.stage(0, "new ", "out", 3);
    fs::remove_all(dir_.path() / "b");
    EXPECT_THROW(files.stage(1, "new ", "lse", 3), tools::ToolError);
  }
  EXPECT_EQ(snapshot(dir_.path() / "a"), before_a);
}

TEST_F(OutputFilesTest, SecondRenameFailsAndTheFirstIsUndone) {
  for (const bool first_exists : {true, false}) {
    SCOPED_TRACE(first_exists);
    fs::remove_all(dir_.path() / "a");
    fs::create_directory(dir_.path() / "a");
    fs::create_directory(dir_.path() / "b");
    if (first_exists) std::ofstream(dir_.file("a/out")) << "old";
    const auto before_a = snapshot(dir_.path() / "a");
    {
      tools::OutputFiles files(outputs(), {});
      files.stage(0, "new ", "out", 3);
      files.stage(1, "new ", "lse", 3);
      fs::remove_all(dir_.path() / "b");  // takes the second temporary file with it
      EXPECT_THROW(files.commit(), tools::ToolError);
    }
    EXPECT_EQ(snapshot(dir_.path() / "a"), before_a);
  }
}

}  // namespace
}  // namespace tileattn::cli_test
