#include "common/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weft {
namespace metrics {
namespace {

// A programmer error: a metric declared twice differently, or a bad name.
[[noreturn]] void Fatal(const std::string& what) {
  std::fprintf(stderr, "weft metrics: %s\n", what.c_str());
  std::abort();
}

bool ValidName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

void AtomicAdd(std::atomic<double>* a, double v) {
  double old = a->load(std::memory_order_relaxed);
  while (!a->compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// A family whose children come from a callback at render time.
class CallbackFamily : public FamilyBase {
 public:
  CallbackFamily(std::string name, std::string help, std::vector<std::string> label_names, GaugeCallback callback)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names), Type::kGauge),
        callback_(std::move(callback)) {}
  void Render(std::string* out) const override {
    RenderHeader(out);
    for (const auto& [labels, value] : callback_()) {
      if (labels.size() != label_names_.size()) continue;  // a callback's mistake costs its line only
      std::string l = LabelText(labels);
      absl::StrAppend(out, name_, l, l.empty() ? "" : "}", " ", FormatValue(value), "\n");
    }
  }

 private:
  const GaugeCallback callback_;
};

}  // namespace

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Integral values below 2^53 print exactly, without an exponent.
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return absl::StrCat(static_cast<int64_t>(v));
  // The shortest of 15 or 17 digits that reads back as the same double.
  std::string s = absl::StrFormat("%.15g", v);
  if (std::strtod(s.c_str(), nullptr) != v) s = absl::StrFormat("%.17g", v);
  return s;
}

void Counter::Increment(double v) { AtomicAdd(&value_, v); }

void Gauge::Add(double v) { AtomicAdd(&value_, v); }

Histogram::Histogram(const std::vector<double>& bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, v);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

const std::vector<double>& DurationBuckets() {
  static const auto* b = new std::vector<double>{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                 0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10,
                                                 25,     50,      100};
  return *b;
}

const std::vector<double>& ByteBuckets() {
  static const auto* b = [] {
    auto* v = new std::vector<double>;
    for (double x = 64; x <= 1073741824.0; x *= 4) v->push_back(x);
    return v;
  }();
  return *b;
}

