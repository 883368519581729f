#include "engine/train/fault_injection.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>

#include "engine/train/config.h"

namespace lt::train {

// LINTRAIN_INJECT_NONFINITE: step numbers and ranges ("3,7,10..12"; commas or spaces),
// sorted, read once per process; ConfigError naming the variable on a bad list.
const std::vector<int64_t>& inject_nonfinite_steps() {
  static const std::vector<int64_t> steps = [] {
    std::vector<int64_t> out;
    const char* env = std::getenv("LINTRAIN_INJECT_NONFINITE");
    if (!env) return out;
    const std::string text = env;
    auto bad = [&](const std::string& item) {
      return ConfigError("LINTRAIN_INJECT_NONFINITE '" + text + "': bad item '" + item +
                         "' (expected step numbers >= 1 or ranges A..B, separated by commas)");
    };
    auto number = [&](const std::string& t, const std::string& item) {
      if (t.empty() || t.size() > 12 || t.find_first_not_of("0123456789") != std::string::npos) throw bad(item);
      const int64_t v = std::stoll(t);
      if (v < 1) throw bad(item);
      return v;
    };
    std::string item;
    std::istringstream is(text);
    while (std::getline(is, item, ',')) {
      std::istringstream words(item);
      for (std::string w; words >> w;) {
        const size_t dots = w.find("..");
        if (dots == std::string::npos) {
          out.push_back(number(w, w));
          continue;
        }
        const int64_t a = number(w.substr(0, dots), w), b = number(w.substr(dots + 2), w);
        if (a > b || b - a > 1000000) throw bad(w);
        for (int64_t s = a; s <= b; ++s) out.push_back(s);
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }();
  return steps;
}

}  // namespace lt::train
