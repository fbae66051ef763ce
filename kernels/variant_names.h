// The decode variants' names, in the table's order (simplest first, the production default
// last). No CUDA header: a build without CUDA still checks RuntimeOptions::decode_path against
// them; decode_paths.cc checks at compile time that the table lists exactly these.
#pragma once

#include <array>
#include <string_view>

#include <attnrt/status.h>

namespace attnrt::kernels {

inline constexpr std::array<std::string_view, 4> kDecodeVariantNames = {
    "simple", "gemm", "split_kv_simt", "split_kv"};

// OK when `name` is a variant's; NotFound listing the names otherwise (FindDecodeVariant's text).
Status CheckDecodeVariantName(std::string_view name);

}  // namespace attnrt::kernels
