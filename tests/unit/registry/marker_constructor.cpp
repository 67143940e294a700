// Linked into the fake plugin `marker`: a load-time constructor that leaves
// a trace, so a test can tell whether anything of the library ran. Writes
// one line to the file named by BALLAST_TEST_MARKER, if set.
#include <cstdio>
#include <cstdlib>

namespace {

__attribute__((constructor)) void leave_marker() {
  const char* path = std::getenv("BALLAST_TEST_MARKER");
  if (path == nullptr) return;
  if (std::FILE* f = std::fopen(path, "a")) {
    std::fputs("constructor ran\n", f);
    std::fclose(f);
  }
}

}  // namespace
