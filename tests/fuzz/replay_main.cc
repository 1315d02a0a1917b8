// A main() for a fuzz target without libFuzzer: runs LLVMFuzzerTestOneInput
// once on each file named, or on each file in each directory named, and
// says which one it is running. Linked with a target (text_fuzz.cc, ...), it
// replays the seed corpus and any crash reproducers kept there as an
// ordinary test in the GCC builds, where clang and libFuzzer are absent.
// A failed property aborts (fuzz_support.h); a clean run exits 0.
//
//   text_fuzz_replay tests/fuzz/corpus/text_fuzz [FILE|DIR]...
//
// Threads: one. Inputs run in name order, so that a replay is repeatable.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path p = argv[i];
    if (fs::is_directory(p)) {
      for (const auto& entry : fs::directory_iterator(p)) {
        if (entry.is_regular_file()) inputs.push_back(entry.path());
      }
    } else if (fs::is_regular_file(p)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs (usage: %s FILE|DIR...)\n", argv[0]);
    return 2;
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& p : inputs) {
    std::fprintf(stderr, "replay: %s\n", p.c_str());
    std::ifstream in(p, std::ios::binary);
    const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in),
                                          std::istreambuf_iterator<char>()};
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  std::fprintf(stderr, "replay: %zu inputs, every property held\n", inputs.size());
  return 0;
}
