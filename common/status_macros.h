// The one pair of error-propagation macros used across weft.
//
//   RETURN_IF_ERROR(DoThing());
//   ASSIGN_OR_RETURN(auto value, ComputeValue());
//
// Both evaluate their argument once. ASSIGN_OR_RETURN moves the value out of
// the StatusOr.
#ifndef WEFT_COMMON_STATUS_MACROS_H_
#define WEFT_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define WEFT_CONCAT_INNER_(a, b) a##b
#define WEFT_CONCAT_(a, b) WEFT_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                       \
  do {                                              \
    ::absl::Status weft_status_ = (expr);           \
    if (!weft_status_.ok()) return weft_status_;    \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  WEFT_ASSIGN_OR_RETURN_IMPL_(WEFT_CONCAT_(weft_statusor_, __LINE__), lhs, expr)

#define WEFT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()

namespace weft {

// Prefixes a status message with context, keeping its code:
//   return Annotate(s, "node 'dense0/matmul'");  -> "node 'dense0/matmul': <msg>"
inline absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace weft

#include "absl/strings/str_cat.h"

#endif  // WEFT_COMMON_STATUS_MACROS_H_
