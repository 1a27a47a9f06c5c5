// libFuzzer target for the JSON side files: any bytes, parsed as JSON (Json::parse: every value or one
// gnn::Error, never a crash, an unbounded recursion or a number read as something it is not), written
// back and parsed again to the same text, and read as an official eval_indices file
// (parse_eval_indices: every list non-empty, every index an integer >= 0). Seeds: tests/data/json_seeds.
#include <cstdint>
#include <string>
#include <string_view>

#include "io/json.h"
#include "io/tpugraphs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gnn;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const Json j = Json::parse(text, "fuzz.json");
    const std::string once = j.dump();
    if (Json::parse(once, "dumped").dump() != once) __builtin_trap();  // the writer's text reads back as itself
  } catch (const Error&) {
  }
  try {
    for (const auto& [stem, configs] : parse_eval_indices(text, "fuzz.json")) {
      if (configs.empty()) __builtin_trap();
      for (int64_t c : configs)
        if (c < 0) __builtin_trap();
    }
  } catch (const Error&) {
  }
  return 0;
}
