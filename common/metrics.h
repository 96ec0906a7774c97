// Metrics: counters, gauges and histograms with labels, rendered in the
// Prometheus text exposition format (version 0.0.4) for a daemon's
// /metrics page (common/monitoring_server.h).
//
// A metric family has a name ("weft_steps_total"), a help text and label
// names; each distinct tuple of label values is one child, created on first
// use and kept until Remove. Hot paths look a child up once and keep the
// pointer: a child's address is stable for the registry's life (or until
// Remove), and updating it is a few relaxed atomic operations with no lock
// and no allocation.
//
// Names follow Prometheus' conventions (docs/observability.md): the weft_
// prefix, base units (seconds, bytes) in the name, _total on counters.
//
// Thread-safety: everything here is thread-safe. Registry::Default() is the
// process's registry; it is never destroyed.
#ifndef WEFT_COMMON_METRICS_H_
#define WEFT_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace weft {
namespace metrics {

// Label values, in the order of the family's label names.
using Labels = std::vector<std::string>;

// A value that only goes up (resets only with the process).
class Counter {
 public:
  // REQUIRES: v >= 0.
  void Increment(double v = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into fixed buckets (upper bounds, ascending), with
// their sum and count.
class Histogram {
 public:
  explicit Histogram(const std::vector<double>& bounds);
  void Observe(double v);
  // Cumulative counts per bound, then the total (the +Inf bucket).
  std::vector<uint64_t> CumulativeCounts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // one per bound, plus +Inf
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

// Bucket bounds for durations in seconds: 100 us to about 100 s.
const std::vector<double>& DurationBuckets();
// Bucket bounds for sizes in bytes: 64 B to 1 GiB, by powers of 4.
const std::vector<double>& ByteBuckets();

enum class Type { kCounter, kGauge, kHistogram };

class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names, Type type)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)), type_(type) {}
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  Type type() const { return type_; }
  // Appends this family in the text format.
  virtual void Render(std::string* out) const = 0;

 protected:
  // `{a="x",b="y"` without the closing brace (empty without labels).
  std::string LabelText(const Labels& values) const;
  void RenderHeader(std::string* out) const;

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const Type type_;
};

template <typename T>
class Family : public FamilyBase {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names, Type type,
         std::vector<double> bounds = {})
      : FamilyBase(std::move(name), std::move(help), std::move(label_names), type), bounds_(std::move(bounds)) {}

  // The child for `values` (as many as the family has label names; a
  // mismatch is a programmer error and CHECK-fails), created on first use.
  T* With(const Labels& values);
  // Drops a child (a finished job's series). Pointers to it dangle.
  void Remove(const Labels& values);
  void Render(std::string* out) const override;

 private:
  std::unique_ptr<T> Make() const;
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::map<Labels, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

// Values owned elsewhere (allocator bytes, tasks answering), read at each
// scrape: the callback returns every child's labels and value.
using GaugeCallback = std::function<std::vector<std::pair<Labels, double>>()>;

class Registry {
 public:
  static Registry& Default();

  // Each returns the family of that name, creating it the first time; a
  // second call with the same name must give the same type and label names
  // (CHECK). Names and label names must be valid Prometheus names (CHECK).
  Family<Counter>* AddCounter(const std::string& name, const std::string& help,
                              const std::vector<std::string>& label_names = {});
  Family<Gauge>* AddGauge(const std::string& name, const std::string& help,
                          const std::vector<std::string>& label_names = {});
  Family<Histogram>* AddHistogram(const std::string& name, const std::string& help,
                                  const std::vector<std::string>& label_names,
                                  const std::vector<double>& bounds = DurationBuckets());
  // Replaces an earlier callback of the same name.
  void AddGaugeCallback(const std::string& name, const std::string& help, const std::vector<std::string>& label_names,
                        GaugeCallback callback);
  void RemoveGaugeCallback(const std::string& name);

  // Every family, sorted by name, in the Prometheus text format.
  std::string Render() const;

 private:
  FamilyBase* Find(const std::string& name, Type type, const std::vector<std::string>& label_names)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<FamilyBase>> callbacks_ ABSL_GUARDED_BY(mu_);
};

// The text format's escaping of a label value (\\, \", \n) and of a value.
std::string EscapeLabelValue(const std::string& v);
std::string FormatValue(double v);

}  // namespace metrics
}  // namespace weft

#endif  // WEFT_COMMON_METRICS_H_
