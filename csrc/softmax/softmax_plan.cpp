// FAE_SOFTMAX_CONFIG parsing (see softmax_plan.h). Host-only; built in CPU-only builds too, where nothing
// calls it.
#include "softmax/softmax_plan.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <sstream>

namespace flash_attn_ext {
namespace softmax {
namespace {

constexpr const char* kEnv = "FAE_SOFTMAX_CONFIG";

int parse_int(const std::string& key, const std::string& value) {
  size_t used = 0;
  int v = -1;
  try {
    v = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TORCH_CHECK(used == value.size() && !value.empty() && v >= 0, kEnv, ": ", key, "=", value,
              " is not a non-negative integer");
  return v;
}

}  // namespace

RowsPlan parse_rows_plan(const std::string& text) {
  RowsPlan plan;
  bool has_kind = false;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    TORCH_CHECK(eq != std::string::npos, kEnv, ": '", item, "' is not key=value (in '", text, "')");
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (key == "kind") {
      has_kind = true;
      if (value == "warp") plan.kind = RowsKind::Warp;
      else if (value == "block") plan.kind = RowsKind::Block;
      else if (value == "split") plan.kind = RowsKind::Split;
      else if (value == "stream") plan.kind = RowsKind::Stream;
      else if (value == "pipe") plan.kind = RowsKind::Pipe;
      else if (value == "dual") plan.kind = RowsKind::Dual;
      else if (value == "resident") plan.kind = RowsKind::Resident;
      else TORCH_CHECK(false, kEnv, ": kind must be warp, block, split, stream, pipe, dual or resident, got '", value,
                       "'");
    } else if (key == "lanes") {
      plan.lanes = parse_int(key, value);
    } else if (key == "vpt") {
      plan.vpt = value == "small" ? kVptSmall : value == "large" ? kVptLarge : parse_int(key, value);
    } else if (key == "threads") {
      plan.threads = parse_int(key, value);
    } else if (key == "smem") {
      plan.smem = parse_int(key, value);
    } else if (key == "chunks") {
      plan.chunks = parse_int(key, value);
    } else if (key == "bpsm") {
      plan.bpsm = parse_int(key, value);
    } else if (key == "steps") {
      plan.steps = parse_int(key, value);
    } else if (key == "pieces") {
      plan.pieces = parse_int(key, value);
    } else if (key == "rows") {
      plan.rows = parse_int(key, value);
    } else if (key == "grid") {
      plan.grid = parse_int(key, value);
    } else {
      TORCH_CHECK(false, kEnv, ": unknown key '", key,
                  "' (keys: kind, lanes, vpt, threads, smem, chunks, bpsm, steps, pieces, rows, grid)");
    }
  }
  TORCH_CHECK(has_kind, kEnv, "='", text, "' names no kind (kind=warp|block|split|stream|pipe|dual|resident)");
  return plan;
}

const RowsPlan* forced_rows_plan() {
  // Function-local static: parsed once, thread-safe. A malformed value throws on every call (the static
  // is not initialized by a throwing initializer), so the error is never silently dropped.
  static const RowsPlan* plan = []() -> const RowsPlan* {
    const char* env = std::getenv(kEnv);
    if (env == nullptr || env[0] == '\0') return nullptr;
    return new RowsPlan(parse_rows_plan(env));
  }();
  return plan;
}

bool log_rows_plans() {
  static const bool on = [] {
    const char* env = std::getenv("FAE_SOFTMAX_LOG_PLAN");
    return env != nullptr && std::string(env) == "1";
  }();
  return on;
}

std::string describe(const RowsPlan& p) {
  static const char* kKinds[] = {"warp", "block", "split", "stream", "pipe", "dual", "resident"};
  std::ostringstream s;
  s << "kind=" << kKinds[static_cast<int>(p.kind)] << ",lanes=" << p.lanes << ",vpt=" << p.vpt
    << ",threads=" << p.threads << ",smem=" << p.smem << ",chunks=" << p.chunks << ",bpsm=" << p.bpsm
    << ",steps=" << p.steps << ",pieces=" << p.pieces << ",rows=" << p.rows << ",grid=" << p.grid;
  return s.str();
}

}  // namespace softmax
}  // namespace flash_attn_ext
