// Command-line flags for the `weft` subcommands: `--name=value`, `--name
// value` for flags declared as taking a value, and bare `--name` for booleans.
// Unknown flags are errors naming the flag, so typos never pass silently.
// `--help` prints the subcommand's flags (HelpText) and exits 0.
//
// Thread-safety: plain values.
#ifndef WEFT_CLIENT_FLAGS_H_
#define WEFT_CLIENT_FLAGS_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weft {

class Flags {
 public:
  // `valued`: flags that take a value; `boolean`: flags that do not.
  // argv[first..] are parsed; argv[1..first-1] name the subcommand. When one
  // of them is `--help` (and `help` is not itself a declared flag), prints
  // HelpText to stdout and exits the process with status 0.
  static absl::StatusOr<Flags> Parse(int argc, char** argv, int first, const std::set<std::string>& valued,
                                     const std::set<std::string>& boolean);

  // The usage `--help` prints: a `usage:` line, then every flag on a line of
  // its own, sorted: "  --name=VALUE" for a flag that takes a value,
  // "  --name" for a boolean. Scripts read the flags from these lines
  // (deploy/check/crossref.py checks the manifests' flags against them), so
  // the format is a contract.
  static std::string HelpText(const std::string& command, const std::set<std::string>& valued,
                              const std::set<std::string>& boolean);

  const std::vector<std::string>& args() const { return args_; }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& dflt = "") const;
  // INVALID_ARGUMENT naming the flag when the value is not an integer in range.
  absl::StatusOr<int> GetInt(const std::string& name, int dflt, int min, int max) const;
  bool GetBool(const std::string& name) const { return Has(name) && Get(name) != "false"; }

 private:
  std::vector<std::string> args_;
  std::map<std::string, std::string> values_;
};

}  // namespace weft

#endif  // WEFT_CLIENT_FLAGS_H_
