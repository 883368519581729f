#include "engine/train/bench.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace lt::train {

Spread spread_of(std::vector<double> v) {
  Spread s;
  s.n = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  s.median = at(0.5);
  s.p10 = at(0.1);
  s.p90 = at(0.9);
  return s;
}

nlohmann::json spread_json(const Spread& s) {
  if (s.n == 0) return nullptr;
  return {{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}, {"n", s.n}};
}

namespace {

// Runs a command and returns its standard output ("" when it cannot run).
std::string run_capture(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((cmd + " 2>/dev/null").c_str(), "r"), pclose);
  if (!pipe) return "";
  std::string out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  for (auto& f : out) {
    const size_t a = f.find_first_not_of(' '), b = f.find_last_not_of(' ');
    f = a == std::string::npos ? "" : f.substr(a, b - a + 1);
  }
  return out;
}

double number_or_nan(const std::string& s) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    return used > 0 ? v : NAN;
  } catch (...) { return NAN; }
}

}  // namespace

nlohmann::json card_state(Device device) {
  if (!device.is_cuda()) return {{"available", false}, {"why", "CPU backend"}};
  const std::string idx = std::to_string(device.index);
  const std::string q = run_capture(
      "nvidia-smi -i " + idx +
      " --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,utilization.gpu,uuid"
      " --format=csv,noheader,nounits");
  if (q.empty()) return {{"available", false}, {"why", "nvidia-smi did not answer"}};
  const auto f = split(q.substr(0, q.find('\n')), ',');
  if (f.size() < 8) return {{"available", false}, {"why", "unexpected nvidia-smi output: " + q}};
  nlohmann::json j = {{"available", true},
                      {"name", f[0]},
                      {"driver", f[1]},
                      {"sm_clock_mhz", number_or_nan(f[2])},
                      {"sm_clock_max_mhz", number_or_nan(f[3])},
                      {"mem_clock_mhz", number_or_nan(f[4])},
                      {"temperature_c", number_or_nan(f[5])},
                      {"utilization_pct", number_or_nan(f[6])}};
  const std::string& uuid = f[7];
  nlohmann::json procs = nlohmann::json::array();
  const std::string apps =
      run_capture("nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name --format=csv,noheader");
  std::istringstream lines(apps);
  for (std::string line; std::getline(lines, line);) {
    const auto p = split(line, ',');
    if (p.size() >= 3 && p[0] == uuid)
      procs.push_back({{"pid", static_cast<int64_t>(number_or_nan(p[1]))}, {"name", p[2]}});
  }
  j["processes"] = procs;
  return j;
}

std::vector<std::string> card_warnings(const nlohmann::json& before, const nlohmann::json& after, int64_t own_pid) {
  std::vector<std::string> w;
  for (const auto* st : {&before, &after}) {
    const char* when = st == &before ? "before" : "after";
    if (!st->value("available", false)) {
      w.push_back(std::string("card state unknown ") + when + " the run: " + st->value("why", std::string("?")));
      continue;
    }
    for (const auto& p : (*st)["processes"])
      if (p.value("pid", int64_t{-1}) != own_pid)
        w.push_back(std::string("another process on the GPU ") + when + " the run: pid " +
                    std::to_string(p.value("pid", int64_t{-1})) + " (" + p.value("name", std::string("?")) + ")");
    const double temp = st->value("temperature_c", 0.0);
    if (temp >= 80.0)
      w.push_back(std::string("GPU at ") + std::to_string(static_cast<int>(temp)) + " C " + when + " the run");
  }
  if (before.value("available", false)) {
    const double util = before.value("utilization_pct", 0.0);
    if (util > 5.0) w.push_back("GPU " + std::to_string(static_cast<int>(util)) + " % busy before the run");
  }
  if (after.value("available", false)) {
    const double sm = after.value("sm_clock_mhz", 0.0), mx = after.value("sm_clock_max_mhz", 0.0);
    if (mx > 0.0 && sm > 0.0 && sm < 0.9 * mx)
      w.push_back("SM clock " + std::to_string(static_cast<int>(sm)) +
                  " MHz at the end of the run, under 90 % of its " + std::to_string(static_cast<int>(mx)) +
                  " MHz maximum (throttled or power-capped?)");
  }
  return w;
}

void BenchRecorder::add_step(double step_ms) { step_ms_.push_back(step_ms); }

