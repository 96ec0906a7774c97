// A stand-in for libFuzzer's driver in builds without it (gcc, or clang
// without --define=fuzz=1): runs LLVMFuzzerTestOneInput once on every file
// named on the command line and every file under every directory named, in
// sorted order. Flags (arguments starting with '-') are ignored, so a
// command line written for libFuzzer replays here too. A crash is the
// target's; a missing or unreadable argument fails the run with its name.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

// Appends `path` (a file) or the files below it (a directory) to `out`.
bool Collect(const std::string& path, std::vector<std::string>* out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "replay: cannot stat %s\n", path.c_str());
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    out->push_back(path);
    return true;
  }
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    std::fprintf(stderr, "replay: cannot list %s\n", path.c_str());
    return false;
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  bool ok = true;
  for (const std::string& name : names) ok &= Collect(path + "/" + name, out);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> files;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    ok &= Collect(argv[i], &files);
  }
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      ok = false;
      continue;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::fprintf(stderr, "replay: ran %zu inputs\n", files.size());
  return ok ? 0 : 1;
}
