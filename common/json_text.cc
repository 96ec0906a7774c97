#include "common/json_text.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "common/metrics.h"

namespace weft {

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        // Control characters, and '<' so a string can never close a tag.
        if (c < 0x20 || c == '<' || c == 0x7f) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return metrics::FormatValue(v);
}

}  // namespace weft