void BenchRecorder::add_timed(const StepTiming& t) {
  fwd_ms_.push_back(t.fwd_ms);
  bwd_ms_.push_back(t.bwd_ms);
  optim_ms_.push_back(t.optim_ms);
  for (const StageTime& s : t.stages) stage_ms_.emplace_back(s.stage, s.inclusive_ms);
}

nlohmann::json BenchRecorder::summary(double tokens_per_step, int64_t launches_per_step) const {
  nlohmann::json j;
  j["kind"] = "lintrain-bench";
  j["steps"] = steps();
  const Spread total = spread_of(step_ms_);
  j["ms_per_step"] = spread_json(total);
  j["fwd_ms"] = spread_json(spread_of(fwd_ms_));
  j["bwd_ms"] = spread_json(spread_of(bwd_ms_));
  j["optim_ms"] = spread_json(spread_of(optim_ms_));
  j["tokens_per_s"] = total.median > 0.0 ? tokens_per_step / (total.median / 1e3) : 0.0;
  j["launches_per_step"] = launches_per_step;
  std::map<std::string, std::vector<double>> by_stage;
  for (const auto& [stage, ms] : stage_ms_) by_stage[stage].push_back(ms);
  nlohmann::json stages = nlohmann::json::object();
  for (auto& [stage, v] : by_stage) stages[stage] = spread_json(spread_of(v));
  j["stages"] = stages;
  return j;
}

namespace {

Spread spread_from(const nlohmann::json& j) {
  Spread s;
  if (!j.is_object()) return s;
  s.median = j.value("median", 0.0);
  s.p10 = j.value("p10", 0.0);
  s.p90 = j.value("p90", 0.0);
  s.n = j.value("n", int64_t{0});
  return s;
}

std::string verdict(const Spread& a, const Spread& b) {
  if (a.n == 0 || b.n == 0) return "";
  const bool apart = (b.median < a.p10 || b.median > a.p90) && (a.median < b.p10 || a.median > b.p90);
  if (!apart) return "within noise";
  return b.median < a.median ? "B faster" : "B slower";
}

}  // namespace

std::string bench_compare(const nlohmann::json& a, const nlohmann::json& b, const std::string& name_a,
                          const std::string& name_b) {
  for (const auto* j : {&a, &b})
    if (!j->is_object() || j->value("kind", std::string()) != "lintrain-bench")
      throw std::runtime_error("bench-compare: '" + (j == &a ? name_a : name_b) +
                               "' is not a trainer --bench result (no \"kind\": \"lintrain-bench\")");
  std::ostringstream os;
  os << "A = " << name_a << "\nB = " << name_b << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-44s %22s %22s %7s  %s\n", "stage (median ms, [p10, p90])", "A", "B", "B/A",
                "verdict");
  os << line;
  auto row = [&](const std::string& label, const Spread& sa, const Spread& sb) {
    if (sa.n == 0 && sb.n == 0) return;
    char ca[64], cb[64];
    std::snprintf(ca, sizeof ca, "%.3f [%.3f, %.3f]", sa.median, sa.p10, sa.p90);
    std::snprintf(cb, sizeof cb, "%.3f [%.3f, %.3f]", sb.median, sb.p10, sb.p90);
    const double ratio = sa.median > 0.0 ? sb.median / sa.median : NAN;
    std::snprintf(line, sizeof line, "%-44s %22s %22s %7.3f  %s\n", label.c_str(), sa.n ? ca : "-", sb.n ? cb : "-",
                  ratio, verdict(sa, sb).c_str());
    os << line;
  };
  row("step", spread_from(a["ms_per_step"]), spread_from(b["ms_per_step"]));
  for (const char* k : {"fwd_ms", "bwd_ms", "optim_ms"})
    row(std::string(k).substr(0, std::string(k).size() - 3), spread_from(a.value(k, nlohmann::json())),
        spread_from(b.value(k, nlohmann::json())));
  const nlohmann::json sa = a.value("stages", nlohmann::json::object()),
                       sb = b.value("stages", nlohmann::json::object());
  for (const auto& [stage, v] : sa.items())
    if (sb.contains(stage)) row("  " + stage, spread_from(v), spread_from(sb[stage]));
  for (const auto& [stage, v] : sa.items())
    if (!sb.contains(stage)) os << "  only in A: " << stage << "\n";
  for (const auto& [stage, v] : sb.items())
    if (!sa.contains(stage)) os << "  only in B: " << stage << "\n";
  return os.str();
}

}  // namespace lt::train
