#include "client/flags.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft {
namespace {

// Whether argv[first..] asks for help: a `--help` where a flag may stand,
// not the value of a preceding `--name value` nor after `--`.
bool WantsHelp(int argc, char** argv, int first, const std::set<std::string>& valued,
               const std::set<std::string>& boolean) {
  if (valued.count("help") || boolean.count("help")) return false;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") return false;
    if (a == "--help") return true;
    if (a.size() > 2 && a.compare(0, 2, "--") == 0 && a.find('=') == std::string::npos && valued.count(a.substr(2))) {
      ++i;  // its value
    }
  }
  return false;
}

}  // namespace

std::string Flags::HelpText(const std::string& command, const std::set<std::string>& valued,
                            const std::set<std::string>& boolean) {
  std::set<std::string> all = valued;
  all.insert(boolean.begin(), boolean.end());
  std::string out = absl::StrCat("usage: ", command, " [FLAGS] [ARGS]\n",
                                 "flags (--name=VALUE takes a value, a bare --name is a boolean):\n");
  for (const std::string& name : all) {
    absl::StrAppend(&out, "  --", name, valued.count(name) ? "=VALUE" : "", "\n");
  }
  return out;
}

absl::StatusOr<Flags> Flags::Parse(int argc, char** argv, int first, const std::set<std::string>& valued,
                                   const std::set<std::string>& boolean) {
  if (WantsHelp(argc, argv, first, valued, boolean)) {
    std::string command = "weft";
    for (int i = 1; i < first && i < argc; ++i) absl::StrAppend(&command, " ", argv[i]);
    std::fputs(HelpText(command, valued, boolean).c_str(), stdout);
    std::fflush(stdout);
    std::exit(0);
  }
  Flags f;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) f.args_.push_back(argv[i]);
      break;
    }
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      f.args_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (valued.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
        value = argv[++i];
      }
    } else if (boolean.count(name)) {
      if (!inline_value) value = "true";
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " takes no value (or =true/=false)"));
      }
    } else {
      std::vector<std::string> known;
      for (const auto& n : valued) known.push_back("--" + n);
      for (const auto& n : boolean) known.push_back("--" + n);
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name,
                                                     known.empty() ? "" : " (known: " + absl::StrJoin(known, ", ") + ")"));
    }
    f.values_[name] = value;
  }
  return f;
}

std::string Flags::Get(const std::string& name, const std::string& dflt) const {
  auto it = values_.find(name);
  return it == values_.end() ? dflt : it->second;
}

absl::StatusOr<int> Flags::GetInt(const std::string& name, int dflt, int min, int max) const {
  if (!Has(name)) return dflt;
  int v = 0;
  if (!absl::SimpleAtoi(Get(name), &v) || v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", name, "=", Get(name), " must be an integer in [", min, ", ", max, "]"));
  }
  return v;
}

}  // namespace weft
