// Writing JSON text by hand, safely: strings escaped (quotes, backslashes,
// control characters, and '<' so a string can never close an HTML tag) and
// numbers that JSON can hold (null for NaN and infinities). For the
// monitoring pages and trace files; parsing is protobuf's.
//
// Thread-safety: plain functions.
#ifndef WEFT_COMMON_JSON_TEXT_H_
#define WEFT_COMMON_JSON_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace weft {

// `s` as a JSON string, quotes included.
std::string JsonString(absl::string_view s);
// `v` as a JSON number; "null" when not finite.
std::string JsonNumber(double v);

}  // namespace weft

#endif  // WEFT_COMMON_JSON_TEXT_H_
