// The decode variants' names (variant_names.h).
#include "kernels/variant_names.h"

#include <string>

namespace attnrt::kernels {

Status CheckDecodeVariantName(std::string_view name) {
  std::string names;
  for (std::string_view n : kDecodeVariantNames) {
    if (n == name) return Status::Ok();
    names += (names.empty() ? "" : ", ") + std::string(n);
  }
  return NotFoundError("decode variant '" + std::string(name) + "' not found; variants: " + names);
}

}  // namespace attnrt::kernels