std::string FamilyBase::LabelText(const Labels& values) const {
  std::string out;
  for (size_t i = 0; i < label_names_.size() && i < values.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "{" : ",", label_names_[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  return out;
}

void FamilyBase::RenderHeader(std::string* out) const {
  const char* type = type_ == Type::kCounter ? "counter" : type_ == Type::kGauge ? "gauge" : "histogram";
  absl::StrAppend(out, "# HELP ", name_, " ", EscapeHelp(help_), "\n# TYPE ", name_, " ", type, "\n");
}

template <typename T>
std::unique_ptr<T> Family<T>::Make() const {
  return std::make_unique<T>();
}

template <>
std::unique_ptr<Histogram> Family<Histogram>::Make() const {
  return std::make_unique<Histogram>(bounds_);
}

template <typename T>
T* Family<T>::With(const Labels& values) {
  if (values.size() != label_names_.size()) {
    Fatal(absl::StrCat(name_, " has ", label_names_.size(), " labels, given ", values.size()));
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<T>& child = children_[values];
  if (child == nullptr) child = Make();
  return child.get();
}

template <typename T>
void Family<T>::Remove(const Labels& values) {
  absl::MutexLock lock(&mu_);
  children_.erase(values);
}

template <typename T>
void Family<T>::Render(std::string* out) const {
  RenderHeader(out);
  absl::MutexLock lock(&mu_);
  for (const auto& [labels, child] : children_) {
    const std::string l = LabelText(labels);
    if constexpr (std::is_same_v<T, Histogram>) {
      const std::vector<uint64_t> counts = child->CumulativeCounts();
      const std::string open = l.empty() ? "{" : absl::StrCat(l, ",");
      for (size_t i = 0; i < child->bounds().size(); ++i) {
        absl::StrAppend(out, name_, "_bucket", open, "le=\"", FormatValue(child->bounds()[i]), "\"} ", counts[i],
                        "\n");
      }
      absl::StrAppend(out, name_, "_bucket", open, "le=\"+Inf\"} ", counts.back(), "\n");
      absl::StrAppend(out, name_, "_sum", l, l.empty() ? "" : "}", " ", FormatValue(child->sum()), "\n");
      absl::StrAppend(out, name_, "_count", l, l.empty() ? "" : "}", " ", counts.back(), "\n");
    } else {
      absl::StrAppend(out, name_, l, l.empty() ? "" : "}", " ", FormatValue(child->value()), "\n");
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

Registry& Registry::Default() {
  static auto* r = new Registry();
  return *r;
}

FamilyBase* Registry::Find(const std::string& name, Type type, const std::vector<std::string>& label_names) {
  if (!ValidName(name)) Fatal(absl::StrCat("invalid metric name '", name, "'"));
  for (const std::string& l : label_names) {
    if (!ValidName(l) || l.rfind("__", 0) == 0) Fatal(absl::StrCat("invalid label name '", l, "' of ", name));
  }
  auto it = families_.find(name);
  if (it == families_.end()) return nullptr;
  if (it->second->type() != type) Fatal(absl::StrCat(name, " declared again with another type"));
  return it->second.get();
}

Family<Counter>* Registry::AddCounter(const std::string& name, const std::string& help,
                                      const std::vector<std::string>& label_names) {
  absl::MutexLock lock(&mu_);
  if (FamilyBase* f = Find(name, Type::kCounter, label_names)) return static_cast<Family<Counter>*>(f);
  auto* f = new Family<Counter>(name, help, label_names, Type::kCounter);
  families_[name].reset(f);
  return f;
}

Family<Gauge>* Registry::AddGauge(const std::string& name, const std::string& help,
                                  const std::vector<std::string>& label_names) {
  absl::MutexLock lock(&mu_);
  if (FamilyBase* f = Find(name, Type::kGauge, label_names)) return static_cast<Family<Gauge>*>(f);
  auto* f = new Family<Gauge>(name, help, label_names, Type::kGauge);
  families_[name].reset(f);
  return f;
}

Family<Histogram>* Registry::AddHistogram(const std::string& name, const std::string& help,
                                          const std::vector<std::string>& label_names,
                                          const std::vector<double>& bounds) {
  for (size_t i = 1; i < bounds.size(); ++i) {
    if (!(bounds[i] > bounds[i - 1])) Fatal(absl::StrCat(name, ": bucket bounds must ascend"));
  }
  absl::MutexLock lock(&mu_);
  if (FamilyBase* f = Find(name, Type::kHistogram, label_names)) return static_cast<Family<Histogram>*>(f);
  auto* f = new Family<Histogram>(name, help, label_names, Type::kHistogram, bounds);
  families_[name].reset(f);
  return f;
}

void Registry::AddGaugeCallback(const std::string& name, const std::string& help,
                                const std::vector<std::string>& label_names, GaugeCallback callback) {
  absl::MutexLock lock(&mu_);
  if (Find(name, Type::kGauge, label_names) != nullptr) Fatal(absl::StrCat(name, " is already a gauge"));
  callbacks_[name] = std::make_unique<CallbackFamily>(name, help, label_names, std::move(callback));
}

void Registry::RemoveGaugeCallback(const std::string& name) {
  absl::MutexLock lock(&mu_);
  callbacks_.erase(name);
}

std::string Registry::Render() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, const FamilyBase*> all;
  for (const auto& [name, f] : families_) all[name] = f.get();
  for (const auto& [name, f] : callbacks_) all[name] = f.get();
  std::string out;
  for (const auto& [name, f] : all) f->Render(&out);
  return out;
}

}  // namespace metrics
}  // namespace weft
